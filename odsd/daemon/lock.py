"""The run lock: one process owns a run; a lock left by a dead process is taken over."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import sys
from pathlib import Path

from pydantic import ValidationError

from odsd.daemon.errors import LockHeldError
from odsd.schema.run import RunLockInfo
from odsd.store.fsio import put_if_absent

log = logging.getLogger("odsd.daemon")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunLock:
    """``runs/<run_id>/lock``, published with put-if-absent; holds pid, host and start time.

    >>> with RunLock(run_dir):
    ...     collect()
    """

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / "lock"
        self.held = False

    def read(self) -> RunLockInfo | None:
        try:
            return RunLockInfo.model_validate_json(self.path.read_bytes())
        except FileNotFoundError:
            return None
        except (ValidationError, OSError, ValueError):
            return RunLockInfo(pid=-1, host="?", started="?", command="unreadable lock file")

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        info = RunLockInfo(pid=os.getpid(), host=socket.gethostname(), command=" ".join(sys.argv))
        data = json.dumps(info.model_dump(mode="json")).encode()
        for _attempt in range(3):
            # Written in full, then linked into place: a lock file is never seen half-written.
            if put_if_absent(self.path, data, durable=False):
                self.held = True
                return
            holder = self.read()
            if holder is None:
                continue
            if holder.host == socket.gethostname() and not pid_alive(holder.pid):
                log.warning("taking over stale lock %s (pid %s is gone)", self.path, holder.pid)
                stale = self.path.with_name(f"lock.stale-{holder.pid}")
                with contextlib.suppress(FileNotFoundError):
                    os.replace(self.path, stale)
                    stale.unlink()
                continue
            raise LockHeldError(
                f"{self.path}: run is locked by pid {holder.pid} on {holder.host} since {holder.started}"
            ) from None
        raise LockHeldError(f"{self.path}: could not take the run lock (contended)")

    def release(self) -> None:
        if self.held:
            holder = self.read()
            if holder is not None and holder.pid == os.getpid():
                self.path.unlink(missing_ok=True)
            self.held = False

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
