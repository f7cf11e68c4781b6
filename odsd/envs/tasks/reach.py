"""`reach`: move an end-effector point to a random goal with bounded velocity actions.

The smallest built-in task, for mechanics and speed::

    env = ReachEnv(num_envs=64, device="cpu", seed=0)
    obs, info = env.reset()
    obs, reward, terminated, truncated, info = env.step(torch.zeros(64, 3))

Action: ``[-1, 1]^3`` normalized end-effector velocity (``max_speed`` m/s at full scale).
A row terminates with success when the end effector is within ``success_tol`` of the goal.
"""

from __future__ import annotations

import torch

from odsd.envs.spec import ActionSpec, EnvSpec, ObservationKey, StateField
from odsd.envs.tasks.base import TorchTaskEnv, checked_params, xyz_names

WORKSPACE_LOW = (-0.3, -0.3, 0.0)
WORKSPACE_HIGH = (0.3, 0.3, 0.4)


class ReachEnv(TorchTaskEnv):
    """Batched point-reaching task (see module docstring)."""

    def __init__(
        self,
        num_envs: int = 1,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        *,
        max_episode_steps: int = 50,
        step_dt: float = 0.05,
        max_speed: float = 0.5,
        success_tol: float = 0.02,
        action_noise: float = 0.0,
    ) -> None:
        params = checked_params(
            "reach",
            {
                "max_speed": max_speed,
                "success_tol": success_tol,
                "action_noise": action_noise,
                "workspace_low": WORKSPACE_LOW,
                "workspace_high": WORKSPACE_HIGH,
            },
        )
        spec = EnvSpec(
            task="reach",
            task_description="move the end effector to the goal",
            observation=(
                ObservationKey("ee_pos", (3,), names=xyz_names("ee")),
                ObservationKey("goal_pos", (3,), names=xyz_names("goal")),
                ObservationKey("goal_rel", (3,), names=xyz_names("goal_rel")),
            ),
            action=ActionSpec(
                dim=3,
                low=(-1.0,) * 3,
                high=(1.0,) * 3,
                names=xyz_names("ee_vel"),
                kind="ee_delta_pos",
                normalized=True,
            ),
            step_dt=step_dt,
            max_episode_steps=max_episode_steps,
            num_envs=num_envs,
            device=torch.device(device),
            state=self.state_spec(),
            environment_state_keys=("goal_pos",),
            params=params,
        )
        self._ws_low = torch.tensor(WORKSPACE_LOW, device=spec.device)
        self._ws_high = torch.tensor(WORKSPACE_HIGH, device=spec.device)
        super().__init__(spec, seed)

    @classmethod
    def physical_fields(cls) -> tuple[StateField, ...]:
        return (StateField("ee_pos", (3,)), StateField("goal_pos", (3,)))

    def _reset_rows(self, ids: torch.Tensor) -> None:
        u = self.rng.uniform(ids, 6)
        margin = torch.tensor([0.05, 0.05, 0.05], device=self.device)
        low, span = self._ws_low + margin, self._ws_high - self._ws_low - 2 * margin
        self.s["ee_pos"][ids] = low + u[:, :3] * span
        self.s["goal_pos"][ids] = low + u[:, 3:] * span

    def _advance(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        p = self.spec.params
        rows = torch.arange(self.spec.num_envs, device=self.device)
        noise = self.rng.normal(rows, 3) * p["action_noise"]
        velocity = torch.clamp(action + noise, -1.0, 1.0) * p["max_speed"]
        ee = torch.clamp(self.s["ee_pos"] + velocity * self.spec.step_dt, self._ws_low, self._ws_high)
        self.s["ee_pos"] = ee
        dist = torch.linalg.vector_norm(self.s["goal_pos"] - ee, dim=1)
        success = dist < p["success_tol"]
        reward = -dist + success.float()
        return reward, success, success

    def _observe(self) -> dict[str, torch.Tensor]:
        ee, goal = self.s["ee_pos"], self.s["goal_pos"]
        return {"ee_pos": ee.clone(), "goal_pos": goal.clone(), "goal_rel": goal - ee}

    def safe_hold_action(self, env_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Zero velocity."""
        rows = self.spec.num_envs if env_ids is None else int(torch.as_tensor(env_ids).numel())
        return torch.zeros(rows, 3, device=self.device)
