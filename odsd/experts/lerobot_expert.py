"""`LeRobotExpert`: a LeRobot pretrained directory as a state-conditioned expert (``lerobot:<dir>``).

::

    expert = make_expert("lerobot:ckpt/act", env.spec)       # or LeRobotExpert.from_pretrained(...)
    query = expert.act(obs, env_ids=torch.arange(n))          # labels; never steps the env

The label of an observation is the policy's action for it: for a chunking policy (ACT,
Diffusion) the first action of the chunk predicted from that observation, so every visited
observation gets its own label and the expert keeps no per-row queue (``reset`` has nothing to
forget). Loading checks the checkpoint's inputs and action dim against the env layout
(:class:`odsd.policies.lerobot_policy.LeRobotPolicy`); out-of-bounds or non-finite actions are
marked invalid by ``validate_query``.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import torch

from odsd.envs.spec import EnvSpec
from odsd.experts.query import ExpertQuery, ExpertSpec
from odsd.policies.lerobot_policy import PREFIX, LeRobotPolicy


def weights_digest(path: Path) -> str:
    """The first 12 hex digits of the sha256 of ``path/model.safetensors`` (the expert's version)."""
    digest = hashlib.sha256()
    with (path / "model.safetensors").open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:12]


class LeRobotExpert:
    """A LeRobot policy labelling env observations (see module docstring)."""

    def __init__(self, policy: LeRobotPolicy, env_spec: EnvSpec) -> None:
        self.policy = policy
        self.env_spec = env_spec
        self.spec = ExpertSpec(
            name=f"{PREFIX}{policy.path.name}",
            version=f"{policy.type}-{weights_digest(policy.path)}",
            kind="policy",
            state_conditioned=True,
        )

    @classmethod
    def from_pretrained(
        cls, path: str | os.PathLike[str], env_spec: EnvSpec, *, device: str | torch.device | None = None
    ) -> LeRobotExpert:
        """Load a LeRobot pretrained directory for ``env_spec`` (on the env device by default)."""
        return cls(LeRobotPolicy.load(path, env_spec, device=device), env_spec)

    def reset(self, env_ids: torch.Tensor, obs: dict[str, torch.Tensor], info: dict[str, Any]) -> None:
        """Stateless; nothing to forget."""

    def act(self, obs: dict[str, torch.Tensor], *, env_ids: torch.Tensor) -> ExpertQuery:
        """Label rows ``env_ids`` of ``obs`` with the policy's actions (on the env device)."""
        device = self.env_spec.device
        ids = torch.as_tensor(env_ids, device=device).long().flatten()
        flat = self.env_spec.flatten_observation({k: v[ids] for k, v in obs.items()})
        action = self.policy.first_actions(flat).to(device, torch.float32)
        valid = torch.ones(ids.numel(), dtype=torch.bool, device=device)
        return ExpertQuery(action=action, valid=valid)
