"""Planner for ``pick_place``: a funnel-shaped controller whose labels are smooth in the state.

It is a pure function of the current observation, so it labels any state (a learner's too) and
recovers from slips, pushes, knocks and missed grasps::

    expert = PickPlacePlanner(env.spec)
    query = expert.act(obs, env_ids=torch.arange(n))
    [expert.phase_names[i] for i in query.metadata["phase"].tolist()]

Not holding the cube, the end effector moves toward the cube in xy while its height follows a
*funnel* above the cube: zero within ``0.6 · grasp_tol_xy`` of it, rising linearly to
``knock_height + 1 cm`` at ``grasp_tol_xy`` (so it never comes down where it would knock the cube
away), capped at a hover height. An end effector far below the funnel moves up before it moves
sideways (the xy speed fades out over 0.5–1.5 cm below it). The gripper closes as the end
effector gets to the cube (ramps over ``0.8 → 0.6 · grasp_tol_xy`` and ``0.8 → 0.5 ·
grasp_tol_z``) and opens whenever it is already closed without holding the cube (a missed
grasp). Holding the cube, it carries it toward the goal at a height that shrinks linearly with
the distance to the goal and opens as the cube reaches the table at the goal.

With ``ee_inertia > 0`` (the end effector's velocity lags the command) it asks for half of that
velocity and commands whatever makes the lagged velocity (``ee_vel``, observed) equal it on the
next step, clamped to the action range; so it brakes before it arrives.

Why smooth: version 1 was a phase machine (hover, align, then descend; rise before moving
sideways), whose labels jump where the phase changes. A DAgger student spends its time right
there (hovering at the alignment threshold), the aggregated data puts opposite labels on nearly
identical states, and an MSE-trained policy averages them into hovering (docs/results.md).
The only jumps left are physical: the gripper latch at ``grasp_threshold`` and picking up or
dropping the cube.

``phase`` metadata names the region of the state space a row is in (for episode segments and
failure points): ``reach`` (not holding, outside ``grasp_tol_xy``), ``grasp`` (within it),
``lift`` (holding, the cube 2 cm or more below its carry height), ``transport``, ``place``
(within ``success_tol`` of the goal) and ``release`` (opening).
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
CARRY_SLOPE = 2.0
"""Carry height (m) per metre of cube-goal distance, up to ``CARRY_HEIGHT``."""
FUNNEL_TIP = 0.6
"""The funnel is flat (height 0) within this fraction of ``grasp_tol_xy`` of the cube."""
KNOCK_CLEARANCE = 0.01
"""Height above ``knock_height`` the funnel reaches at ``grasp_tol_xy``."""
INERTIAL_SPEED = 0.5
"""With ``ee_inertia > 0``: the fraction of the velocity asked for, leaving room to brake in time."""


def ramp(x: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    """0 at ``x <= lo``, 1 at ``x >= hi``, linear between."""
    return torch.clamp((x - lo) / (hi - lo), 0.0, 1.0)


class PickPlacePlanner(PlannerExpert):
    """State-conditioned pick-and-place funnel controller (see module docstring)."""

    phase_names: ClassVar[list[str]] = ["reach", "grasp", "lift", "transport", "place", "release"]
    version = "2"

    def plan(self, obs: dict[str, torch.Tensor]) -> PlanResult:
        p = self.env_spec.params
        ee, goal = obs["ee_pos"], obs["goal_pos"]
        cube = obs.get(TRUE_CUBE_KEY, obs["cube_pos"])
        held = obs["grasped"][:, 0] > 0.5

        free_velocity, free_gripper, to_cube = self._approach(ee, cube, obs["gripper"][:, 0])
        held_velocity, held_gripper, to_goal = self._carry(ee, cube, goal)
        velocity = torch.where(held.unsqueeze(1), held_velocity, free_velocity)
        inertia = p.get("ee_inertia", 0.0)
        if inertia > 0:  # command the velocity that makes the lagged velocity reach the wanted one
            wanted = INERTIAL_SPEED * velocity
            velocity = torch.clamp((wanted - inertia * obs["ee_vel"]) / (1 - inertia), -1.0, 1.0)
        gripper = torch.where(held, held_gripper, free_gripper)
        action = torch.cat((velocity, gripper.unsqueeze(1)), dim=1)

        carry_z = p["cube_rest_z"] + self._carry_height(to_goal)
        free_phase = torch.where(to_cube < p["grasp_tol_xy"], GRASP, REACH)
        held_phase = torch.where(cube[:, 2] < carry_z - 0.02, LIFT, TRANSPORT)
        held_phase = torch.where(to_goal <= p["success_tol"], PLACE, held_phase)
        held_phase = torch.where(held_gripper > -1.0, RELEASE, held_phase)
        phase = torch.where(held, held_phase, free_phase)
        return PlanResult(action=action, phase=phase.long(), failure=self._unreachable(cube, goal))

    def _approach(
        self, ee: torch.Tensor, cube: torch.Tensor, gripper: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Velocity, gripper command and xy distance to the cube of a gripper not holding it."""
        p = self.env_spec.params
        tol_xy, tol_z = p["grasp_tol_xy"], p["grasp_tol_z"]
        to_cube = torch.linalg.vector_norm(ee[:, :2] - cube[:, :2], dim=1)
        tip = FUNNEL_TIP * tol_xy
        rim_height = p["knock_height"] + KNOCK_CLEARANCE
        funnel = torch.clamp(rim_height * (to_cube - tip) / (tol_xy - tip), 0.0, HOVER_HEIGHT)
        target_z = cube[:, 2] + funnel
        below = target_z - ee[:, 2]
        sideways = 1.0 - ramp(below, 0.005, 0.015)
        velocity = torch.cat(
            (
                move_toward(cube[:, :2], ee[:, :2], self._step) * sideways.unsqueeze(1),
                move_toward(target_z.unsqueeze(1), ee[:, 2:3], self._step),
            ),
            dim=1,
        )
        height = (ee[:, 2] - cube[:, 2]).abs()
        at_cube = ramp(-to_cube, -0.8 * tol_xy, -FUNNEL_TIP * tol_xy) * ramp(
            -height, -0.8 * tol_z, -0.5 * tol_z
        )
        closing = at_cube * (gripper > p["grasp_threshold"]).float()
        return velocity, 1.0 - 2.0 * closing, to_cube

    def _carry(
        self, ee: torch.Tensor, cube: torch.Tensor, goal: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Velocity, gripper command and cube-goal xy distance while holding the cube."""
        p = self.env_spec.params
        to_goal = torch.linalg.vector_norm(cube[:, :2] - goal[:, :2], dim=1)
        target_z = p["cube_rest_z"] + self._carry_height(to_goal)
        velocity = torch.cat(
            (
                move_toward(goal[:, :2], ee[:, :2], self._step),
                move_toward(target_z.unsqueeze(1), ee[:, 2:3], self._step),
            ),
            dim=1,
        )
        tol = p["success_tol"]
        height = cube[:, 2] - p["cube_rest_z"]
        opening = ramp(-to_goal, -0.5 * tol, -0.3 * tol) * ramp(-height, -0.008, -0.004)
        return velocity, -1.0 + 2.0 * opening, to_goal

    @property
    def _step(self) -> float:
        """Distance one full-speed step moves the end effector."""
        return self.env_spec.params["max_speed"] * self.env_spec.step_dt

    def _carry_height(self, to_goal: torch.Tensor) -> torch.Tensor:
        tip = 0.2 * self.env_spec.params["success_tol"]
        return torch.clamp(CARRY_SLOPE * (to_goal - tip), 0.0, CARRY_HEIGHT)

    def _unreachable(self, cube: torch.Tensor, goal: torch.Tensor) -> torch.Tensor:
        p = self.env_spec.params
        low = torch.tensor(p["workspace_low"], device=cube.device)
        high = torch.tensor(p["workspace_high"], device=cube.device)
        inside = ((cube[:, :2] >= low[:2]) & (cube[:, :2] <= high[:2])).all(dim=1)
        inside &= ((goal[:, :2] >= low[:2]) & (goal[:, :2] <= high[:2])).all(dim=1)
        return torch.where(inside, 0, int(Failure.UNREACHABLE)).to(torch.int32)
