"""Documents of a collection run: run-state manifests, status heartbeat, run lock."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from odsd.schema.store import utc_now

RUN_STATE_VERSION = 1


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RunCounters(_Doc):
    iteration: int = 0
    episodes_in_iteration: int = 0
    episodes_accepted: int = 0
    episodes_finished: int = 0
    episodes_committed: int = 0
    frames_committed: int = 0
    env_steps: int = 0
    successes: int = 0


class RngStates(_Doc):
    """Base64 of each generator's state, so a resumed run continues the same streams."""

    torch: str
    numpy: dict[str, Any]
    mixer: dict[str, str]
    env_seed: int


class RunState(_Doc):
    """``runs/<run_id>/state/<n>/manifest.json``: where a run stood at a synchronized point.

    Written after the writer was drained, so every episode it counts is committed at or below
    ``watermark``; the directory's ``COMPLETE`` marker is written last.
    """

    format_version: int = RUN_STATE_VERSION
    run_id: str
    incarnation: int = Field(ge=0)
    sequence: int = Field(ge=0)
    reason: Literal["start", "iteration", "shutdown", "failure"]
    created: str = Field(default_factory=utc_now)
    watermark: int
    counters: RunCounters
    beta: float
    policy_version: int
    policy_path: str | None = None
    policy_weights_sha256: str | None = None
    expert: dict[str, Any] | None = None
    rng: RngStates
    config: dict[str, Any]
    config_identity_hash: str
    schema_hash: str
    env_layout_hash: str


class RunStatus(_Doc):
    """``runs/<run_id>/status.json``: the heartbeat `odsd status` renders."""

    run_id: str
    state: Literal["starting", "running", "stopping", "stopped", "failed"]
    pid: int
    host: str
    incarnation: int = 0
    started: str
    heartbeat: str = Field(default_factory=utc_now)
    mode: str
    task: str
    iteration: int = 0
    beta: float | None = None
    policy_version: int | None = None
    watermark: int | None = None
    counters: RunCounters = Field(default_factory=RunCounters)
    env_steps_per_s: float | None = None
    frames_committed_per_s: float | None = None
    collection_success_rate: float | None = None
    writer_queue_depth: int = 0
    last_error: str | None = None
    stop_reason: str | None = None


class RunLockInfo(_Doc):
    """``runs/<run_id>/lock``: who owns the run."""

    pid: int
    host: str
    started: str = Field(default_factory=utc_now)
    command: str = ""
