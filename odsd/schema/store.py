"""Documents of the episode store: manifest, commit records, checkpoints, reader leases."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any, Literal

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from odsd.schema.names import check_data_path

FORMAT_VERSION = 1
"""On-disk format version written into ``odsd.json``; readers refuse any other."""


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ImageEncoding(_Doc):
    """How the frames of an image field are compressed: one frame per chunk, many chunks per file.

    ``codec`` names a codec of :mod:`odsd.store.codecs`; ``quality`` applies to lossy codecs only.
    """

    codec: str
    quality: int | None = None


FeatureKind = Literal["array", "image", "depth"]
"""``image``: uint8 ``(height, width, channels)`` camera frames; ``depth``: uint16 ``(height, width, 1)``
depth in millimetres; ``array``: everything else."""


class FeatureSpec(_Doc):
    """One per-frame field: its numpy dtype, per-frame shape and element names.

    Camera fields have ``kind="image"`` (or ``"depth"``) and an ``encoding``; a store without
    camera fields has the same documents (and schema hash) as before cameras existed.
    """

    dtype: str
    shape: tuple[int, ...] = ()
    names: list[str] | None = None
    kind: FeatureKind = Field(default="array", exclude_if=lambda kind: kind == "array")
    encoding: ImageEncoding | None = Field(default=None, exclude_if=lambda encoding: encoding is None)
    """Camera fields are written only when set, so stores without cameras read as before."""

    @field_validator("dtype")
    @classmethod
    def _known_dtype(cls, value: str) -> str:
        try:
            dtype = np.dtype(value)
        except TypeError as exc:
            raise ValueError(f"unknown dtype {value!r}") from exc
        if dtype.kind not in "biuf":
            raise ValueError(f"dtype {value!r} is not a bool, integer or float type")
        return dtype.name

    @field_validator("shape")
    @classmethod
    def _positive_shape(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if any(d <= 0 for d in value):
            raise ValueError(f"shape {value} has a non-positive dimension")
        return value

    def hash_fields(self) -> dict[str, Any]:
        """The fields the schema hash covers (camera fields only when set: older hashes stay valid)."""
        return self.model_dump()


class StoreManifest(_Doc):
    """``odsd.json``: identity, format version and feature schema of a store."""

    format_version: int = FORMAT_VERSION
    store_id: str
    features: dict[str, FeatureSpec]
    fps: float = Field(gt=0)
    robot_type: str | None = None
    created: str = Field(default_factory=utc_now)
    checkpoint_interval: int = Field(default=64, ge=1)
    durability: Literal["fsync", "process"] = "fsync"
    """Default durability of writers that do not choose one."""

    def schema_hash(self) -> str:
        """A stable hash of the feature schema (names, dtypes, shapes, element names) and fps."""
        payload = {
            "fps": self.fps,
            "features": {k: v.hash_fields() for k, v in sorted(self.features.items())},
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


class SegmentInfo(_Doc):
    """One immutable Zarr group added by a commit."""

    path: str
    """Relative to the store root, e.g. ``segments/w-ab12/000000000003-9f3c1e``."""
    n_frames: int = Field(ge=0)
    nbytes: int = Field(ge=0)
    checksums: dict[str, str]
    """Per field: crc32 (hex) of the uncompressed little-endian frame data."""

    @field_validator("path")
    @classmethod
    def _inside_store(cls, value: str) -> str:
        return check_data_path(value)


class SegmentRef(_Doc):
    name: str
    start: int
    end: int
    success: bool | None = None
    failure_reason: str | None = None


class EpisodeMeta(_Doc):
    """Per-episode metadata a writer supplies; stored in the commit record."""

    length: int = Field(ge=1)
    run_id: str | None = None
    writer_id: str | None = None
    iteration: int = 0
    env_row: int | None = None
    seed: int | None = None
    success: bool = False
    terminated: bool = False
    truncated: bool = False
    terminal_reason: str | None = None
    policy_version_first: int | None = None
    policy_version_last: int | None = None
    expert_name: str | None = None
    expert_version: str | None = None
    beta: float | None = None
    task: str = ""
    segments: list[SegmentRef] = Field(default_factory=list)
    started: str | None = None
    finished: str | None = None
    extra: dict[str, Any] = Field(default_factory=dict)


class EpisodeEntry(_Doc):
    """An episode as the index knows it: id, location and metadata."""

    episode_id: int = Field(ge=0)
    segment: str
    offset: int = Field(ge=0)
    commit_seq: int = Field(ge=0)
    meta: EpisodeMeta

    @field_validator("segment")
    @classmethod
    def _inside_store(cls, value: str) -> str:
        return check_data_path(value)


class AddAction(_Doc):
    type: Literal["add"] = "add"
    segment: SegmentInfo
    episodes: list[EpisodeEntry]


class RemoveAction(_Doc):
    type: Literal["remove"] = "remove"
    episode_ids: list[int]
    reason: Literal["retention", "compaction", "manual"]


class CommitContext(_Doc):
    """The run's state when a commit was made (informational, used by resume and reports)."""

    iteration: int | None = None
    beta: float | None = None
    policy_version: int | None = None
    extra: dict[str, Any] = Field(default_factory=dict)


class CommitRecord(_Doc):
    """``_log/<seq>.json``: the only thing that makes data visible."""

    seq: int = Field(ge=0)
    kind: Literal["append", "compact", "retain", "delete"]
    writer_id: str
    writer_seq: int = Field(ge=0)
    run_id: str | None = None
    timestamp: str = Field(default_factory=utc_now)
    first_episode_id: int = Field(ge=0)
    """Ids given to newly appended episodes start here (next id after all earlier records)."""
    removes: list[RemoveAction] = Field(default_factory=list)
    adds: list[AddAction] = Field(default_factory=list)
    context: CommitContext = Field(default_factory=CommitContext)
    checksum: str = ""
    """sha256 of the record's canonical JSON with this field empty; detects damaged records."""


class Checkpoint(_Doc):
    """``_log/_checkpoint.<seq>.json``: the store state after applying records ``0..seq``."""

    seq: int = Field(ge=0)
    next_episode_id: int = Field(ge=0)
    episodes: list[EpisodeEntry]
    segments: dict[str, SegmentInfo]
    """Every segment ever added, live or dead (needed by vacuum and fsck)."""
    dead_segments: dict[str, tuple[int, str]]
    """Segments no live episode references: path -> (seq that removed the last reference, time)."""
    writer_seqs: dict[str, int]
    """Highest writer_seq seen per writer id (idempotency keys)."""
    checksum: str = ""


class ReaderLease(_Doc):
    """``_leases/<id>.json``: a reader pinning a watermark; vacuum keeps what it can see."""

    lease_id: str
    watermark: int
    pid: int
    host: str
    created: str = Field(default_factory=utc_now)
    expires: str


class LogArchive(_Doc):
    """One packed archive of commit records in ``_log/`` (an entry of :class:`LogArchiveIndex`)."""

    name: str
    """``_archive.<first>-<last>.jsonl`` (20-digit seqs): one record per line, as encoded in its file."""
    first: int = Field(ge=0)
    last: int = Field(ge=0)
    nbytes: int = Field(ge=0)
    sha256: str
    """sha256 of the whole file; each line also carries its record's own checksum."""

    @model_validator(mode="after")
    def _check_name(self) -> LogArchive:
        if self.last < self.first:
            raise ValueError(f"archive {self.name!r} ends ({self.last}) before it starts ({self.first})")
        if self.name != f"_archive.{self.first:020d}-{self.last:020d}.jsonl":
            raise ValueError(f"archive name {self.name!r} does not match its range {self.first}-{self.last}")
        return self


class LogArchiveIndex(_Doc):
    """``_log/_archives.json``: the archives that hold records ``0..through`` (replaced atomically).

    Archives are listed in order and cover ``0..through`` without a gap or an overlap; records
    after ``through`` are individual files. A record file at a seq ``≤ through`` is not part of
    the history (the archive is): a leftover of an interrupted archiving, or a stale writer's.
    """

    through: int = Field(ge=-1)
    archives: list[LogArchive]
    checksum: str = ""

    @model_validator(mode="after")
    def _check_chain(self) -> LogArchiveIndex:
        expected = 0
        for archive in self.archives:
            if archive.first != expected:
                raise ValueError(f"archive {archive.name} starts at {archive.first}, expected {expected}")
            expected = archive.last + 1
        if expected - 1 != self.through:
            raise ValueError(f"archives end at {expected - 1}, but through is {self.through}")
        return self
