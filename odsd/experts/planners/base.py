"""`PlannerExpert`: a state-conditioned controller as a pure function of the observation.

A planner subclass implements :meth:`PlannerExpert.plan` on the selected rows only; it never
reads env internals, so it labels any state, including states the planner itself would never
visit. The base class handles row selection, non-finite observations, phases and the query::

    expert = make_expert("planner", env.spec)
    query = expert.act(obs, env_ids=torch.arange(env.spec.num_envs))
    query.metadata["phase"]         # [n] long, indices into expert.phase_names
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from odsd.envs.spec import EnvSpec
from odsd.experts.failures import Failure
from odsd.experts.query import ExpertQuery, ExpertSpec


@dataclass
class PlanResult:
    """Planner output for ``m`` rows: action ``[m, A]``, phase ``[m]`` long, failure ``[m]`` int32."""

    action: torch.Tensor
    phase: torch.Tensor
    failure: torch.Tensor


class PlannerExpert(ABC):
    """Base class of per-task planners (see module docstring)."""

    phase_names: ClassVar[list[str]] = []
    version: str = "1"

    def __init__(self, env_spec: EnvSpec) -> None:
        self.env_spec = env_spec
        self.spec = ExpertSpec(
            name=f"planner:{env_spec.task}", version=self.version, kind="planner", state_conditioned=True
        )

    @abstractmethod
    def plan(self, obs: dict[str, torch.Tensor]) -> PlanResult:
        """Actions for every row of ``obs`` (already restricted to the queried rows, all finite)."""

    def reset(  # noqa: B027 - planners are stateless by design
        self, env_ids: torch.Tensor, obs: dict[str, torch.Tensor], info: dict[str, Any]
    ) -> None:
        """Planners are stateless; nothing to forget."""

    def act(self, obs: dict[str, torch.Tensor], *, env_ids: torch.Tensor) -> ExpertQuery:
        """Label rows ``env_ids`` of ``obs``; rows with non-finite observations are invalid."""
        ids = torch.as_tensor(env_ids, device=self.env_spec.device).long().flatten()
        cameras = set(self.env_spec.camera_keys)  # planners act on state, never on pixels
        rows = {k: v[ids].to(torch.float32) for k, v in obs.items() if k not in cameras}
        finite = torch.ones(ids.numel(), dtype=torch.bool, device=ids.device)
        for value in rows.values():
            finite &= torch.isfinite(value.reshape(value.shape[0], -1)).all(dim=1)
        safe = {
            k: torch.where(finite.view(-1, *([1] * (v.dim() - 1))), v, torch.zeros_like(v))
            for k, v in rows.items()
        }
        result = self.plan(safe)
        failure = torch.where(
            finite,
            result.failure.to(torch.int32),
            torch.full_like(result.failure, Failure.INVALID_OBSERVATION, dtype=torch.int32),
        )
        valid = failure == 0
        return ExpertQuery(
            action=result.action,
            valid=valid,
            confidence=valid.to(torch.float32),
            failure=failure,
            metadata={"phase": result.phase.long()},
        )


def move_toward(target: torch.Tensor, pos: torch.Tensor, step: float) -> torch.Tensor:
    """Normalized velocity command that reaches ``target`` from ``pos`` in one step if possible."""
    return torch.clamp((target - pos) / step, -1.0, 1.0)
