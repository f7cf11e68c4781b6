"""Planner for ``pick_place``: a phase machine evaluated from the current observation alone.

Phases (``phase_names`` order): ``reach`` (hover above the cube, gripper open; when low next to
the cube it first rises straight up, so it does not knock the cube away), ``grasp``
(descend and close), ``lift`` (raise the held cube), ``transport`` (carry above the goal),
``place`` (lower onto the table) and ``release`` (open). Because the phase is recomputed from
each state, the planner recovers from slips, pushes, missed grasps and learner mistakes::

    expert = PickPlacePlanner(env.spec)
    query = expert.act(obs, env_ids=torch.arange(n))
    [expert.phase_names[i] for i in query.metadata["phase"].tolist()]
"""

from __future__ import annotations

from typing import ClassVar

import torch

from odsd.envs.tasks.pick_place import TRUE_CUBE_KEY
from odsd.experts.failures import Failure
from odsd.experts.planners.base import PlannerExpert, PlanResult, move_toward

REACH, GRASP, LIFT, TRANSPORT, PLACE, RELEASE = range(6)
HOVER_HEIGHT = 0.06
CARRY_HEIGHT = 0.10
ALIGN_TOL = 0.008
GRASP_ALIGN = 0.6
"""Descend to grasp (place) only within this fraction of ``grasp_tol_xy`` of the cube (``success_tol`` of the goal)."""
HEIGHT_TOL = 0.004


class PickPlacePlanner(PlannerExpert):
    """State-conditioned pick-and-place controller (see module docstring)."""

    phase_names: ClassVar[list[str]] = ["reach", "grasp", "lift", "transport", "place", "release"]

    def plan(self, obs: dict[str, torch.Tensor]) -> PlanResult:
        p = self.env_spec.params
        ee, goal = obs["ee_pos"], obs["goal_pos"]
        cube = obs.get(TRUE_CUBE_KEY, obs["cube_pos"])
        g = obs["gripper"][:, 0]
        held = obs["grasped"][:, 0] > 0.5
        rest = p["cube_rest_z"]
        thr = p["grasp_threshold"]
        m = ee.shape[0]

        def at(xy: torch.Tensor, z: torch.Tensor | float) -> torch.Tensor:
            return torch.cat((xy, torch.as_tensor(z, device=ee.device).expand(m).reshape(m, 1)), dim=1)

        cube_goal_xy = torch.linalg.vector_norm(cube[:, :2] - goal[:, :2], dim=1)
        ee_cube_xy = torch.linalg.vector_norm(ee[:, :2] - cube[:, :2], dim=1)
        low_and_far = (cube[:, 2] < rest + CARRY_HEIGHT - 0.02) & (cube_goal_xy > 0.03)
        at_height = (ee[:, 2] - cube[:, 2]).abs() < HEIGHT_TOL

        phase = torch.full((m,), REACH, dtype=torch.long, device=ee.device)
        align = min(ALIGN_TOL, GRASP_ALIGN * p["grasp_tol_xy"])
        phase = torch.where(~held & (ee_cube_xy <= align), GRASP, phase)
        place_align = min(ALIGN_TOL, GRASP_ALIGN * p["success_tol"])
        phase = torch.where(held & (cube_goal_xy > place_align) & low_and_far, LIFT, phase)
        phase = torch.where(held & (cube_goal_xy > place_align) & ~low_and_far, TRANSPORT, phase)
        phase = torch.where(held & (cube_goal_xy <= place_align), PLACE, phase)
        phase = torch.where(
            held & (cube_goal_xy <= place_align) & (cube[:, 2] - rest <= HEIGHT_TOL), RELEASE, phase
        )

        # a low gripper next to the cube rises first: moving sideways into it would knock it away
        near_low = (ee_cube_xy < p.get("knock_radius", 0.0) + 0.02) & (ee[:, 2] < rest + HOVER_HEIGHT - 0.01)
        reach_xy = torch.where(near_low.unsqueeze(1), ee[:, :2], cube[:, :2])
        targets = torch.stack(
            (
                at(reach_xy, rest + HOVER_HEIGHT),  # reach
                cube,  # grasp
                at(ee[:, :2], rest + CARRY_HEIGHT),  # lift
                at(goal[:, :2], rest + CARRY_HEIGHT),  # transport
                at(goal[:, :2], rest),  # place
                ee,  # release
            ),
            dim=1,
        )
        target = targets[torch.arange(m, device=ee.device), phase]
        velocity = move_toward(target, ee, p["max_speed"] * self.env_spec.step_dt)

        close_now = (phase == GRASP) & at_height & (g > thr)
        gripper = torch.where(held & (phase != RELEASE), -1.0, 1.0)
        gripper = torch.where(close_now, -1.0, gripper)
        velocity = torch.where(close_now.unsqueeze(1) | (phase == RELEASE).unsqueeze(1), 0.0, velocity)
        action = torch.cat((velocity, gripper.unsqueeze(1)), dim=1)

        low = torch.tensor(p["workspace_low"], device=ee.device)
        high = torch.tensor(p["workspace_high"], device=ee.device)
        inside = ((cube[:, :2] >= low[:2]) & (cube[:, :2] <= high[:2])).all(dim=1)
        inside &= ((goal[:, :2] >= low[:2]) & (goal[:, :2] <= high[:2])).all(dim=1)
        failure = torch.where(inside, 0, int(Failure.UNREACHABLE)).to(torch.int32)
        return PlanResult(action=action, phase=phase, failure=failure)
