"""The student policy the collector runs: the newest complete snapshot in a policies directory,
or a pinned LeRobot pretrained directory (``lerobot:<dir>``).

Every student implements :class:`StudentPolicy`; the collector calls only these::

    action, chunk_position = student.act(flat)   # [n, A] raw actions; [n] int16 or None
    student.reset_rows(rows)                     # after the env reset those rows
    student.version, student.path, student.chunk_steps
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol, runtime_checkable

import torch

from odsd.envs import EnvSpec
from odsd.policies.errors import SnapshotNotFoundError
from odsd.policies.fit import reference_meta
from odsd.policies.mlp import ReferenceMLP
from odsd.policies.snapshot import LoadedPolicy, latest_snapshot, load_snapshot, publish_snapshot

log = logging.getLogger("odsd.collect")


@runtime_checkable
class StudentPolicy(Protocol):
    """What the collector needs of a student (a :class:`LoadedPolicy` or a ``ChunkedStudent``)."""

    path: Path
    chunk_steps: int
    """Actions executed per predicted chunk; 1 for a policy that does not chunk."""

    @property
    def version(self) -> int: ...

    def act(self, obs: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Raw actions ``[n, A]`` for the flattened observation of every row, and each row's
        position in its action chunk (``[n]`` int16; ``None`` for a policy that does not chunk)."""
        ...

    def reset_rows(self, rows: torch.Tensor) -> None:
        """Forget per-row state (queued chunk actions) of ``rows``."""
        ...


def initial_student(spec: EnvSpec, *, seed: int, hidden: tuple[int, ...] = (256, 256)) -> ReferenceMLP:
    """A freshly initialized reference MLP for ``spec`` (deterministic in ``seed``)."""
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        low = spec.action.low_tensor()
        high = spec.action.high_tensor()
        return ReferenceMLP(spec.state_dim, spec.action.dim, hidden, action_low=low, action_high=high)
    finally:
        torch.random.set_rng_state(gen_state)


def publish_initial_student(policies_dir: Path, spec: EnvSpec, *, seed: int) -> Path:
    model = initial_student(spec, seed=seed)
    meta = reference_meta(model, spec, extra={"origin": "freshly initialized by odsd collect"})
    return publish_snapshot(policies_dir, model, meta, version=0)


class StudentSource:
    """Loads the newest complete snapshot from ``policies_dir`` at iteration boundaries.

    A ``policies_dir`` that is itself a snapshot (``vNNNNNN`` with ``COMPLETE``) is pinned.
    """

    chunk_steps = 1

    def __init__(self, policies_dir: Path, spec: EnvSpec, *, device: torch.device, seed: int) -> None:
        self.dir = policies_dir
        self.spec = spec
        self.device = device
        self.seed = seed
        self.current: LoadedPolicy | None = None

    def _newest(self) -> Path | None:
        if (self.dir / "COMPLETE").exists():
            return self.dir
        return latest_snapshot(self.dir) if self.dir.is_dir() else None

    def load_path(self, path: str | Path) -> LoadedPolicy:
        """Load one exact snapshot (e.g. the version a run-state manifest recorded)."""
        self.current = load_snapshot(Path(path), env_spec=self.spec, device=self.device)
        return self.current

    def load_newest(self, *, create: bool = True) -> LoadedPolicy:
        """The newest complete snapshot (creating version 0 when there is none and ``create``)."""
        path = self._newest()
        if path is None:
            if not create:
                raise SnapshotNotFoundError(
                    f"{self.dir}: no complete policy snapshot (vNNNNNN with COMPLETE)"
                )
            path = publish_initial_student(self.dir, self.spec, seed=self.seed)
            log.warning(
                "no student snapshot under %s: starting from a freshly initialized reference MLP (v0)",
                self.dir,
            )
        if self.current is None or self.current.path != path:
            self.current = load_snapshot(path, env_spec=self.spec, device=self.device)
        return self.current


class LeRobotStudentSource:
    """A LeRobot pretrained directory as a pinned student (version 0), loaded once, here.

    ``load_newest`` and ``load_path`` return the same :class:`ChunkedStudent` for the whole run
    (its per-row chunk queues carry over iteration boundaries); nothing is reloaded.
    """

    def __init__(self, pretrained_dir: Path, spec: EnvSpec, *, device: torch.device) -> None:
        from odsd.policies.action_chunks import ChunkedStudent
        from odsd.policies.lerobot_policy import LeRobotPolicy

        self.dir = pretrained_dir
        self.current = ChunkedStudent(
            LeRobotPolicy.load(pretrained_dir, spec, device=device, history=True), num_rows=spec.num_envs
        )
        self.chunk_steps = self.current.chunk_steps

    def load_path(self, path: str | Path) -> StudentPolicy:
        """The pinned student (a resumed run recorded its directory)."""
        return self.current

    def load_newest(self, *, create: bool = True) -> StudentPolicy:
        """The pinned student."""
        return self.current


def student_source(
    lerobot_dir: Path | None, policies_dir: Path, spec: EnvSpec, *, device: torch.device, seed: int
) -> StudentSource | LeRobotStudentSource:
    """The student's source: a LeRobot pretrained directory (``CollectConfig.lerobot_student``)
    when given, else the snapshots in ``policies_dir``."""
    if lerobot_dir is not None:
        return LeRobotStudentSource(lerobot_dir, spec, device=device)
    return StudentSource(policies_dir, spec, device=device, seed=seed)
