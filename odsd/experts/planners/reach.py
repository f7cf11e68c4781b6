"""Planner for ``reach``: proportional velocity toward the goal, saturated at the action bound."""

from __future__ import annotations

from typing import ClassVar

import torch

from odsd.experts.failures import Failure
from odsd.experts.planners.base import PlannerExpert, PlanResult, move_toward


class ReachPlanner(PlannerExpert):
    """State-conditioned reach controller::

    expert = ReachPlanner(env.spec)
    query = expert.act(obs, env_ids=torch.arange(n))
    """

    phase_names: ClassVar[list[str]] = ["reach"]

    def plan(self, obs: dict[str, torch.Tensor]) -> PlanResult:
        p = self.env_spec.params
        ee, goal = obs["ee_pos"], obs["goal_pos"]
        step = p["max_speed"] * self.env_spec.step_dt
        action = move_toward(goal, ee, step)
        low = torch.tensor(p["workspace_low"], device=ee.device)
        high = torch.tensor(p["workspace_high"], device=ee.device)
        reachable = ((goal >= low) & (goal <= high)).all(dim=1)
        failure = torch.where(reachable, 0, int(Failure.UNREACHABLE)).to(torch.int32)
        phase = torch.zeros(ee.shape[0], dtype=torch.long, device=ee.device)
        return PlanResult(action=action, phase=phase, failure=failure)
