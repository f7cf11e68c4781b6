"""Sharded image arrays: one encoded frame per chunk, many chunks per shard file, as zarr lays them out.

A shard file (zarr's ``sharding_indexed`` codec, index at the end) is the frames' chunks one
after the other, each the codec's bytes followed by their crc32c (little-endian), then the
index: per chunk slot ``(offset, nbytes)`` as little-endian uint64, followed by the index's own
crc32c. Slots past the end of the array are ``(2**64-1, 2**64-1)`` (empty). odsd writes these
files itself (:func:`build_shard`, byte for byte what zarr writes) and reads them itself
(:func:`shard_index`, :func:`decode_chunks`), checking every crc32c on the way.

The commit record's checksum of an image field is :func:`chunks_checksum`: the crc32 of its
chunks (codec bytes + crc32c) in frame order. It is proven on a whole-field read without
re-encoding anything, holds for lossy codecs and survives compaction, which copies chunks.

>>> chunks = encode_chunks(frames, ImageEncoding(codec="qoi"))
>>> path.write_bytes(build_shard(chunks, slots=len(chunks)))
"""

from __future__ import annotations

import os
import threading
import zlib
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import crc32c
import numpy as np

from odsd.schema import ImageEncoding
from odsd.store.errors import CorruptStoreError
from odsd.store.frame_codecs import decode_frame, encode_frame

EMPTY = 2**64 - 1
"""Offset and size of an empty slot in a shard index."""
INDEX_ENTRY = 16
PARALLEL_MIN_FRAMES = 4
"""Fewer frames than this are encoded/decoded on the calling thread (a pool hand-off costs more)."""

_T = TypeVar("_T")
_R = TypeVar("_R")
_pool: ThreadPoolExecutor | None = None
_pool_pid = 0
_pool_lock = threading.Lock()


_threads_limit: int | None = None


def cpus() -> int:
    """The CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def threads() -> int:
    """Worker threads for frame codecs (imagecodecs releases the GIL): the CPUs this process may
    use, or fewer after :func:`limit_threads`."""
    return cpus() if _threads_limit is None else max(1, min(_threads_limit, cpus()))


def limit_threads(n: int | None) -> None:
    """Encode/decode frames on at most ``n`` threads (None: as many as CPUs).

    The collector's writer process leaves one CPU to the collection loop this way: a codec pool
    as wide as the machine preempts the loop on every commit.
    """
    global _threads_limit
    _threads_limit = n


def parallel_map(fn: Callable[[_T], _R], items: Sequence[_T]) -> list[_R]:
    """``[fn(x) for x in items]``, on a shared thread pool when there are enough items to gain."""
    global _pool, _pool_pid
    if len(items) < PARALLEL_MIN_FRAMES or threads() == 1:
        return [fn(x) for x in items]
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():  # a forked child (DataLoader worker) has no threads
            _pool = ThreadPoolExecutor(max_workers=threads(), thread_name_prefix="odsd-frames")
            _pool_pid = os.getpid()
        pool = _pool
    per = max(1, len(items) // (threads() * 4))
    batches = [items[i : i + per] for i in range(0, len(items), per)]
    return [r for batch in pool.map(lambda b: [fn(x) for x in b], batches) for r in batch]


def with_crc(data: bytes) -> bytes:
    return data + crc32c.crc32c(data).to_bytes(4, "little")


def encode_chunks(values: np.ndarray, encoding: ImageEncoding) -> list[bytes]:
    """One chunk (codec bytes + crc32c) per frame of ``values`` ``[n, H, W, C]``, encoded in parallel."""
    return parallel_map(lambda frame: with_crc(encode_frame(frame, encoding)), list(values))


def chunks_checksum(chunks: Iterable[bytes | memoryview]) -> str:
    """crc32 (hex) of the chunks in frame order: the commit record's checksum of an image field."""
    crc = 0
    for chunk in chunks:
        crc = zlib.crc32(chunk, crc)
    return f"{crc:08x}"


def index_nbytes(slots: int) -> int:
    return slots * INDEX_ENTRY + 4


def build_shard(chunks: Sequence[bytes | memoryview], slots: int) -> bytes:
    """A shard file of ``chunks`` (frame order) with an index of ``slots`` entries (the rest empty)."""
    index = np.full((slots, 2), EMPTY, dtype="<u8")
    sizes = np.fromiter((len(c) for c in chunks), dtype=np.uint64, count=len(chunks))
    index[: len(chunks), 1] = sizes
    index[: len(chunks), 0] = np.cumsum(sizes) - sizes
    raw = index.tobytes()
    return b"".join([*chunks, raw, crc32c.crc32c(raw).to_bytes(4, "little")])


def shard_index(tail: bytes | memoryview, data_nbytes: int, used: int, path: str) -> np.ndarray:
    """The checked ``[used, 2]`` (offset, nbytes) of a shard's index read from the file's end.

    ``tail`` is the index with its crc32c, ``data_nbytes`` the size of the file before it and
    ``used`` the slots that hold frames; any damage raises :class:`CorruptStoreError` naming ``path``.
    """
    slots = (len(tail) - 4) // INDEX_ENTRY
    if len(tail) != index_nbytes(slots) or used > slots or data_nbytes < 0:
        raise CorruptStoreError(f"{path}: damaged shard (truncated: no room for its index)")
    raw = memoryview(tail)[:-4]
    if crc32c.crc32c(raw) != int.from_bytes(tail[-4:], "little"):
        raise CorruptStoreError(f"{path}: damaged shard index (crc32c mismatch)")
    index = np.frombuffer(raw, dtype="<u8").reshape(slots, 2)
    used_part, rest = index[:used], index[used:]
    if (
        np.any(used_part == EMPTY)
        or np.any(used_part[:, 1] < 4)
        or np.any(used_part[:, 0] + used_part[:, 1] > data_nbytes)
        or np.any(rest != EMPTY)
    ):
        raise CorruptStoreError(f"{path}: damaged shard index (a frame outside the file or missing)")
    return used_part.astype(np.int64)


def check_chunk(chunk: memoryview, path: str, frame: int) -> memoryview:
    """The codec bytes of a chunk whose crc32c holds; CorruptStoreError naming the file and frame."""
    if len(chunk) < 4 or crc32c.crc32c(chunk[:-4]) != int.from_bytes(chunk[-4:], "little"):
        raise CorruptStoreError(f"{path}: damaged frame {frame} (crc32c mismatch)")
    return chunk[:-4]


def decode_chunks(
    chunks: Sequence[memoryview],
    encoding: ImageEncoding,
    frame_shape: tuple[int, ...],
    dtype: np.dtype,
    out: np.ndarray,
    where: Sequence[tuple[str, int]],
) -> None:
    """Decode checked ``chunks`` into ``out[i]`` (in parallel); ``where[i]`` = (file, frame) for errors."""

    def one(i: int) -> None:
        path, frame = where[i]
        payload = check_chunk(chunks[i], path, frame)
        try:
            out[i] = decode_frame(payload, encoding, frame_shape, dtype)
        except ValueError as exc:
            raise CorruptStoreError(f"{path}: damaged frame {frame} ({exc})") from exc

    parallel_map(one, range(len(chunks)))  # type: ignore[arg-type]
