"""Segment annotations from the expert's phases: the per-episode table of a finished episode."""

from __future__ import annotations

import numpy as np

from odsd.schema.store import SegmentRef


def segment_table(
    segment_id: np.ndarray, phase_names: list[str], success: bool, terminal_reason: str
) -> list[SegmentRef]:
    """Runs of equal ``segment_id`` as ``SegmentRef`` rows; the last one carries the outcome."""
    if segment_id.size == 0:
        return []
    change = np.flatnonzero(np.diff(segment_id.astype(np.int64))) + 1
    starts = np.concatenate([[0], change])
    ends = np.concatenate([change, [segment_id.size]])
    rows: list[SegmentRef] = []
    for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        pid = int(segment_id[s])
        name = phase_names[pid] if 0 <= pid < len(phase_names) else f"segment_{pid}"
        last = i == len(starts) - 1
        rows.append(
            # Values are built here from typed arrays; skip pydantic validation on the hot path.
            SegmentRef.model_construct(
                name=name,
                start=s,
                end=e,
                success=success if last else True,
                failure_reason=None if (not last or success) else terminal_reason,
            )
        )
    return rows
