"""Per-frame fields computed at copy-out instead of being recorded on every step.

``episode_step``, ``terminated``, ``truncated``, ``segment_step`` and ``segment_start`` follow
from the episode boundaries, the episodes' end flags and ``segment_id``; computing them once per
batch of finished episodes (vectorized over all of them) keeps them out of the per-step
recording path. The values are exactly what per-step recording would store::

    frames |= derived_fields(frames["segment_id"], offsets, terminated, truncated)
"""

from __future__ import annotations

import numpy as np

DERIVED_FIELDS = ("episode_step", "terminated", "truncated", "segment_step", "segment_start")


def derived_fields(
    segment_id: np.ndarray, offsets: np.ndarray, terminated: np.ndarray, truncated: np.ndarray
) -> dict[str, np.ndarray]:
    """The derived fields of concatenated episodes ``offsets[j]:offsets[j + 1]``.

    ``terminated[j]`` / ``truncated[j]`` are episode ``j``'s end flags (set on its last frame only,
    because a row resets as soon as either is set); a segment starts at an episode's first
    frame and wherever ``segment_id`` changes.
    """
    total = int(offsets[-1])
    starts, lengths = offsets[:-1], np.diff(offsets)
    index = np.arange(total, dtype=np.int64)
    episode_step = index - np.repeat(starts, lengths)
    last = offsets[1:] - 1
    ends = {}
    for name, flags in (("terminated", terminated), ("truncated", truncated)):
        column = np.zeros(total, dtype=bool)
        column[last[np.asarray(flags, dtype=bool)]] = True
        ends[name] = column
    segment_start = episode_step == 0
    if total > 1:
        segment_start[1:] |= segment_id[1:] != segment_id[:-1]
    run_start = np.maximum.accumulate(np.where(segment_start, index, 0))
    return {
        "episode_step": episode_step.astype(np.int32),
        **ends,
        "segment_step": (index - run_start).astype(np.int32),
        "segment_start": segment_start,
    }
