"""Shared memory that carries finished frames from the collector to its writer process.

Pickling frames through a ``multiprocessing`` queue copies them four times (pickle, pipe in,
pipe out, unpickle) and holds the collector's GIL while it does; with cameras that is most of
the writer's work. Instead the collector copies each batch's frames once into a
:class:`FrameArena` (a ``memfd`` both processes map), sends only a :class:`SharedFrames`
descriptor through the queue, and frees the space when the writer reports the batch
committed::

    arena = FrameArena(2**30)                        # in the collector
    ref = arena.put(frames, wait=check_writer)       # copies; blocks while the arena is full
    ...                                              # the writer commits ref's frames
    arena.release(ref)

    view = ArenaView(arena.child_path)               # in the writer process
    frames = view.arrays(ref)                        # numpy views, no copy

The memory has no name in ``/dev/shm``: it is freed by the kernel when both processes have
exited, however they exit (a SIGKILL leaves nothing behind). Space is handed out first-fit from
the lowest offset, so the memory actually touched is the largest backlog, not the arena's size.
Linux only (:meth:`FrameArena.supported`); elsewhere the frames travel pickled.
"""

from __future__ import annotations

import bisect
import mmap
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FieldPlace = tuple[str, str, tuple[int, ...], int]
"""``(name, dtype, shape, offset from the batch's start)`` of one field in the arena."""

_ALIGN = 64
"""Every field starts on a cache line."""


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


@dataclass(frozen=True)
class SharedFrames:
    """Where one batch's frames lie in a :class:`FrameArena`: a byte range and one entry per field."""

    start: int
    nbytes: int
    fields: tuple[FieldPlace, ...]
    """One entry per field, in the batch's order."""


class FrameArena:
    """The collector's side: shared memory that batches of frames are copied into (see the module docstring)."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = int(nbytes)
        self._fd = os.memfd_create("odsd-frames", os.MFD_CLOEXEC)
        try:
            os.ftruncate(self._fd, self.nbytes)
            self._map = mmap.mmap(self._fd, self.nbytes)
        except BaseException:
            os.close(self._fd)
            raise
        self._buffer = np.frombuffer(self._map, dtype=np.uint8)
        self._used: list[tuple[int, int]] = []  # (start, stop), sorted by start
        self._changed = threading.Condition()
        self._closed = False

    @staticmethod
    def supported() -> bool:
        """Whether this platform has anonymous shared files a child can open (Linux ``memfd`` + procfs)."""
        return hasattr(os, "memfd_create") and Path("/proc/self/fd").is_dir()

    @property
    def child_path(self) -> str:
        """The path a child process opens to map the same memory (valid while this process lives)."""
        return f"/proc/{os.getpid()}/fd/{self._fd}"

    @property
    def bytes_in_use(self) -> int:
        with self._changed:
            return sum(stop - start for start, stop in self._used)

    def fits(self, frames: Mapping[str, np.ndarray]) -> bool:
        """Whether a batch of ``frames`` can ever fit (smaller than the whole arena)."""
        return _layout(frames)[0] <= self.nbytes

    def put(self, frames: Mapping[str, np.ndarray], *, wait: Callable[[], None]) -> SharedFrames:
        """Copy ``frames`` into free space, blocking (calling ``wait`` between tries) until there is some.

        ``wait`` is called about every 0.1 s while the arena is full; it raises to give up
        (the writer died). A batch larger than the arena raises :class:`ValueError`
        (check :meth:`fits` first).
        """
        nbytes, fields = _layout(frames)
        if nbytes > self.nbytes:
            raise ValueError(f"a batch of {nbytes} bytes does not fit a {self.nbytes}-byte frame arena")
        with self._changed:
            while (start := self._first_fit(nbytes)) is None:
                wait()
                self._changed.wait(0.1)
            bisect.insort(self._used, (start, start + nbytes))
        for (_, _, _, offset), values in zip(fields, frames.values(), strict=True):
            target = self._buffer[start + offset : start + offset + values.nbytes]
            np.copyto(target.view(values.dtype).reshape(values.shape), values)
        return SharedFrames(start=start, nbytes=nbytes, fields=fields)

    def release(self, ref: SharedFrames) -> None:
        """Free a batch's space (its frames were committed, or will never be)."""
        with self._changed:
            self._used.remove((ref.start, ref.start + ref.nbytes))
            self._changed.notify_all()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        del self._buffer
        self._map.close()
        os.close(self._fd)

    def _first_fit(self, nbytes: int) -> int | None:
        position = 0
        for start, stop in self._used:
            if start - position >= nbytes:
                return position
            position = stop
        return position if self.nbytes - position >= nbytes else None


class ArenaView:
    """The writer process's side: the collector's :class:`FrameArena`, mapped read-only."""

    def __init__(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            self._map = mmap.mmap(fd, size, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        self._buffer = np.frombuffer(self._map, dtype=np.uint8)

    def arrays(self, ref: SharedFrames) -> dict[str, np.ndarray]:
        """The batch's frames as read-only numpy views into the shared memory (valid until released)."""
        out = {}
        for name, dtype, shape, offset in ref.fields:
            start = ref.start + offset
            nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            out[name] = self._buffer[start : start + nbytes].view(dtype).reshape(shape)
        return out


def _layout(frames: Mapping[str, np.ndarray]) -> tuple[int, tuple[FieldPlace, ...]]:
    """Total bytes and per-field ``(name, dtype, shape, offset)`` of a batch laid out field after field."""
    fields = []
    offset = 0
    for name, values in frames.items():
        fields.append((name, values.dtype.str, tuple(values.shape), offset))
        offset = _aligned(offset + values.nbytes)
    return max(offset, _ALIGN), tuple(fields)
