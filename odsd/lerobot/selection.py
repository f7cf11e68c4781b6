"""Which episodes a reader or an export shows, and which frames may anchor a training item.

Selection works on two levels:

- **episodes** (what the view contains; episode-level metadata only, no frame data is read):
  explicit store episode ids, iterations, outcome (success-only / failures-only) and the most
  recent ``K`` of the episodes that pass those filters (by commit order);
- **anchors** (which frames ``dataset[i]`` may be centred on): never a frame whose training label
  is invalid; optionally only frames of named segments (``segments=("grasp",)``), only frames of
  failed segments (``failure_focused``), and only frames whose whole window stays inside one
  segment (``window_mode="segment"``) or crosses a segment boundary (``window_mode="boundary"``).

>>> Selection(recent=200, outcome="success")
>>> Selection(iterations=(3, 4), window_mode="boundary", segments=("grasp",))

Segment and boundary windows come from :func:`odsd.replay.windows.segment_windows` (shared with
the replay tools), so a window never leaves its episode in either mode.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from odsd.errors import ConfigError
from odsd.schema import EpisodeEntry

Outcome = Literal["all", "success", "failure"]
WindowMode = Literal["segment", "boundary"]


def _ints(values: Iterable[int] | None) -> tuple[int, ...] | None:
    return None if values is None else tuple(sorted({int(v) for v in values}))


@dataclass(frozen=True)
class Selection:
    """A declarative filter; equal selections give equal views at equal watermarks."""

    episodes: tuple[int, ...] | None = None
    """Store episode ids to include (None: every visible episode)."""
    iterations: tuple[int, ...] | None = None
    """Collection iterations to include (None: all)."""
    outcome: Outcome = "all"
    """``"success"``: successful episodes only; ``"failure"``: failed episodes only."""
    recent: int | None = None
    """Keep only the ``K`` most recently committed episodes among those passing the other filters."""
    segments: tuple[str, ...] | None = None
    """Anchor only on frames inside segments with one of these names."""
    failure_focused: bool = False
    """Anchor only on frames of failed segments (whole episode when a failed one has no segment table)."""
    window_mode: WindowMode | None = None
    """``"segment"``: the item's whole window lies in one segment; ``"boundary"``: it crosses one."""
    window: tuple[int, int] | None = field(default=None)
    """``(first, last)`` frame offsets of the window for ``window_mode``; default: the span of the
    reader's ``delta_timestamps`` (always including the anchor itself)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "episodes", _ints(self.episodes))
        object.__setattr__(self, "iterations", _ints(self.iterations))
        if self.segments is not None:
            names = (self.segments,) if isinstance(self.segments, str) else tuple(self.segments)
            object.__setattr__(self, "segments", tuple(sorted(set(names))))
        if self.outcome not in ("all", "success", "failure"):
            raise ConfigError(f"selection outcome must be all, success or failure, not {self.outcome!r}")
        if self.recent is not None and int(self.recent) < 1:
            raise ConfigError(f"selection recent must be >= 1, got {self.recent}")
        if self.window_mode not in (None, "segment", "boundary"):
            raise ConfigError(f"window_mode must be 'segment' or 'boundary', not {self.window_mode!r}")
        if self.window is not None:
            lo, hi = (int(v) for v in self.window)
            if lo > 0 or hi < 0:
                raise ConfigError(f"window {self.window} must contain offset 0 (the anchor)")
            object.__setattr__(self, "window", (lo, hi))

    # -- identity -----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}

    def key(self) -> str:
        """A short stable hash of the selection (part of the statistics version id)."""
        text = json.dumps(self.to_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def frame_level(self) -> bool:
        return bool(self.segments) or self.failure_focused or self.window_mode is not None

    # -- episode level ------------------------------------------------------------------------

    def select_entries(self, entries: Sequence[EpisodeEntry]) -> list[EpisodeEntry]:
        """The entries (in the given, commit order) that this selection shows."""
        wanted_ids = set(self.episodes) if self.episodes is not None else None
        wanted_it = set(self.iterations) if self.iterations is not None else None
        out = []
        for entry in entries:
            meta = entry.meta
            if wanted_ids is not None and entry.episode_id not in wanted_ids:
                continue
            if wanted_it is not None and meta.iteration not in wanted_it:
                continue
            if self.outcome == "success" and not meta.success:
                continue
            if self.outcome == "failure" and meta.success:
                continue
            out.append(entry)
        if self.recent is not None and len(out) > self.recent:
            out = sorted(out, key=lambda e: (e.commit_seq, e.episode_id))[-self.recent :]
            out.sort(key=lambda e: e.episode_id)
        return out

    # -- frame level --------------------------------------------------------------------------

    def anchor_mask(
        self,
        entries: Sequence[EpisodeEntry],
        starts: np.ndarray,
        lengths: np.ndarray,
        label_valid: np.ndarray,
        segment_id: np.ndarray | None,
        window: tuple[int, int],
    ) -> np.ndarray:
        """``[n]`` bool over the view's frames: may this frame anchor an item?"""
        n = int(lengths.sum())
        mask = np.asarray(label_valid, dtype=bool).copy()
        if n == 0:
            return mask
        named = None
        if self.segments:
            from odsd.replay.windows import segment_frame_mask

            named = segment_frame_mask((e.meta for e in entries), starts, self.segments)
        if self.failure_focused:
            mask &= failed_frame_mask(entries, starts, n)
        if self.window_mode is not None:
            if segment_id is None:
                raise ConfigError("window_mode needs a 'segment_id' field, which this store does not have")
            from odsd.replay.windows import segment_windows

            lo, hi = self.window if self.window is not None else window
            ok = np.zeros(n, dtype=bool)
            ok[
                segment_windows(
                    segment_id, starts, lengths, hi - lo + 1, self.window_mode, before=-lo, allowed=named
                )
            ] = True
            mask &= ok
        elif named is not None:
            mask &= named
        return mask


def failed_frame_mask(entries: Sequence[EpisodeEntry], starts: np.ndarray, n: int) -> np.ndarray:
    """Frames of segments whose ``success`` is False; a failed episode without a table counts whole."""
    mask = np.zeros(n, dtype=bool)
    for start, entry in zip(np.asarray(starts).tolist(), entries, strict=True):
        meta = entry.meta
        if meta.segments:
            for ref in meta.segments:
                if ref.success is False:
                    mask[start + ref.start : start + ref.end] = True
        elif not meta.success:
            mask[start : start + meta.length] = True
    return mask


def check_segment_names(entries: Sequence[EpisodeEntry], names: Sequence[str]) -> None:
    """ConfigError naming the segments that no entry has, and those that exist."""
    from odsd.replay.windows import segment_names

    present = segment_names(e.meta for e in entries)
    missing = sorted(set(names) - set(present))
    if missing:
        raise ConfigError(
            f"no selected episode has a segment named {', '.join(missing)} "
            f"(segments present: {', '.join(present) or 'none'})"
        )


def parse_episode_list(text: str | Sequence[str] | None) -> tuple[int, ...] | None:
    """``"0,3,7-9"`` (or several such strings) → ``(0, 3, 7, 8, 9)``; ConfigError on bad syntax."""
    if text is None:
        return None
    parts = [text] if isinstance(text, str) else list(text)
    out: set[int] = set()
    for part in parts:
        for token in str(part).replace(" ", ",").split(","):
            if not token:
                continue
            try:
                if "-" in token[1:]:
                    a, b = token.split("-", 1) if not token.startswith("-") else (token, "")
                    lo, hi = int(a), int(b)
                    if hi < lo:
                        raise ValueError
                    out.update(range(lo, hi + 1))
                else:
                    out.add(int(token))
            except ValueError:
                raise ConfigError(f"bad episode list entry {token!r} (use e.g. 0,3,7-9)") from None
    if any(v < 0 for v in out):
        raise ConfigError("episode ids must be non-negative")
    return tuple(sorted(out))
