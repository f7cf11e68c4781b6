"""Planner for ManiSkill3 ``PickCube-v1`` (``maniskill:PickCube-v1``, ``obs_mode=state``,
``control_mode=pd_ee_delta_pos``): closed loop on the 42-d state, batched, labels any state.

::

    env = make_env("maniskill:PickCube-v1", num_envs=4, seed=0)
    expert = make_expert("planner", env.spec)
    query = expert.act(obs, env_ids=torch.arange(4))   # action [4, 4]: ee delta xyz, gripper

It reads the observation only (``tcp_pose``, ``obj_pose``, ``goal_pos``, ``is_grasped``), never
the env. The action is a proportional end-effector command (``pd_ee_delta_pos``: ±1 is ±10 cm
of target per step) toward a target that depends smoothly on the state, like ``pick_place``'s
planner (docs/results.md: phase machines make DAgger students hover at the thresholds):

- not holding the cube: the target is the cube's centre raised by a *funnel* height, zero within
  ``FUNNEL_TIP`` of the cube in xy and ``HOVER`` beyond ``FUNNEL_WIDTH``; the gripper closes as
  the TCP gets within ``CLOSE_NEAR`` of the centre (open beyond ``CLOSE_FAR``);
- holding it (``is_grasped``): the TCP goes where it puts the cube on the goal, gripper closed;
  near the goal the command fades to zero, so the robot comes to rest (success needs it static).

Per-row failure reasons: ``unreachable`` when the cube has left the table or the goal is outside
the arm's reach; such rows are invalid (the collector falls back to the student or the safe hold).
Phases (``metadata["phase"]``): ``reach``, ``grasp`` (within the funnel tip), ``transport``,
``place`` (the cube within ``PLACE_TOL`` of the goal).
"""

from __future__ import annotations

from typing import ClassVar

import torch

from odsd.envs.spec import EnvSpec
from odsd.experts.errors import ExpertNotFoundError
from odsd.experts.failures import Failure
from odsd.experts.planners.base import PlannerExpert, PlanResult

REACH, GRASP, TRANSPORT, PLACE = range(4)
ACTION_SCALE = 0.1
"""Metres of end-effector target per unit of ``pd_ee_delta_pos`` action (ManiSkill's Panda)."""
GAIN = 1.0
HOVER = 0.05
FUNNEL_TIP = 0.006
FUNNEL_WIDTH = 0.03
CLOSE_NEAR = 0.008
CLOSE_FAR = 0.016
PLACE_TOL = 0.01
TABLE_Z = -0.05
"""A cube centre below this (m) has fallen off the table."""
REACH_RADIUS = 0.85
"""Goals farther than this from the arm's base (at x = -0.615) are out of reach."""
BASE = (-0.615, 0.0, 0.0)
REQUIRED_KEYS = ("tcp_pose", "obj_pose", "goal_pos", "is_grasped")


def ramp(x: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    """0 at ``x <= lo``, 1 at ``x >= hi``, linear between."""
    return torch.clamp((x - lo) / (hi - lo), 0.0, 1.0)


class PickCubePlanner(PlannerExpert):
    """Scripted, state-conditioned PickCube-v1 controller (see module docstring)."""

    phase_names: ClassVar[list[str]] = ["reach", "grasp", "transport", "place"]

    def __init__(self, env_spec: EnvSpec) -> None:
        keys = env_spec.observation_keys
        missing = [k for k in REQUIRED_KEYS if k not in keys]
        if missing or env_spec.action.kind != "ee_delta_pos+gripper":
            raise ExpertNotFoundError(
                f"the {env_spec.task} planner needs obs_mode=state and control_mode=pd_ee_delta_pos "
                f"(missing observation keys {missing}, action kind {env_spec.action.kind!r})"
            )
        super().__init__(env_spec)

    def plan(self, obs: dict[str, torch.Tensor]) -> PlanResult:
        tcp, obj = obs["tcp_pose"][:, :3], obs["obj_pose"][:, :3]
        goal, grasped = obs["goal_pos"], obs["is_grasped"][:, 0] > 0.5
        dev, m = tcp.device, tcp.shape[0]
        rel = obj - tcp
        dxy = torch.linalg.vector_norm(rel[:, :2], dim=1)
        dist = torch.linalg.vector_norm(rel, dim=1)

        lift = HOVER * ramp(dxy, FUNNEL_TIP, FUNNEL_WIDTH)
        approach = obj + torch.stack((torch.zeros_like(lift), torch.zeros_like(lift), lift), dim=1)
        carry = goal - rel  # where the TCP must be for the cube to sit on the goal
        target = torch.where(grasped.unsqueeze(1), carry, approach)
        move = torch.clamp(GAIN * (target - tcp) / ACTION_SCALE, -1.0, 1.0)
        close = ramp(dist, CLOSE_NEAR, CLOSE_FAR)  # 0 at the cube centre, 1 far from it
        gripper = torch.where(grasped, torch.full_like(close, -1.0), 2.0 * close - 1.0)
        action = torch.cat((move, gripper.unsqueeze(1)), dim=1)

        to_goal = torch.linalg.vector_norm(goal - obj, dim=1)
        phase = torch.full((m,), REACH, dtype=torch.long, device=dev)
        phase = torch.where(dxy <= FUNNEL_TIP, GRASP, phase)
        phase = torch.where(grasped, TRANSPORT, phase)
        phase = torch.where(grasped & (to_goal <= PLACE_TOL), PLACE, phase)

        base = torch.tensor(BASE, device=dev)
        off_table = obj[:, 2] < TABLE_Z
        out_of_reach = torch.linalg.vector_norm(goal - base, dim=1) > REACH_RADIUS
        failure = torch.where(
            off_table | out_of_reach,
            torch.full((m,), int(Failure.UNREACHABLE), dtype=torch.int32, device=dev),
            torch.zeros(m, dtype=torch.int32, device=dev),
        )
        return PlanResult(action=action, phase=phase, failure=failure)
