"""Reader leases: a reader pinning an old watermark keeps vacuum from deleting what it reads.

A lease is ``_leases/<id>.json`` (watermark, pid, host, expiry; published atomically) and the owner
lock ``_leases/<id>.lock`` (:mod:`odsd.store.locking`), held by the reader for the lease's life: the
lease counts while it is unexpired and its lock is held, so a reader that died (even by SIGKILL)
stops pinning at once, whatever became of its pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic import ValidationError

from odsd.schema import ReaderLease
from odsd.store.fsio import write_atomic
from odsd.store.locking import lock_is_held, owner_lock

LEASE_DIR = "_leases"
DEFAULT_TTL_S = 3600.0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _held(path: Path, pid: int) -> bool:
    lock = path.with_suffix(".lock")
    if lock.exists():
        return lock_is_held(lock)
    return _pid_alive(pid)


class LeaseHandle:
    """A lease file owned by this process; ``renew()`` extends it, ``release()`` deletes it.

    Take the lease *before* pinning a snapshot (``LeaseHandle(root, -1)`` protects everything),
    then :meth:`pin` it to the snapshot's watermark, so no vacuum can slip in between.
    """

    def __init__(self, root: Path, watermark: int, ttl_s: float = DEFAULT_TTL_S) -> None:
        self.path = root / LEASE_DIR / f"{uuid.uuid4().hex}.json"
        self.watermark = watermark
        self.ttl_s = ttl_s
        self.path.parent.mkdir(exist_ok=True)
        # Held before the lease is published, so a published lease is never seen unheld.
        self._lock = owner_lock(self.path.with_suffix(".lock"))
        self._lock.acquire(wait=True)
        self.renew()

    def pin(self, watermark: int) -> None:
        """Move the lease to ``watermark`` (after the snapshot it protects was pinned)."""
        self.watermark = watermark
        self.renew()

    def renew_if_due(self) -> None:
        """Renew once half the time to live has passed since the last renewal (cheap to call often)."""
        if time.monotonic() - self._renewed >= self.ttl_s / 2:
            self.renew()

    def renew(self) -> None:
        self._renewed = time.monotonic()
        expires = (datetime.now(UTC) + timedelta(seconds=self.ttl_s)).isoformat()
        lease = ReaderLease(
            lease_id=self.path.stem,
            watermark=self.watermark,
            pid=os.getpid(),
            host=socket.gethostname(),
            expires=expires,
        )
        write_atomic(self.path, json.dumps(lease.model_dump(mode="json")).encode(), durable=False)

    def release(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        self._lock.release()


def active_leases(root: Path) -> list[ReaderLease]:
    """Leases that still count: unexpired, and (on this host) whose owner lock is still held.

    A lease of another host counts until it expires (a kernel lock need not span hosts); a lease
    without a lock file (written by an older odsd) counts while its pid is alive.
    """
    lease_dir = root / LEASE_DIR
    if not lease_dir.is_dir():
        return []
    now = datetime.now(UTC)
    host = socket.gethostname()
    leases: list[ReaderLease] = []
    for path in lease_dir.glob("*.json"):
        try:
            lease = ReaderLease.model_validate_json(path.read_bytes())
        except (OSError, ValidationError):
            continue
        if datetime.fromisoformat(lease.expires) < now:
            continue
        if lease.host == host and not _held(path, lease.pid):
            continue
        leases.append(lease)
    return leases
