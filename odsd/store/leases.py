"""Reader leases: a reader pinning an old watermark keeps vacuum from deleting what it reads."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic import ValidationError

from odsd.schema import ReaderLease
from odsd.store.fsio import write_atomic

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
        self.renew()

    def pin(self, watermark: int) -> None:
        """Move the lease to ``watermark`` (after the snapshot it protects was pinned)."""
        self.watermark = watermark
        self.renew()

    def renew(self) -> None:
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


def active_leases(root: Path) -> list[ReaderLease]:
    """Leases that still count: unexpired, and (on this host) held by a live process."""
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
        if lease.host == host and not _pid_alive(lease.pid):
            continue
        leases.append(lease)
    return leases
