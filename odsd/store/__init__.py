"""The episode store: versioned Zarr segments, atomic commits, watermarks and snapshot reads.

>>> from odsd.store import EpisodeStore, Episode
>>> store = EpisodeStore.open_or_create("data.odsd", features=features, fps=20)
>>> store.writer(run_id="run-1").commit([Episode(frames=frames, meta=EpisodeMeta(length=n))])
>>> snap = store.snapshot()
"""

from odsd.store.compaction import CompactionResult, compact
from odsd.store.episode_store import MANIFEST, EpisodeStore
from odsd.store.errors import (
    CommitConflictError,
    CorruptStoreError,
    FormatVersionError,
    SchemaMismatchError,
    StoreError,
    StoreExistsError,
    StoreNotFoundError,
    VacuumedDataError,
)
from odsd.store.fsck import Finding, FsckReport, fsck
from odsd.store.retention import RetentionPolicy, apply_retention, select_expired
from odsd.store.snapshot import Snapshot
from odsd.store.state import StoreState
from odsd.store.vacuum import VacuumResult, vacuum
from odsd.store.writer import CommitResult, Episode, EpisodeBatch, EpisodeWriter

__all__ = [
    "MANIFEST",
    "CommitConflictError",
    "CommitResult",
    "CompactionResult",
    "CorruptStoreError",
    "Episode",
    "EpisodeBatch",
    "EpisodeStore",
    "EpisodeWriter",
    "Finding",
    "FormatVersionError",
    "FsckReport",
    "RetentionPolicy",
    "SchemaMismatchError",
    "Snapshot",
    "StoreError",
    "StoreExistsError",
    "StoreNotFoundError",
    "StoreState",
    "VacuumResult",
    "VacuumedDataError",
    "apply_retention",
    "compact",
    "fsck",
    "select_expired",
    "vacuum",
]
