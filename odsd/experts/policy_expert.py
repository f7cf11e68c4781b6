"""`PolicyExpert`: a policy snapshot run batched as an expert.

::

    expert = PolicyExpert.from_snapshot("runs/policies", env.spec)   # newest complete snapshot
    query = expert.act(obs, env_ids=torch.arange(n))

Loading checks the snapshot's layout hash against the env spec (a mismatch is refused). The
expert flattens observations with the env's own rule, so students and experts see the same
``observation.state``; invalid rows (NaN/out of bounds) are caught by ``validate_query``.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from odsd.envs.spec import STATE_KEY, EnvSpec
from odsd.experts.query import ExpertQuery, ExpertSpec
from odsd.policies.snapshot import LoadedPolicy, check_layout, load_snapshot


class PolicyExpert:
    """Checkpoint policy as a state-conditioned expert (see module docstring)."""

    def __init__(self, loaded: LoadedPolicy, env_spec: EnvSpec) -> None:
        check_layout(loaded.meta, env_spec, loaded.path)
        self.loaded = loaded
        self.env_spec = env_spec
        self.spec = ExpertSpec(
            name=f"policy:{loaded.path.name}",
            version=str(loaded.version),
            kind="policy",
            state_conditioned=True,
        )

    @classmethod
    def from_snapshot(
        cls, path: str | os.PathLike[str], env_spec: EnvSpec, *, device: str | torch.device | None = None
    ) -> PolicyExpert:
        """Load a snapshot directory (or the newest one under a root) for ``env_spec``."""
        loaded = load_snapshot(path, env_spec=env_spec, device=env_spec.device if device is None else device)
        return cls(loaded, env_spec)

    def reset(self, env_ids: torch.Tensor, obs: dict[str, torch.Tensor], info: dict[str, Any]) -> None:
        """Stateless; nothing to forget."""

    def act(self, obs: dict[str, torch.Tensor], *, env_ids: torch.Tensor) -> ExpertQuery:
        """Run the policy on rows ``env_ids``; actions come back on the env device."""
        ids = torch.as_tensor(env_ids, device=self.env_spec.device).long().flatten()
        state = self.env_spec.flatten_observation({k: v[ids] for k, v in obs.items()})[STATE_KEY]
        action = self.loaded.policy(state).to(self.env_spec.device, torch.float32)
        valid = torch.ones(ids.numel(), dtype=torch.bool, device=self.env_spec.device)
        return ExpertQuery(action=action, valid=valid, metadata={"policy_version": self.loaded.version})
