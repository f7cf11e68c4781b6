"""Frame-level random access to one field of a committed segment, verified.

>>> from odsd.store.frame_reads import read_frames
>>> spec = store.features["observation.images.top"]
>>> read_frames(store.root, info, "observation.images.top", spec, np.array([3, 7])).shape
(2, 96, 96, 3)

Readers call this per item or per batch. An image field is read without touching the frames
not asked for: the segment's layout is checked once (:func:`odsd.store.layout.check_segment`
for that field) and each shard's index once (its crc32c and bounds), both kept in a bounded
per-process cache; then each call reads only the byte ranges of the requested frames
(``os.pread``, adjacent frames in one read), checks every frame's crc32c and decodes them, on
all cores when there are several. Other fields decode the zstd chunks that hold the frames.
The commit record's whole-field checksum is not proven here (that needs every frame); a damaged
frame, index or file fails its crc32c and raises :class:`~odsd.store.CorruptStoreError`.
"""

from __future__ import annotations

import errno
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from odsd.schema import FeatureSpec, SegmentInfo
from odsd.store.errors import CorruptStoreError, StoreError
from odsd.store.image_arrays import decode_chunks, index_nbytes, shard_index
from odsd.store.layout import ArrayLayout, checked_layouts, read_chunk, read_verified

CACHE_FIELDS = 512
"""Checked (segment, field) layouts and their shard indexes kept per process (least recently used go)."""


@dataclass
class _Field:
    layout: ArrayLayout
    indexes: dict[int, np.ndarray] = field(default_factory=dict)
    """Shard file number → checked ``[frames, 2]`` (offset, nbytes)."""


_cache: OrderedDict[tuple[str, str, str, int, int], _Field] = OrderedDict()
_lock = threading.Lock()


def read_frames(
    root: Path, info: SegmentInfo, field: str, spec: FeatureSpec, frames: np.ndarray
) -> np.ndarray:
    """Frames ``frames`` (segment-local positions) of ``field``: ``[len(frames), *spec.shape]``, verified."""
    index = np.asarray(frames, dtype=np.int64).reshape(-1)
    if index.size and (index.min() < 0 or index.max() >= info.n_frames):
        raise IndexError(f"frames {index.min()}..{index.max()} outside the segment's {info.n_frames}")
    entry = _field(root, info, field, spec)
    out = np.empty((index.size, *spec.shape), dtype=entry.layout.dtype)
    if index.size == 0:
        return out.astype(spec.dtype, copy=False)
    if entry.layout.encoding is not None:
        _read_image(entry, index, out)
    elif entry.layout.missing:  # chunks zarr never wrote (all fill): proven by the record's checksum
        out[...] = read_verified(entry.layout, info)[index]
    else:
        _read_plain(entry.layout, index, out)
    return out.astype(spec.dtype, copy=False)


def clear_cache() -> None:
    """Forget every cached layout and shard index (tests; a long-lived process never needs it)."""
    with _lock:
        _cache.clear()


def _field(root: Path, info: SegmentInfo, field: str, spec: FeatureSpec) -> _Field:
    key = (os.fspath(root), info.path, field, info.n_frames, info.nbytes)
    with _lock:
        entry = _cache.get(key)
        if entry is not None:
            _cache.move_to_end(key)
            return entry
    layout = checked_layouts(Path(root), info, {field: spec}, partial=True)[field]
    if layout.missing and layout.encoding is not None:
        raise CorruptStoreError(f"{min(layout.missing)}: shard file is missing")
    entry = _Field(layout)
    with _lock:
        entry = _cache.setdefault(key, entry)
        _cache.move_to_end(key)
        while len(_cache) > CACHE_FIELDS:
            _cache.popitem(last=False)
    return entry


def _open(path: str) -> int:
    try:
        return os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ELOOP):
            raise CorruptStoreError(f"{path}: committed file is missing or a link ({exc.strerror})") from exc
        raise StoreError(f"{path}: cannot read ({exc.strerror})") from exc


def _pread(fd: int, size: int, offset: int, path: str) -> bytes:
    data = os.pread(fd, size, offset)
    if len(data) != size:
        raise CorruptStoreError(f"{path}: damaged shard (truncated)")
    return data


def _shard_index(entry: _Field, shard: int, fd: int) -> np.ndarray:
    index = entry.indexes.get(shard)
    if index is None:
        layout = entry.layout
        path = layout.chunks[shard]
        size = index_nbytes(layout.chunk_frames)
        file_size = os.fstat(fd).st_size
        if file_size < size:
            raise CorruptStoreError(f"{path}: damaged shard (truncated: no room for its index)")
        tail = _pread(fd, size, file_size - size, path)
        index = shard_index(tail, file_size - size, layout.frames_in(shard), path)
        entry.indexes[shard] = index
    return index


def _read_image(entry: _Field, frames: np.ndarray, out: np.ndarray) -> None:
    layout = entry.layout
    assert layout.encoding is not None
    order = np.argsort(frames, kind="stable")
    chunks: list[memoryview] = [memoryview(b"")] * frames.size
    where: list[tuple[str, int]] = [("", 0)] * frames.size
    shards = frames[order] // layout.chunk_frames
    for shard in np.unique(shards):
        positions = order[shards == shard]
        path = layout.chunks[int(shard)]
        fd = _open(path)
        try:
            index = _shard_index(entry, int(shard), fd)
            local = frames[positions] - int(shard) * layout.chunk_frames
            offsets, sizes = index[local, 0], index[local, 1]
            # One pread per run of frames stored back to back (a window, a sorted batch).
            start = 0
            while start < len(positions):
                stop = start + 1
                while stop < len(positions) and offsets[stop] in (
                    offsets[stop - 1] + sizes[stop - 1],
                    offsets[stop - 1],
                ):
                    stop += 1
                lo = int(offsets[start])
                hi = int(max(offsets[start:stop] + sizes[start:stop]))
                block = memoryview(_pread(fd, hi - lo, lo, path))
                for k in range(start, stop):
                    o, n = int(offsets[k]) - lo, int(sizes[k])
                    chunks[positions[k]] = block[o : o + n]
                    where[positions[k]] = (path, int(frames[positions[k]]))
                start = stop
        finally:
            os.close(fd)
    decode_chunks(chunks, layout.encoding, layout.shape[1:], layout.dtype, out, where)


def _read_plain(layout: ArrayLayout, frames: np.ndarray, out: np.ndarray) -> None:
    row = int(np.prod(layout.shape[1:], dtype=np.int64)) * layout.dtype.itemsize
    chunk_ids = frames // layout.chunk_frames
    for c in np.unique(chunk_ids):
        raw = read_chunk(layout.chunks[int(c)], layout.chunk_frames * row)
        held = layout.frames_in(int(c))
        values = np.frombuffer(raw, dtype=layout.dtype, count=held * (row // layout.dtype.itemsize))
        values = values.reshape(held, *layout.shape[1:])
        pick = chunk_ids == c
        out[pick] = values[frames[pick] - int(c) * layout.chunk_frames]
