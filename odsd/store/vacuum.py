"""Vacuum: delete the files of segments no live episode references, once it is safe."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from odsd.store.leases import active_leases
from odsd.store.segments import remove_tree, tree_nbytes

if TYPE_CHECKING:
    from odsd.store.episode_store import EpisodeStore

DEFAULT_GRACE_S = 3600.0


@dataclass(frozen=True)
class VacuumResult:
    deleted: list[str]
    kept_for_grace: list[str]
    kept_for_lease: list[str]
    freed_bytes: int


def vacuum(store: EpisodeStore, *, grace_s: float = DEFAULT_GRACE_S, dry_run: bool = False) -> VacuumResult:
    """Delete dead segments removed more than ``grace_s`` ago and invisible to every reader lease.

    A segment died at the commit ``seq`` that removed its last live episode; a lease pinned at
    a watermark below that ``seq`` can still read it, so it is kept.
    """
    state = store.refresh()
    now = datetime.now(UTC)
    oldest_pin = min((lease.watermark for lease in active_leases(store.root)), default=None)
    deleted: list[str] = []
    grace: list[str] = []
    leased: list[str] = []
    freed = 0
    for path, (seq, stamp) in sorted(state.dead_segments.items()):
        target = store.root / path
        if not target.exists():
            continue
        if now - datetime.fromisoformat(stamp) < timedelta(seconds=grace_s):
            grace.append(path)
        elif oldest_pin is not None and oldest_pin < seq:
            leased.append(path)
        else:
            freed += tree_nbytes(target)
            if not dry_run:
                remove_tree(target)
            deleted.append(path)
    return VacuumResult(deleted=deleted, kept_for_grace=grace, kept_for_lease=leased, freed_bytes=freed)
