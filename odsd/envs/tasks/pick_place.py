"""`pick_place`: a kinematic gripper picks a cube and places it at a goal on the table.

::

    env = PickPlaceEnv(num_envs=256, device="cpu", seed=0)
    obs, info = env.reset()
    action = torch.zeros(256, 4)          # [ee velocity xyz in [-1, 1], gripper in [-1, 1]]
    obs, reward, terminated, truncated, info = env.step(action)

Physics (per 50 ms control step, all rows at once):

- the end effector moves by ``action[:3] * max_speed * dt`` (clamped to the workspace);
- the gripper opening ``g`` in ``[0, 1]`` moves by ``action[3] * gripper_speed * dt``
  (positive opens); it is *closed* when ``g <= grasp_threshold``;
- a grasp happens only on the step the gripper closes while the end effector is at the cube;
  a closed gripper that arrives at the cube does not grasp it;
- a grasped cube follows the end effector (which it stops at the table: a gripper holding the
  cube cannot go lower than the resting cube); opening releases it, and a cube released (or
  slipping) above the table lands with an xy scatter proportional to the drop height;
- a gripper that comes down on the cube badly *knocks it away*: when a not-holding end effector
  is low (below ``knock_height`` above the cube centre) within ``knock_radius`` of the cube in xy,
  and either misaligned (farther than ``grasp_tol_xy``) or already closed, the cube is shoved
  along the ee→cube direction to ``knock_radius + knock_push * (0.5 + |n|)`` from the end
  effector (``n`` standard normal). The planner aligns before descending and rises before
  re-approaching, so it rarely knocks; a learner that descends sloppily does, and then has to
  recover from a state the expert's own demonstrations hardly contain;
- success (terminal): cube released on the table within ``success_tol`` of the goal.

Perturbations push the system off the expert's narrow path, from each row's own random stream:
action noise, random end-effector pushes (``push_prob``), and grasp slips (``slip_prob``).
Set them to zero for a deterministic task (``knock_radius=0`` disables knocking).

``ee_inertia=k`` (in ``[0, 1)``, default 0) makes the end effector second order: its velocity
``ee_vel`` (normalized like the action, part of the state, zero when ``k = 0``) follows
the command with a lag,
``ee_vel ← k · ee_vel + (1 − k) · action[:3]``, and is zeroed on an axis where the end effector
is stopped by the workspace or the table; ``ee_vel`` is then also an observation key (policy
input). Without perturbations this is where behavior cloning on planner demonstrations falls
behind DAgger (docs/results.md).

``cube_obs_noise=σ`` adds fresh Gaussian noise (per axis, every step) to the *observed* cube
position; the true one is then the privileged key ``cube_true_pos``, recorded as
``observation.environment_state`` but not part of ``observation.state`` (the policy input). The
planner acts on it: a teacher with privileged information and a student with a noisy sensor.
"""

from __future__ import annotations

import torch

from odsd.envs.errors import EnvSpecError
from odsd.envs.spec import ActionSpec, EnvSpec, ObservationKey, StateField
from odsd.envs.tasks.base import TorchTaskEnv, checked_params, xyz_names

WORKSPACE_LOW = (-0.3, -0.3, 0.01)
WORKSPACE_HIGH = (0.3, 0.3, 0.3)
CUBE_HALF = 0.02
SPAWN_HALF_RANGE = 0.2
TRUE_CUBE_KEY = "cube_true_pos"
"""Privileged observation key (only with ``cube_obs_noise > 0``): the simulator's cube position."""


class PickPlaceEnv(TorchTaskEnv):
    """Batched multi-stage pick-and-place (see module docstring)."""

    def __init__(
        self,
        num_envs: int = 1,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        *,
        max_episode_steps: int = 120,
        step_dt: float = 0.05,
        max_speed: float = 0.3,
        gripper_speed: float = 5.0,
        grasp_threshold: float = 0.5,
        grasp_tol_xy: float = 0.01,
        grasp_tol_z: float = 0.01,
        success_tol: float = 0.02,
        action_noise: float = 0.05,
        push_prob: float = 0.02,
        push_std: float = 0.02,
        slip_prob: float = 0.005,
        drop_scatter: float = 0.3,
        knock_radius: float = 0.035,
        knock_height: float = 0.03,
        knock_push: float = 0.03,
        cube_obs_noise: float = 0.0,
        ee_inertia: float = 0.0,
    ) -> None:
        params = checked_params(
            "pick_place",
            {
                "max_speed": max_speed,
                "gripper_speed": gripper_speed,
                "grasp_threshold": grasp_threshold,
                "grasp_tol_xy": grasp_tol_xy,
                "grasp_tol_z": grasp_tol_z,
                "success_tol": success_tol,
                "action_noise": action_noise,
                "push_prob": push_prob,
                "push_std": push_std,
                "slip_prob": slip_prob,
                "drop_scatter": drop_scatter,
                "knock_radius": knock_radius,
                "knock_height": knock_height,
                "knock_push": knock_push,
                "cube_obs_noise": cube_obs_noise,
                "ee_inertia": ee_inertia,
                "cube_rest_z": CUBE_HALF,
                "workspace_low": WORKSPACE_LOW,
                "workspace_high": WORKSPACE_HIGH,
            },
        )
        if cube_obs_noise < 0:
            raise EnvSpecError(f"pick_place: cube_obs_noise must be >= 0, got {cube_obs_noise}")
        if not 0 <= ee_inertia < 1:
            raise EnvSpecError(f"pick_place: ee_inertia must be in [0, 1), got {ee_inertia}")
        observation = (
            ObservationKey("ee_pos", (3,), names=xyz_names("ee")),
            ObservationKey("gripper", (1,), names=("gripper.opening",)),
            ObservationKey("cube_pos", (3,), names=xyz_names("cube")),
            ObservationKey("goal_pos", (3,), names=xyz_names("goal")),
            ObservationKey("grasped", (1,), names=("grasped",)),
            ObservationKey("cube_rel", (3,), names=xyz_names("cube_rel")),
            ObservationKey("goal_rel", (3,), names=xyz_names("goal_rel")),
        )
        if ee_inertia > 0:
            observation = (*observation, ObservationKey("ee_vel", (3,), names=xyz_names("ee_vel")))
        state_keys: tuple[str, ...] | None = None
        environment_state_keys: tuple[str, ...] = ("cube_pos", "goal_pos")
        if cube_obs_noise > 0:
            state_keys = tuple(k.name for k in observation)
            observation = (*observation, ObservationKey(TRUE_CUBE_KEY, (3,), names=xyz_names("cube_true")))
            environment_state_keys = (TRUE_CUBE_KEY, "goal_pos")
        spec = EnvSpec(
            task="pick_place",
            task_description="pick the cube and place it at the goal",
            observation=observation,
            action=ActionSpec(
                dim=4,
                low=(-1.0,) * 4,
                high=(1.0,) * 4,
                names=(*xyz_names("ee_vel"), "gripper.cmd"),
                kind="ee_delta_pos+gripper",
                normalized=True,
            ),
            step_dt=step_dt,
            max_episode_steps=max_episode_steps,
            num_envs=num_envs,
            device=torch.device(device),
            state=self.state_spec(),
            state_keys=state_keys,
            environment_state_keys=environment_state_keys,
            params=params,
        )
        self._ws_low = torch.tensor(WORKSPACE_LOW, device=spec.device)
        self._ws_high = torch.tensor(WORKSPACE_HIGH, device=spec.device)
        super().__init__(self._task_spec(spec), seed)

    def _task_spec(self, spec: EnvSpec) -> EnvSpec:
        """The spec this env runs under; tasks built on this physics (``pick_place_cam``) extend it."""
        return spec

    @classmethod
    def physical_fields(cls) -> tuple[StateField, ...]:
        return (
            StateField("ee_pos", (3,)),
            StateField("gripper", (1,)),
            StateField("cube_pos", (3,)),
            StateField("goal_pos", (3,)),
            StateField("grasped", (1,), "bool"),
            StateField("cube_obs_error", (3,)),
            StateField("ee_vel", (3,)),
        )

    def _reset_rows(self, ids: torch.Tensor) -> None:
        u = self.rng.uniform(ids, 7)
        r = SPAWN_HALF_RANGE
        cube_xy = (u[:, 0:2] * 2 - 1) * r
        angle = u[:, 2] * 2 * torch.pi
        radius = 0.1 + u[:, 3] * 0.2
        goal_xy = cube_xy + radius.unsqueeze(1) * torch.stack((torch.cos(angle), torch.sin(angle)), dim=1)
        goal_xy = torch.clamp(goal_xy, -0.25, 0.25)
        ee_xy = (u[:, 4:6] * 2 - 1) * 0.15
        ee_z = 0.1 + u[:, 6:7] * 0.15
        rest = torch.full_like(u[:, :1], CUBE_HALF)
        self.s["cube_pos"][ids] = torch.cat((cube_xy, rest), dim=1)
        self.s["goal_pos"][ids] = torch.cat((goal_xy, rest), dim=1)
        self.s["ee_pos"][ids] = torch.cat((ee_xy, ee_z), dim=1)
        self.s["gripper"][ids] = 1.0
        self.s["grasped"][ids] = False
        self.s["cube_obs_error"][ids] = self._sensor_error(ids)
        self.s["ee_vel"][ids] = 0.0

    def _sensor_error(self, rows: torch.Tensor) -> torch.Tensor:
        """Fresh sensor error of the observed cube position (no draw when the noise is off)."""
        sigma = self.spec.params["cube_obs_noise"]
        if sigma <= 0:
            return torch.zeros(rows.numel(), 3, device=self.device)
        return self.rng.normal(rows, 3) * sigma

    def _advance(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        p, dt = self.spec.params, self.spec.step_dt
        n = self.spec.num_envs
        rows = torch.arange(n, device=self.device)
        gauss = self.rng.normal(rows, 9)
        u = self.rng.uniform(rows, 2)
        velocity = torch.clamp(action[:, :3], -1.0, 1.0)
        if p["ee_inertia"] > 0:
            velocity = p["ee_inertia"] * self.s["ee_vel"] + (1 - p["ee_inertia"]) * velocity
        act = torch.clamp(
            torch.cat((velocity, action[:, 3:]), dim=1) + gauss[:, :4] * p["action_noise"], -1.0, 1.0
        )

        push = (u[:, :1] < p["push_prob"]) * gauss[:, 4:7] * p["push_std"]
        ee = torch.clamp(
            self.s["ee_pos"] + act[:, :3] * p["max_speed"] * dt + push, self._ws_low, self._ws_high
        )
        grasped = self.s["grasped"].squeeze(1)
        # a held cube rests on the table at the lowest: the gripper holding it cannot go lower
        floor = torch.where(grasped, p["cube_rest_z"], self._ws_low[2])
        ee = torch.cat((ee[:, :2], torch.maximum(ee[:, 2:3], floor.unsqueeze(1))), dim=1)
        if p["ee_inertia"] > 0:
            low = torch.cat((self._ws_low[:2].expand(n, 2), floor.unsqueeze(1)), dim=1)
            stopped = ((ee <= low) & (velocity < 0)) | ((ee >= self._ws_high) & (velocity > 0))
            self.s["ee_vel"] = torch.where(stopped, 0.0, velocity)
        g_prev = self.s["gripper"]
        g = torch.clamp(g_prev + act[:, 3:4] * p["gripper_speed"] * dt, 0.0, 1.0)
        cube = self.s["cube_pos"]

        thr = p["grasp_threshold"]
        near = (torch.linalg.vector_norm(ee[:, :2] - cube[:, :2], dim=1) < p["grasp_tol_xy"]) & (
            (ee[:, 2] - cube[:, 2]).abs() < p["grasp_tol_z"]
        )
        closing = (g_prev.squeeze(1) > thr) & (g.squeeze(1) <= thr)
        grasp = ~grasped & closing & near
        release = grasped & (g.squeeze(1) > thr)
        slip = grasped & ~release & (u[:, 1] < p["slip_prob"])
        held = (grasped | grasp) & ~release & ~slip

        rest = p["cube_rest_z"]
        carried = torch.cat((ee[:, :2], torch.clamp(ee[:, 2:3], min=rest)), dim=1)
        cube = torch.where(held.unsqueeze(1), carried, cube)
        dropped = (release | slip).unsqueeze(1)
        height = torch.clamp(cube[:, 2:3] - rest - 0.01, min=0.0)
        landed_xy = torch.clamp(cube[:, :2] + gauss[:, 7:9] * p["drop_scatter"] * height, -0.3, 0.3)
        landed = torch.cat((landed_xy, torch.full_like(height, rest)), dim=1)
        cube = torch.where(dropped, landed, cube)

        # knocking: a low, not-holding gripper that is misaligned or closed shoves the cube away
        offset = cube[:, :2] - ee[:, :2]
        dist = torch.linalg.vector_norm(offset, dim=1)
        low = (ee[:, 2] - cube[:, 2]) < p["knock_height"]
        bad = (dist >= p["grasp_tol_xy"]) | (g.squeeze(1) <= thr)
        knock = ~held & ~grasped & low & (dist < p["knock_radius"]) & bad
        fallback = torch.zeros_like(offset)
        fallback[:, 0] = 1.0
        direction = torch.where(
            (dist > 1e-6).unsqueeze(1), offset / dist.clamp_min(1e-6).unsqueeze(1), fallback
        )
        reach = p["knock_radius"] + p["knock_push"] * (0.5 + gauss[:, 7:8].abs())
        shoved = torch.clamp(ee[:, :2] + direction * reach, -0.28, 0.28)
        cube = torch.where(knock.unsqueeze(1), torch.cat((shoved, cube[:, 2:3]), dim=1), cube)

        self.s["ee_pos"], self.s["gripper"], self.s["cube_pos"] = ee, g, cube
        self.s["grasped"] = held.unsqueeze(1)
        if p["cube_obs_noise"] > 0:
            self.s["cube_obs_error"] = self._sensor_error(rows)

        goal = self.s["goal_pos"]
        to_goal = torch.linalg.vector_norm(cube[:, :2] - goal[:, :2], dim=1)
        success = ~held & (to_goal < p["success_tol"])
        to_cube = torch.linalg.vector_norm(cube - ee, dim=1)
        reward = -to_goal - 0.5 * (~held).float() * to_cube + 10.0 * success.float()
        return reward, success, success

    def _observe(self) -> dict[str, torch.Tensor]:
        s = self.s
        seen = s["cube_pos"] + s["cube_obs_error"]
        obs = {
            "ee_pos": s["ee_pos"].clone(),
            "gripper": s["gripper"].clone(),
            "cube_pos": seen,
            "goal_pos": s["goal_pos"].clone(),
            "grasped": s["grasped"].to(torch.float32),
            "cube_rel": seen - s["ee_pos"],
            "goal_rel": s["goal_pos"] - seen,
        }
        if self.spec.params["ee_inertia"] > 0:
            obs["ee_vel"] = s["ee_vel"].clone()
        if self.spec.params["cube_obs_noise"] > 0:
            obs[TRUE_CUBE_KEY] = s["cube_pos"].clone()
        return obs

    def safe_hold_action(self, env_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Zero velocity and keep the gripper as it is (zero gripper velocity)."""
        rows = self.spec.num_envs if env_ids is None else int(torch.as_tensor(env_ids).numel())
        return torch.zeros(rows, 4, device=self.device)
