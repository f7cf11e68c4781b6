"""The run lock: one process owns a run; a lock whose holder is gone is taken over.

Mutual exclusion is an owner lock of the store's storage (:mod:`odsd.store.locking`: on a local
filesystem a kernel ``flock`` on ``runs/<run_id>/lock``, held for the life of the process and
released by the kernel when it dies). The pid/host/start JSON in the file is information only.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
from pathlib import Path

from pydantic import ValidationError

from odsd.daemon.errors import LockHeldError, RunLockIOError
from odsd.errors import as_storage_error
from odsd.schema.run import RunLockInfo
from odsd.store.locking import OwnerLock, owner_lock

log = logging.getLogger("odsd.daemon")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _parse(data: bytes | None) -> RunLockInfo | None:
    if not data:
        return None
    try:
        return RunLockInfo.model_validate_json(data)
    except (ValidationError, ValueError):
        return None


class RunLock:
    """``runs/<run_id>/lock``: an owner lock held while the run runs, with pid, host and start time.

    >>> with RunLock(run_dir):
    ...     collect()
    """

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / "lock"
        self._lock: OwnerLock = owner_lock(self.path)

    @property
    def held(self) -> bool:
        return self._lock.held

    def read(self) -> RunLockInfo | None:
        """The owner information in the lock file (``None`` when absent or unreadable)."""
        try:
            return _parse(self._lock.read_info())
        except OSError:
            return None

    def acquire(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            got = self._lock.acquire()
        except OSError as exc:
            raise as_storage_error(exc) or RunLockIOError(
                f"cannot take the run lock: {exc.strerror} ({self.path})"
            ) from None
        if not got:
            holder = self.read()
            who = (
                f"pid {holder.pid} on {holder.host} since {holder.started}"
                if holder is not None
                else "a live process (its owner information is not written yet)"
            )
            raise LockHeldError(f"{self.path}: run is locked by {who}") from None
        try:
            self._take_over()
        except OSError as exc:
            self._lock.release()
            raise as_storage_error(exc) or RunLockIOError(
                f"cannot take the run lock: {exc.strerror} ({self.path})"
            ) from None

    def _take_over(self) -> None:
        previous = self._lock.read_info()
        stale = _parse(previous)
        host = socket.gethostname()
        if stale is not None and stale.host != host:
            # A kernel lock may not span hosts (network filesystems): never take another host's lock.
            self._lock.release(remove=False)
            raise LockHeldError(
                f"{self.path}: run is locked by pid {stale.pid} on {stale.host} since {stale.started} "
                "(another host: remove the file by hand once that process is gone)"
            )
        if stale is not None:
            log.warning("taking over stale lock %s (pid %s no longer holds it)", self.path, stale.pid)
        elif previous:
            log.warning(
                "taking over stale lock %s (unreadable owner information %r)", self.path, previous[:60]
            )
        info = RunLockInfo(pid=os.getpid(), host=host, command=" ".join(sys.argv))
        self._lock.write_info(json.dumps(info.model_dump(mode="json")).encode())

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
