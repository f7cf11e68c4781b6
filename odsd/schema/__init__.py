"""Pydantic models of every on-disk document odsd writes.

``schemas/*.schema.json`` is generated from these models (``make schemas``); a test fails when
the committed files drift from the models.
"""

from odsd.schema.store import (
    FORMAT_VERSION,
    AddAction,
    Checkpoint,
    CommitContext,
    CommitRecord,
    EpisodeEntry,
    EpisodeMeta,
    FeatureKind,
    FeatureSpec,
    ImageEncoding,
    ReaderLease,
    RemoveAction,
    SegmentInfo,
    StoreManifest,
)

__all__ = [
    "FORMAT_VERSION",
    "AddAction",
    "Checkpoint",
    "CommitContext",
    "CommitRecord",
    "EpisodeEntry",
    "EpisodeMeta",
    "FeatureKind",
    "FeatureSpec",
    "ImageEncoding",
    "ReaderLease",
    "RemoveAction",
    "SegmentInfo",
    "StoreManifest",
]
