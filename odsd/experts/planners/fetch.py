"""Planner for Gymnasium-Robotics ``FetchPickAndPlace`` (through the ``gymnasium:`` adapter).

Reads only the observation dict (``observation`` = grip_pos, object_pos, object_rel_pos,
gripper_state, ...; ``desired_goal``), so it labels any state::

    env = make_env("gymnasium:FetchPickAndPlace-v4", num_envs=4, seed=0)
    expert = make_expert("planner", env.spec)

Phases: ``reach`` (hover above the object, fingers open), ``grasp`` (descend, close),
``transport`` (carry to the goal, fingers closed) and ``hold`` (object at the goal).
"""

from __future__ import annotations

from typing import ClassVar

import torch

from odsd.experts.planners.base import PlannerExpert, PlanResult

REACH, GRASP, TRANSPORT, HOLD = range(4)
GAIN = 10.0
HOVER = 0.04
ALIGN_TOL = 0.008
HEIGHT_TOL = 0.008
HOLD_DIST = 0.02
CLOSED_ON_OBJECT = 0.07
CLOSED_ON_NOTHING = 0.02


class FetchPickPlacePlanner(PlannerExpert):
    """Scripted, state-conditioned Fetch pick-and-place controller."""

    phase_names: ClassVar[list[str]] = ["reach", "grasp", "transport", "hold"]

    def plan(self, obs: dict[str, torch.Tensor]) -> PlanResult:
        o, goal = obs["observation"], obs["desired_goal"]
        grip, obj, width = o[:, 0:3], o[:, 3:6], o[:, 9:11].sum(dim=1)
        m = o.shape[0]
        rel = obj - grip
        xy = torch.linalg.vector_norm(rel[:, :2], dim=1)
        holding = (torch.linalg.vector_norm(rel, dim=1) < HOLD_DIST) & (width < CLOSED_ON_OBJECT)
        at_goal = torch.linalg.vector_norm(goal - obj, dim=1) < 0.01
        at_object = (xy <= ALIGN_TOL) & (rel[:, 2].abs() < HEIGHT_TOL)

        phase = torch.full((m,), REACH, dtype=torch.long, device=o.device)
        phase = torch.where(xy <= ALIGN_TOL, GRASP, phase)
        phase = torch.where(holding, TRANSPORT, phase)
        phase = torch.where(holding & at_goal, HOLD, phase)

        hover = obj + torch.tensor([0.0, 0.0, HOVER], device=o.device)
        target = torch.where((phase == REACH).unsqueeze(1), hover, obj)
        target = torch.where((phase == TRANSPORT).unsqueeze(1), goal + (grip - obj), target)
        target = torch.where((phase == HOLD).unsqueeze(1), grip, target)
        velocity = torch.clamp((target - grip) * GAIN, -1.0, 1.0)

        closing = (phase == GRASP) & at_object & (width >= CLOSED_ON_NOTHING)
        fingers = torch.where(holding | closing, -1.0, 1.0)
        velocity = torch.where(closing.unsqueeze(1), 0.0, velocity)
        action = torch.cat((velocity, fingers.unsqueeze(1)), dim=1)
        failure = torch.zeros(m, dtype=torch.int32, device=o.device)
        return PlanResult(action=action, phase=phase, failure=failure)
