"""Camera frames of a view, read lazily: one ``read_frames`` call per segment, a bounded decode cache.

The reader never loads a camera field into memory: ``CameraFrames.read(key, positions)`` maps
view frame positions to (segment, row), serves what its LRU cache holds and reads the rest with
one :func:`odsd.store.frame_reads.read_frames` call per segment (frames are verified there)::

    frames = CameraFrames(root, features, infos, view, cache_bytes=DEFAULT_CACHE_BYTES)
    batch = frames.read("observation.images.top", np.array([[0, 1], [7, 8]]))  # [2, 2, H, W, C] uint8

The cache is per process (each DataLoader worker fills its own) and never pickled: a dataset
carries only the mapping to the store, never decoded frames.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from odsd.schema import FeatureSpec, SegmentInfo

DEFAULT_CACHE_BYTES = 64 * 1024**2
"""Default bound of the decode cache of one process (DataLoader workers each have their own)."""


def read_frames(
    root: Path, info: SegmentInfo, field: str, spec: FeatureSpec, frames: np.ndarray
) -> np.ndarray:
    """``[len(frames), *spec.shape]`` of ``field`` in segment ``info``, verified (the store's frame reads)."""
    from odsd.store.frame_reads import read_frames as store_read_frames

    return store_read_frames(root, info, field, spec, frames)


class FrameCache:
    """A least-recently-used map ``key -> frame`` bounded by the bytes of the frames it holds."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"decode cache size must be >= 0 bytes, got {max_bytes}")
        self.max_bytes = int(max_bytes)
        self.nbytes = 0
        self._items: OrderedDict[tuple[str, str, int], np.ndarray] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: tuple[str, str, int]) -> np.ndarray | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: tuple[str, str, int], value: np.ndarray) -> None:
        if value.nbytes > self.max_bytes or key in self._items:
            return
        self._items[key] = value
        self.nbytes += value.nbytes
        while self.nbytes > self.max_bytes:
            _, old = self._items.popitem(last=False)
            self.nbytes -= old.nbytes

    def clear(self) -> None:
        self._items.clear()
        self.nbytes = 0


class CameraFrames:
    """uint8 frames of camera fields at view frame positions (any shape of positions, repeats allowed)."""

    def __init__(
        self,
        root: Path,
        features: Mapping[str, FeatureSpec],
        infos: Mapping[str, SegmentInfo],
        *,
        segments: Sequence[str],
        episode_segment: np.ndarray,
        episode_row: np.ndarray,
        from_index: np.ndarray,
        lengths: np.ndarray,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        self.root = Path(root)
        self.features = dict(features)
        self.infos = dict(infos)
        self.segments = list(segments)
        self.episode_segment = np.asarray(episode_segment, dtype=np.int64)
        self.episode_row = np.asarray(episode_row, dtype=np.int64)
        self.from_index = np.asarray(from_index, dtype=np.int64)
        self.frame_episode = np.repeat(np.arange(len(self.from_index), dtype=np.int64), lengths)
        self.cache = FrameCache(cache_bytes)

    def locate(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(segment number into ``segments``, row in that segment) of each view frame position."""
        ep = self.frame_episode[positions]
        return self.episode_segment[ep], self.episode_row[ep] + positions - self.from_index[ep]

    def read(self, key: str, positions: np.ndarray) -> np.ndarray:
        """Frames of ``key`` at ``positions``: ``[*positions.shape, H, W, C]`` in the field's dtype."""
        spec = self.features[key]
        pos = np.asarray(positions, dtype=np.int64)
        uniq, inverse = np.unique(pos.reshape(-1), return_inverse=True)
        out = np.empty((len(uniq), *spec.shape), dtype=spec.dtype)
        seg, row = self.locate(uniq)
        missing = np.ones(len(uniq), dtype=bool)
        if self.cache.max_bytes:
            for i, (s, r) in enumerate(zip(seg.tolist(), row.tolist(), strict=True)):
                hit = self.cache.get((key, self.segments[s], r))
                if hit is not None:
                    out[i] = hit
                    missing[i] = False
        todo = np.flatnonzero(missing)
        if todo.size:
            for s in np.unique(seg[todo]).tolist():
                sel = todo[seg[todo] == s]
                path = self.segments[s]
                values = read_frames(self.root, self.infos[path], key, spec, row[sel])
                out[sel] = values
                if self.cache.max_bytes:
                    for r, v in zip(row[sel].tolist(), values, strict=True):
                        self.cache.put((key, path, r), v.copy())  # not a view pinning the whole read
        return out[inverse].reshape(*pos.shape, *spec.shape)
