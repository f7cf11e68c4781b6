"""``Snapshot``: a consistent, read-only view of the store pinned at one watermark."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from odsd.schema import EpisodeEntry, EpisodeMeta, SegmentInfo
from odsd.store.errors import VacuumedDataError
from odsd.store.layout import ArrayLayout, checked_layouts, read_verified
from odsd.store.leases import LeaseHandle
from odsd.store.state import StoreState

if TYPE_CHECKING:
    from odsd.store.episode_store import EpisodeStore


class Snapshot:
    """The episodes visible at ``watermark``, in episode-id (= commit) order.

    Frames are addressed by a global position ``0 .. num_frames-1`` that runs through the
    episodes in order. Field data is loaded once per field and segment, then every range or
    gather read is one vectorized numpy indexing operation.

    Before the first read of a segment its layout is checked against the commit record and the
    schema (:mod:`odsd.store.layout`: every chunk present, array metadata as committed, nothing
    outside the store), once per segment; every field read is then checked against the
    record's crc32, so damaged data raises :class:`~odsd.store.CorruptStoreError` instead of
    being returned.

    >>> snap = store.snapshot()
    >>> snap.episode_ids[:3], snap.lengths[:3]
    >>> actions = snap.gather("action.expert", np.array([0, 17, 4242]))
    >>> first = snap.episode(int(snap.episode_ids[0]))
    """

    def __init__(
        self,
        store: EpisodeStore,
        state: StoreState,
        *,
        lease: LeaseHandle | None = None,
        reuse: dict[tuple[str, str], np.ndarray] | None = None,
        reuse_layouts: dict[str, dict[str, ArrayLayout]] | None = None,
    ) -> None:
        self.store = store
        self.watermark = state.seq
        self.entries: list[EpisodeEntry] = [state.episodes[i] for i in sorted(state.episodes)]
        n = len(self.entries)
        self.episode_ids = np.fromiter((e.episode_id for e in self.entries), dtype=np.int64, count=n)
        self.lengths = np.fromiter((e.meta.length for e in self.entries), dtype=np.int64, count=n)
        self.starts = np.zeros(n, dtype=np.int64)
        if n:
            np.cumsum(self.lengths[:-1], out=self.starts[1:])
        self.num_frames = int(self.lengths.sum())
        self.segments: list[str] = list(dict.fromkeys(e.segment for e in self.entries))
        seg_index = {path: i for i, path in enumerate(self.segments)}
        self._episode_segment = np.fromiter(
            (seg_index[e.segment] for e in self.entries), dtype=np.int64, count=n
        )
        self._episode_offset = np.fromiter((e.offset for e in self.entries), dtype=np.int64, count=n)
        self._segment_info: dict[str, SegmentInfo] = {p: state.segments[p] for p in self.segments}
        self._segment_frames = np.array([state.segments[p].n_frames for p in self.segments], dtype=np.int64)
        self._segment_base = np.zeros(len(self.segments), dtype=np.int64)
        if self.segments:
            np.cumsum(self._segment_frames[:-1], out=self._segment_base[1:])
        self._position = {int(eid): i for i, eid in enumerate(self.episode_ids)}
        self._frame_pos: np.ndarray | None = None
        self._segment_arrays: dict[tuple[str, str], np.ndarray] = {}
        self._layouts: dict[str, dict[str, ArrayLayout]] = {}
        if reuse or reuse_layouts:
            live = set(self.segments)
            self._segment_arrays = {k: v for k, v in (reuse or {}).items() if k[0] in live}
            self._layouts = {k: v for k, v in (reuse_layouts or {}).items() if k in live}
        self._columns: dict[str, np.ndarray] = {}
        self._lease = lease
        if lease is not None:
            lease.pin(self.watermark)

    # -- index --------------------------------------------------------------------------------

    @property
    def num_episodes(self) -> int:
        return len(self.entries)

    @property
    def features(self) -> dict:
        return self.store.features

    def entry(self, episode_id: int) -> EpisodeEntry:
        return self.entries[self.position(episode_id)]

    def meta(self, episode_id: int) -> EpisodeMeta:
        return self.entry(episode_id).meta

    def position(self, episode_id: int) -> int:
        """Index of ``episode_id`` in this snapshot's episode order; KeyError if not visible."""
        try:
            return self._position[int(episode_id)]
        except KeyError:
            raise KeyError(f"episode {episode_id} is not visible at watermark {self.watermark}") from None

    def frame_range(self, episode_id: int) -> tuple[int, int]:
        """Global frame positions ``[start, stop)`` of an episode."""
        i = self.position(episode_id)
        return int(self.starts[i]), int(self.starts[i] + self.lengths[i])

    def frame_episode(self, frames: np.ndarray) -> np.ndarray:
        """Episode position (into ``entries``) of each global frame position."""
        return np.searchsorted(self.starts, frames, side="right") - 1

    # -- data ---------------------------------------------------------------------------------

    def _segment_field(self, segment: str, field: str) -> np.ndarray:
        key = (segment, field)
        arr = self._segment_arrays.get(key)
        if arr is None:
            if not (self.store.root / segment).is_dir() and segment in self._vacuumed():
                raise VacuumedDataError(
                    f"{self.store.root / segment}: deleted by vacuum; open a newer snapshot"
                )
            info = self._segment_info[segment]
            layouts = self._layouts.get(segment)
            if layouts is None:
                layouts = checked_layouts(
                    self.store.root, info, self.store.features, root_real=self.store.root_real
                )
                self._layouts[segment] = layouts
            arr = read_verified(layouts[field], info)
            self._segment_arrays[key] = arr
        return arr

    def verify_layouts(self) -> None:
        """Run the open-time check of every segment now (no chunk data is read)."""
        for segment in self.segments:
            if segment not in self._layouts:
                self._layouts[segment] = checked_layouts(
                    self.store.root,
                    self._segment_info[segment],
                    self.store.features,
                    root_real=self.store.root_real,
                )

    def _vacuumed(self) -> set[str]:
        latest = self.store.refresh()
        return {path for path in self.segments if path in latest.dead_segments}

    def column(self, field: str) -> np.ndarray:
        """Every frame of ``field`` stored in segment order (loaded once, then cached)."""
        col = self._columns.get(field)
        if col is None:
            if field not in self.store.features:
                raise KeyError(f"unknown field {field!r}; the store has {sorted(self.store.features)}")
            spec = self.store.features[field]
            if not self.segments:
                col = np.zeros((0, *spec.shape), dtype=spec.dtype)
            else:
                col = np.concatenate([self._segment_field(s, field) for s in self.segments])
            # Segment arrays become views of the column so that refresh() can reuse them.
            for s, base, count in zip(self.segments, self._segment_base, self._segment_frames, strict=True):
                self._segment_arrays[(s, field)] = col[base : base + count]
            self._columns[field] = col
        return col

    @property
    def frame_positions(self) -> np.ndarray:
        """For each global frame position, its row in the columns returned by :meth:`column`."""
        if self._frame_pos is None:
            per_episode = self._segment_base[self._episode_segment] + self._episode_offset - self.starts
            self._frame_pos = np.repeat(per_episode, self.lengths) + np.arange(
                self.num_frames, dtype=np.int64
            )
        return self._frame_pos

    def load(self, fields: Iterable[str] | None = None) -> Snapshot:
        """Warm the cache for ``fields`` (default all) so later reads touch no files."""
        for field in fields if fields is not None else self.store.features:
            self.column(field)
        _ = self.frame_positions
        return self

    def gather(self, field: str, frames: np.ndarray | Sequence[int]) -> np.ndarray:
        """Values of ``field`` at the given global frame positions (any order, repeats allowed)."""
        idx = np.asarray(frames, dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self.num_frames):
            raise IndexError(f"frame positions must be in [0, {self.num_frames})")
        return self.column(field)[self.frame_positions[idx]]

    def gather_fields(
        self, fields: Iterable[str], frames: np.ndarray | Sequence[int]
    ) -> dict[str, np.ndarray]:
        """Like :meth:`gather` for several fields, mapping positions to rows once per call."""
        idx = np.asarray(frames, dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self.num_frames):
            raise IndexError(f"frame positions must be in [0, {self.num_frames})")
        rows = self.frame_positions[idx]
        return {field: self.column(field)[rows] for field in fields}

    def read(self, field: str, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Values of ``field`` for the contiguous global frame range ``[start, stop)``."""
        stop = self.num_frames if stop is None else stop
        return self.gather(field, np.arange(start, stop, dtype=np.int64))

    def episode(self, episode_id: int, fields: Iterable[str] | None = None) -> dict[str, np.ndarray]:
        """All frames of one episode, reading only its own segment when the column is not loaded."""
        i = self.position(episode_id)
        entry = self.entries[i]
        out: dict[str, np.ndarray] = {}
        for field in fields if fields is not None else self.store.features:
            if field in self._columns:
                start, stop = self.frame_range(episode_id)
                out[field] = self.read(field, start, stop)
            else:
                data = self._segment_field(entry.segment, field)
                out[field] = data[entry.offset : entry.offset + entry.meta.length]
        return out

    # -- lifecycle ----------------------------------------------------------------------------

    def refresh(self) -> Snapshot:
        """A snapshot at the newest watermark that reuses this one's loaded segment data."""
        lease = LeaseHandle(self.store.root, -1) if self._lease is not None else None
        state = self.store.latest_state()
        new = Snapshot(
            self.store, state, lease=lease, reuse=self._segment_arrays, reuse_layouts=self._layouts
        )
        for field in self._columns:
            new.column(field)
        return new

    def keep_alive(self) -> None:
        """Renew this snapshot's reader lease when it is due (a no-op for a snapshot without one).

        A lease expires after its time to live even while its process lives; a reader that holds
        a snapshot for longer (reading frames lazily during a long training run) calls this often.
        """
        if self._lease is not None:
            self._lease.renew_if_due()

    def close(self) -> None:
        if self._lease is not None:
            self._lease.release()
            self._lease = None

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Snapshot(watermark={self.watermark}, episodes={self.num_episodes}, frames={self.num_frames})"
