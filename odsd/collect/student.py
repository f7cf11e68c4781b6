"""The student policy the collector runs: the newest complete snapshot in a policies directory."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from odsd.envs import EnvSpec
from odsd.policies.errors import SnapshotNotFoundError
from odsd.policies.fit import reference_meta
from odsd.policies.mlp import ReferenceMLP
from odsd.policies.snapshot import LoadedPolicy, latest_snapshot, load_snapshot, publish_snapshot

log = logging.getLogger("odsd.collect")


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
