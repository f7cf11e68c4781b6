"""Segment annotations from the expert's phases: per-frame ids and a per-episode table."""

from __future__ import annotations

import numpy as np
import torch

from odsd.schema.store import SegmentRef


class SegmentTracker:
    """Per-row running segment state: a new segment starts at step 0 and whenever the phase changes."""

    def __init__(self, num_envs: int, device: torch.device) -> None:
        self.phase = torch.zeros(num_envs, dtype=torch.int16, device=device)
        self.step = torch.zeros(num_envs, dtype=torch.int32, device=device)

    def reset(self, rows: torch.Tensor) -> None:
        self.step[rows] = 0

    def advance(
        self, phase: torch.Tensor | None, episode_step: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(segment_id, segment_step, segment_start) for this step's frames."""
        current = torch.zeros_like(self.phase) if phase is None else phase.to(self.phase.device, torch.int16)
        start = (episode_step == 0) | (current != self.phase)
        self.step = torch.where(start, torch.zeros_like(self.step), self.step + 1)
        self.phase = current
        return current.clone(), self.step.clone(), start


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
