"""``CollectConfig``: the validated configuration of a collection run (TOML file + CLI flags)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from odsd.collect.beta import BetaSchedule
from odsd.errors import ConfigError
from odsd.schema.names import check_name

Mode = Literal["expert_demo", "dagger_sync", "eval"]
LEROBOT_PREFIX = "lerobot:"
"""``student = "lerobot:<dir>"`` (same as :data:`odsd.policies.lerobot_policy.PREFIX`)."""


class CompactionConfig(BaseModel):
    """Auto-compaction by the writer while a run collects (``[compaction]`` in TOML).

    Whenever ``min_segments`` of the run's own segments are uncompacted, the writer merges the
    oldest of them (at most ``max_segments_per_pass`` segments, ``max_bytes_per_pass`` bytes and
    ``shard_frames`` frames) into one shard between two commits, deletes segments it merged more
    than ``vacuum_grace_s`` ago that no reader lease can still see, and keeps the newest
    ``keep_checkpoints`` checkpoints. Once ``log_min_records`` commit records older than the
    newest ``log_keep_records`` are files, it packs them into a log archive, merging archives
    while there are more than ``log_max_archives`` (:mod:`odsd.store.log_compaction`).
    ``enabled = false`` turns all of it off.
    """

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    min_segments: int = Field(default=32, ge=2)
    max_segments_per_pass: int = Field(default=64, ge=2)
    max_bytes_per_pass: int = Field(default=512 * 2**20, ge=1)
    shard_frames: int = Field(default=200_000, ge=1)
    chunk_frames: int = Field(default=65_536, ge=1)
    vacuum_grace_s: float = Field(default=60.0, ge=0)
    keep_checkpoints: int = Field(default=4, ge=1)
    log_keep_records: int = Field(default=256, ge=1)
    log_min_records: int = Field(default=256, ge=1)
    log_max_archives: int = Field(default=8, ge=1)

    @model_validator(mode="after")
    def _check(self) -> CompactionConfig:
        if self.max_segments_per_pass < self.min_segments:
            raise ValueError(
                f"max_segments_per_pass ({self.max_segments_per_pass}) must be >= min_segments "
                f"({self.min_segments}), or the uncompacted tail is not bounded"
            )
        return self


class CollectConfig(BaseModel):
    """Everything that decides what a run collects. Unknown keys are rejected.

    ``odsd collect --config run.toml --num-envs 64 --set beta.decay=0.7`` loads the file, then
    applies flags; every field can be set with ``--set dotted.name=value`` (value parsed as JSON,
    else taken as a string).
    """

    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True)  # --set run_id=20240101

    mode: Mode = "dagger_sync"
    task: str = "pick_place"
    task_kwargs: dict[str, Any] = Field(default_factory=dict)
    expert: str = "planner"
    expert_kwargs: dict[str, Any] = Field(default_factory=dict)
    student: str | None = None
    """A policy snapshot directory, or a directory of versioned snapshots; default: ``<store>/policies``.
    ``lerobot:<dir>``: a LeRobot pretrained directory (config, weights, processors), pinned."""
    store: Path = Path("odsd-store")
    num_envs: int = Field(default=16, ge=1)
    device: str = "cpu"
    seed: int = Field(default=0, ge=0, le=2**63 - 1)
    """Seeds the envs, mixing and the initial student (an unsigned 63-bit integer, as torch and numpy take)."""
    episodes_per_iteration: int = Field(default=64, ge=1)
    max_episodes: int | None = Field(default=None, ge=1)
    max_iterations: int | None = Field(default=None, ge=1)
    duration_s: float | None = Field(default=None, gt=0)
    beta: BetaSchedule = Field(default_factory=BetaSchedule)
    mixing: Literal["step", "episode"] = "step"
    keep_failed: bool = False
    """expert_demo: also commit failed episodes."""
    success_only: bool = False
    """dagger_sync: commit only successful episodes."""
    record_state: bool = False
    commit_max_episodes: int | None = Field(default=None, ge=1)
    """Episodes per commit (default: max(32, num_envs): each commit has a fixed file-system cost, so
    many rows commit in bulk; ``commit_max_age_s`` still bounds how late data becomes visible)."""
    commit_max_age_s: float = Field(default=2.0, gt=0)
    """A finished episode is committed at most this long after it finished (plus the commit's own time)."""
    queue_size: int = Field(default=256, ge=1)
    """Most batches of finished episodes waiting for the writer (each up to the spare slots' episodes)."""
    commit_queue_bytes: int = Field(default=2 * 2**30, ge=1)
    """Most bytes of frames waiting for the writer: with cameras, fewer than ``queue_size`` batches
    may wait (at least one), and the collector blocks until the writer catches up."""
    durability: Literal["fsync", "process"] = "fsync"
    writer: Literal["process", "thread"] = "process"
    """Where commits are written: a child process (own core, no GIL contention with the loop)
    or a thread of the collector. Inside a daemonic process (a ``multiprocessing.Pool`` worker),
    which may not have children, ``"process"`` falls back to a thread with a warning."""
    run_id: str | None = None
    metrics_interval_s: float = Field(default=5.0, gt=0)
    policy_wait_s: float = Field(default=0.0, ge=0)
    """dagger_sync: at an iteration boundary, wait up to this long for a newer student snapshot
    (a separate ``odsd learn`` process); 0 continues at once with the newest one available."""
    torch_threads: int | None = Field(default=None, ge=1)
    """torch intra-op threads for this process (default: torch's choice)."""
    compaction: CompactionConfig = Field(default_factory=CompactionConfig)
    """Auto-compaction while collecting (see :class:`CompactionConfig`)."""
    image_encoding: dict[str, str] = Field(default_factory=dict)
    """How camera frames are compressed in the store, per camera name (``"*"``: every camera):
    ``{"top": "jpeg:90", "*": "png"}``; cameras not named use the store's lossless default."""
    episode_buffer_bytes: int = Field(default=4 * 2**30, ge=1)
    """Most memory (on the env device) the preallocated episode buffers may take. Every row needs
    one episode slot; finished episodes wait in spare slots until they are copied out, and with
    cameras the spare slots are cut to fit this bound (finished episodes are then copied out
    earlier, in smaller batches)."""

    @field_validator("run_id")
    @classmethod
    def _run_id_is_a_name(cls, value: str | None) -> str | None:
        # It names runs/<run_id>/ and the writers' segments/<run_id>-<rand>/ directories.
        return value if value is None else check_name(value, "run id")

    @model_validator(mode="after")
    def _check(self) -> CollectConfig:
        if self.lerobot_student is not None and self.policy_wait_s > 0:
            raise ValueError(
                "a LeRobot student (lerobot:<dir>) is pinned: policy_wait_s has no newer snapshot to wait for"
            )
        if self.device != "cpu":
            from odsd.devices import check_device  # imports torch: not for cpu, not in the writer

            check_device(self.device)
        return self

    @property
    def commit_batch_episodes(self) -> int:
        return self.commit_max_episodes or max(32, self.num_envs)

    @property
    def lerobot_student(self) -> Path | None:
        """The LeRobot pretrained directory of ``student = "lerobot:<dir>"`` (else ``None``)."""
        if self.student is not None and self.student.startswith(LEROBOT_PREFIX):
            return Path(self.student[len(LEROBOT_PREFIX) :])
        return None

    @property
    def policies_dir(self) -> Path:
        """Where snapshot students come from (``<store>/policies`` for a LeRobot student)."""
        if self.student and self.lerobot_student is None:
            return Path(self.student)
        return self.store / "policies"

    def identity(self) -> dict[str, Any]:
        """The fields that must not change when a run resumes (they change what the data means)."""
        return {
            "task": self.task,
            "task_kwargs": self.task_kwargs,
            "expert": self.expert,
            "mode": self.mode,
            "record_state": self.record_state,
            "image_encoding": self.image_encoding,
        }


def parse_override(item: str) -> tuple[list[str], Any]:
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected dotted.name=value")
    key, raw = item.split("=", 1)
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key.strip().split("."), value


def load_config(
    path: Path | None = None, overrides: dict[str, Any] | None = None, sets: list[str] | None = None
) -> CollectConfig:
    """Merge a TOML file, explicit flag values (non-None) and ``--set`` items; validate once."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            data = tomllib.loads(path.read_text())
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read config ({exc.strerror})") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: invalid TOML ({exc})") from exc
    for key, value in (overrides or {}).items():
        if value is not None:
            data[key] = value
    for item in sets or []:
        keys, value = parse_override(item)
        node = data
        for k in keys[:-1]:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {item!r}: {k} is not a table")
        node[keys[-1]] = value
    try:
        return CollectConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "config"
        source = f"{path}: " if path else ""
        raise ConfigError(f"{source}{where}: {first['msg']}") from exc
