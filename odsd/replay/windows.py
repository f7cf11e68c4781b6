"""Segment-aware window selection: anchors whose frame window stays in, or crosses, a segment.

A *window* anchored at global frame position ``p`` covers ``[p - before, p - before + window)``.
Windows never leave their episode. Two modes::

    anchors = segment_windows(seg_id, snap.starts, snap.lengths, window=8, mode="segment")
    # every frame of each window belongs to one segment run (no phase change inside)
    anchors = segment_windows(seg_id, snap.starts, snap.lengths, window=8, mode="boundary")
    # every window contains at least one segment boundary (a phase change between two frames)

A *segment boundary* is a change of ``segment_id`` between two consecutive frames of one episode;
the start of an episode is not a boundary. ``allowed`` (a per-frame bool mask, e.g. from
:func:`segment_frame_mask` for ``--segment NAME``) restricts the result: in ``segment`` mode every
frame of the window must be allowed, in ``boundary`` mode the window must cross a boundary into or
out of an allowed frame.

Everything is vectorized over frames (prefix sums), so it runs on millions of frames at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

import numpy as np

from odsd.schema import EpisodeMeta

WindowMode = Literal["segment", "boundary"]


def segment_boundaries(segment_id: np.ndarray, episode_starts: np.ndarray | Sequence[int]) -> np.ndarray:
    """``[n]`` bool: frame ``t`` starts a new segment *inside* its episode (``id[t] != id[t-1]``)."""
    seg = np.asarray(segment_id).astype(np.int64, copy=False).reshape(-1)
    out = np.zeros(seg.shape[0], dtype=bool)
    if seg.size > 1:
        out[1:] = seg[1:] != seg[:-1]
    starts = np.asarray(episode_starts, dtype=np.int64)
    starts = starts[(starts >= 0) & (starts < seg.size)]
    out[starts] = False
    return out


def segment_windows(
    segment_id: np.ndarray,
    episode_starts: np.ndarray | Sequence[int],
    lengths: np.ndarray | Sequence[int],
    window: int,
    mode: WindowMode,
    *,
    before: int = 0,
    allowed: np.ndarray | None = None,
) -> np.ndarray:
    """Sorted int64 global frame positions whose window is valid for ``mode`` (see module doc).

    ``segment_id`` is the per-frame column over all frames (``[n]``), ``episode_starts`` and
    ``lengths`` give each episode's frames ``[start, start + length)``; episodes must tile
    ``segment_id`` in order (as :class:`~odsd.store.Snapshot` ``starts``/``lengths`` do).
    """
    if mode not in ("segment", "boundary"):
        raise ValueError(f"mode must be 'segment' or 'boundary', got {mode!r}")
    window, before = int(window), int(before)
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    if not 0 <= before < window:
        raise ValueError(f"before must be in [0, window), got {before} for window {window}")
    seg = np.asarray(segment_id).reshape(-1)
    starts = np.asarray(episode_starts, dtype=np.int64).reshape(-1)
    lens = np.asarray(lengths, dtype=np.int64).reshape(-1)
    if starts.shape != lens.shape:
        raise ValueError("episode_starts and lengths must have the same length")
    n = seg.shape[0]
    if int(lens.sum()) != n:
        raise ValueError(f"episode lengths sum to {int(lens.sum())}, segment_id has {n} frames")
    if allowed is not None:
        allowed = np.asarray(allowed, dtype=bool).reshape(-1)
        if allowed.shape[0] != n:
            raise ValueError(f"allowed has {allowed.shape[0]} frames, segment_id has {n}")
    if n == 0:
        return np.zeros(0, dtype=np.int64)

    boundary = segment_boundaries(seg, starts)
    if mode == "boundary" and allowed is not None:
        touches = allowed.copy()
        touches[1:] |= allowed[:-1]
        boundary &= touches
    # prefix[k] = number of boundaries among frames 0..k-1
    prefix = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(boundary, out=prefix[1:])

    frame = np.arange(n, dtype=np.int64)
    ep = np.repeat(np.arange(starts.size, dtype=np.int64), lens)
    ep_start, ep_stop = starts[ep], starts[ep] + lens[ep]
    lo = frame - before  # first frame of the window
    hi = lo + window  # one past the last frame
    inside = (lo >= ep_start) & (hi <= ep_stop)
    lo_c = np.clip(lo, 0, n)
    hi_c = np.clip(hi, 0, n)
    # boundaries strictly inside the window: frames lo+1 .. hi-1
    crossings = prefix[np.minimum(np.maximum(hi_c, lo_c + 1), n)] - prefix[np.minimum(lo_c + 1, n)]
    if mode == "segment":
        ok = inside & (crossings == 0)
        if allowed is not None:
            bad = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(~allowed, out=bad[1:])
            ok &= (bad[hi_c] - bad[lo_c]) == 0
    else:
        ok = inside & (crossings > 0)
    return np.flatnonzero(ok).astype(np.int64)


def segment_frame_mask(
    metas: Iterable[EpisodeMeta],
    episode_starts: np.ndarray | Sequence[int],
    names: str | Iterable[str],
) -> np.ndarray:
    """``[n]`` bool over all frames: frame lies in a segment named one of ``names``.

    Built from each episode's segment table (metadata only, no frame data is read)::

        mask = segment_frame_mask((e.meta for e in snap.entries), snap.starts, "grasp")
        anchors = segment_windows(seg_id, snap.starts, snap.lengths, 8, "segment", allowed=mask)
    """
    wanted = {names} if isinstance(names, str) else set(names)
    metas = list(metas)
    starts = np.asarray(episode_starts, dtype=np.int64)
    total = int(starts[-1] + metas[-1].length) if metas else 0
    mask = np.zeros(total, dtype=bool)
    for start, meta in zip(starts.tolist(), metas, strict=True):
        for ref in meta.segments:
            if ref.name in wanted:
                mask[start + ref.start : start + ref.end] = True
    return mask


def segment_names(metas: Iterable[EpisodeMeta]) -> list[str]:
    """Every segment name used by ``metas``, in first-seen order (for ``--segment`` validation)."""
    return list(dict.fromkeys(ref.name for meta in metas for ref in meta.segments))
