"""A swing-up expert for Pendulum, written outside odsd against its public expert protocol.

The expert is a pure function of the observation (so it can label any state a student visits,
which DAgger needs): energy pumping far from the top, a PD controller near it. Use it by import
path::

    PYTHONPATH=examples/pendulum odsd collect --task pendulum_task:make_env \\
        --expert pendulum_expert:make_expert --mode expert_demo --max-episodes 32 --store demo.odsd

Observation: the adapter turns Pendulum's Box observation into one key, ``"observation"``
(``[n, 3]``: cos θ, sin θ, θ̇), which is also what ``observation.state`` holds. Action: torque
``[n, 1]`` within the env's bounds ``[-2, 2]``.
"""

from __future__ import annotations

from typing import Any

import torch

from odsd.envs import EnvSpec
from odsd.experts import ExpertQuery, ExpertSpec

GRAVITY_TERM = 15.0  # Pendulum-v1: θ̈ = 3g/(2l)·sin θ + 3/(m l²)·u with g=10, l=1, m=1
PUMP_GAIN = 0.5
KP, KD = 10.0, 2.0
CATCH_RAD = 0.5


class SwingUpExpert:
    """``Expert`` protocol: ``spec``, ``reset(env_ids, obs, info)``, ``act(obs, *, env_ids)``."""

    def __init__(self, env_spec: EnvSpec, *, pump_gain: float = PUMP_GAIN) -> None:
        if env_spec.action.dim != 1:
            raise ValueError(f"SwingUpExpert drives a 1-D torque, the env's action has {env_spec.action.dim}")
        self.spec = ExpertSpec(name="pendulum_swing_up", version="1", kind="planner", state_conditioned=True)
        self.max_torque = float(env_spec.action.high[0])
        self.pump_gain = pump_gain

    def reset(self, env_ids: torch.Tensor, obs: dict[str, torch.Tensor], info: dict[str, Any]) -> None:
        """Nothing to forget: the expert keeps no per-row state."""

    def act(self, obs: dict[str, torch.Tensor], *, env_ids: torch.Tensor) -> ExpertQuery:
        x = obs["observation"][env_ids]
        cos_t, sin_t, theta_dot = x[:, 0], x[:, 1], x[:, 2]
        theta = torch.atan2(sin_t, cos_t)  # 0 is upright
        energy = 0.5 * theta_dot**2 + GRAVITY_TERM * cos_t
        pump = self.pump_gain * (GRAVITY_TERM - energy) * torch.sign(theta_dot + 1e-3)
        balance = -(KP * theta + KD * theta_dot)
        torque = torch.where(theta.abs() < CATCH_RAD, balance, pump).clamp(-self.max_torque, self.max_torque)
        return ExpertQuery(
            action=torque[:, None].to(torch.float32),
            valid=torch.ones(len(env_ids), dtype=torch.bool, device=x.device),
        )


def make_expert(env_spec: EnvSpec, **kwargs: Any) -> SwingUpExpert:
    """The odsd expert factory: called as ``factory(env_spec, **expert_kwargs)``."""
    return SwingUpExpert(env_spec, **kwargs)
