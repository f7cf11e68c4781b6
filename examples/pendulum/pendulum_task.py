"""Gymnasium ``Pendulum-v1`` as an odsd task with a success signal.

Pendulum never reports success (its ``info`` is empty) and never terminates, so odsd would see
every episode as a failure: ``expert_demo`` would commit nothing. This module defines success the
way a third-party task would: a Gymnasium wrapper sets ``info["is_success"]`` once the pendulum
has been held upright (within ``UPRIGHT_RAD`` of the top, slower than ``SLOW_RAD_S``) for
``HOLD_STEPS`` consecutive steps, and ends the episode there (``terminated``).

Use it by import path (the directory on ``PYTHONPATH``), either as an odsd env factory or as a
Gymnasium registration (Gymnasium imports ``pendulum_task``, which registers the id)::

    PYTHONPATH=examples/pendulum odsd check-env pendulum_task:make_env
    PYTHONPATH=examples/pendulum odsd check-env gymnasium:pendulum_task:PendulumUpright-v0
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import torch

from odsd.envs.gymnasium_adapter import GymnasiumVecEnv

UPRIGHT_RAD = 0.15
SLOW_RAD_S = 1.0
HOLD_STEPS = 10
MAX_EPISODE_STEPS = 200


class UprightSuccess(gym.Wrapper):
    """Adds ``info["is_success"]`` (held upright for ``HOLD_STEPS`` steps) and terminates on it."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self._held = 0

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self._held = 0
        obs, info = self.env.reset(**kwargs)
        return obs, {**info, "is_success": False}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        cos_theta, sin_theta, theta_dot = (float(x) for x in obs)
        upright = abs(math.atan2(sin_theta, cos_theta)) < UPRIGHT_RAD and abs(theta_dot) < SLOW_RAD_S
        self._held = self._held + 1 if upright else 0
        success = self._held >= HOLD_STEPS
        return obs, reward, terminated or success, truncated, {**info, "is_success": success}


def _make_upright(**kwargs: Any) -> gym.Env:
    return UprightSuccess(gym.make("Pendulum-v1", **kwargs).env)


# `gymnasium:pendulum_task:PendulumUpright-v0`: gym.make imports this module, then makes the id.
# The TimeLimit Gymnasium adds is stripped by the adapter, which counts steps itself.
gym.register("PendulumUpright-v0", entry_point=_make_upright, max_episode_steps=MAX_EPISODE_STEPS)


def make_env(
    *, num_envs: int, device: str | torch.device = "cpu", seed: int | None = None, **kwargs: Any
) -> GymnasiumVecEnv:
    """The odsd env factory: called as ``factory(num_envs=, device=, seed=, **task_kwargs)``.

    One wrapped ``Pendulum-v1`` per row. ``gym.make(...).env`` drops Gymnasium's ``TimeLimit``:
    the adapter counts steps itself (``max_episode_steps``) and sets ``truncated``.
    """
    envs = [_make_upright(**kwargs) for _ in range(num_envs)]
    return GymnasiumVecEnv(
        envs,
        task="pendulum_upright",
        task_description="swing the pendulum up and hold it upright",
        device=device,
        seed=seed,
        max_episode_steps=MAX_EPISODE_STEPS,
    )
