"""Owner locks on a local (or flock-capable network) filesystem: ``flock`` on a file kept open.

The kernel releases an ``flock`` when the last descriptor of its open file goes away, so a lock
whose holder died (even by SIGKILL) is free at once, and two processes can never hold it together.
The holder removes the file on release; a contender that locked a file in the moment it was being
removed notices (the name no longer leads to the file it locked) and tries again.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


class LocalFileLock:
    """An exclusive ``flock`` on ``path`` (created if absent), held while this object keeps it open."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, *, wait: bool = False) -> bool:
        if self._fd is not None:
            return True
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return False
            except BaseException:
                os.close(fd)
                raise
            if _same_file(fd, self.path):
                self._fd = fd
                return True
            os.close(fd)  # locked a file its holder had just removed: the lock lives on a new one

    def write_info(self, data: bytes) -> None:
        if self._fd is None:
            raise RuntimeError(f"{self.path}: lock not held")
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)

    def read_info(self) -> bytes | None:
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            return None

    def release(self, *, remove: bool = True) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if remove and _same_file(fd, self.path):
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()
        finally:
            os.close(fd)  # the kernel lock goes with the last descriptor


def is_held(path: Path) -> bool:
    """Whether a live process holds the ``flock`` of ``path``; a missing file is not held."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
