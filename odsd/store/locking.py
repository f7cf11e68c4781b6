"""Owner locks: an exclusive lock on a name in a store's storage, held until released or the holder dies.

The run lock (``runs/<run_id>/lock``) and reader leases (``_leases/<id>.lock``) are built on this
interface. Mutual exclusion comes from the storage itself (on a local filesystem a kernel lock, see
:mod:`odsd.store.local_lock`); what a lock file *contains* (pid, host, start time) is information
for people, never the lock. A storage without kernel locks (an object store) gets its own module
implementing :class:`OwnerLock` and :func:`lock_is_held`; nothing else changes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from odsd.store import local_lock


class OwnerLock(Protocol):
    """One attempt to own ``path``; the lock is released when the holder releases it or dies."""

    path: Path

    @property
    def held(self) -> bool: ...

    def acquire(self, *, wait: bool = False) -> bool:
        """Take the lock; ``False`` (never blocking unless ``wait``) when someone else holds it."""
        ...

    def write_info(self, data: bytes) -> None:
        """Replace the informational content of the held lock."""
        ...

    def read_info(self) -> bytes | None:
        """The informational content (of whoever holds it); ``None`` when there is no lock file."""
        ...

    def release(self, *, remove: bool = True) -> None:
        """Give the lock up and (unless not ``remove``) delete its file; idempotent."""
        ...


def owner_lock(path: Path) -> OwnerLock:
    """An (unheld) owner lock for ``path`` on the storage ``path`` lives on."""
    return local_lock.LocalFileLock(path)


def lock_is_held(path: Path) -> bool:
    """Whether some live process holds the owner lock at ``path`` (``False`` when there is none)."""
    return local_lock.is_held(path)
