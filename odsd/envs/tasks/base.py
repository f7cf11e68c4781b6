"""`TorchTaskEnv`: shared machinery of the built-in batched torch tasks.

A task subclass only describes its physics; this base class owns the contract details that
every task must get right the same way: per-row reset and seeding, per-row step counters,
terminated vs truncated, frozen finished rows, ``info["success"]`` and ``get_state``/``set_state``.

Subclasses implement::

    physical_fields() -> tuple[StateField, ...]      # layout of self.s (physical state)
    _reset_rows(ids)                                   # fill self.s[...][ids] using self.rng
    _advance(action) -> (reward, terminated, success)  # update self.s for every row
    _observe() -> dict[str, Tensor]                    # observation from self.s

Rows that already finished are restored after ``_advance`` so they stay frozen.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any

import torch

from odsd.envs.episode_flags import EpisodeFlagsMixin
from odsd.envs.errors import EnvContractError, EnvSpecError
from odsd.envs.protocol import Obs, StepResult, resolve_env_ids
from odsd.envs.rng import RowRandom
from odsd.envs.spec import EnvSpec, StateField, StateSpec, torch_dtype

BOOKKEEPING_FIELDS: tuple[StateField, ...] = (
    StateField("episode_step", (), "int64"),
    StateField("terminated", (), "bool"),
    StateField("truncated", (), "bool"),
    StateField("success", (), "bool"),
    StateField("rng_key", (), "int64"),
    StateField("rng_counter", (), "int64"),
)


def checked_params(task: str, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with every scalar checked to be a finite number (one-line error otherwise).

    >>> checked_params("pick_place", {"push_prob": "a"})  # EnvSpecError: push_prob must be ...
    """
    for name, value in params.items():
        if isinstance(value, tuple):
            continue
        if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
            raise EnvSpecError(f"{task}: {name} must be a finite number, got {value!r}")
    return params


def xyz_names(prefix: str) -> tuple[str, str, str]:
    """Element names of a 3-vector: ``("ee.x", "ee.y", "ee.z")`` for ``"ee"``."""
    return (f"{prefix}.x", f"{prefix}.y", f"{prefix}.z")


class TorchTaskEnv(EpisodeFlagsMixin, ABC):
    """Base of batched torch tasks; see the module docstring for the subclass contract."""

    spec: EnvSpec

    def __init__(self, spec: EnvSpec, seed: int | None = None) -> None:
        self.spec = spec
        self.device = spec.device
        n = spec.num_envs
        self.rng = RowRandom(n, self.device, 0 if seed is None else seed)
        self.s: dict[str, torch.Tensor] = {
            f.name: torch.zeros((n, *f.shape), dtype=torch_dtype(f.dtype), device=self.device)
            for f in self.physical_fields()
        }
        self._init_episode_flags(n, self.device)
        self._low = spec.action.low_tensor(self.device)
        self._high = spec.action.high_tensor(self.device)
        obs, _ = self.reset(seed=seed)
        spec.validate_observation(obs)

    @classmethod
    @abstractmethod
    def physical_fields(cls) -> tuple[StateField, ...]:
        """Layout of the physical state tensors in ``self.s``."""

    @classmethod
    def state_spec(cls) -> StateSpec:
        """Physical fields followed by the bookkeeping fields of this base class."""
        return StateSpec(cls.physical_fields() + BOOKKEEPING_FIELDS)

    @abstractmethod
    def _reset_rows(self, ids: torch.Tensor) -> None: ...

    @abstractmethod
    def _advance(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...

    @abstractmethod
    def _observe(self) -> Obs: ...

    def reset(
        self, env_ids: torch.Tensor | None = None, seed: int | None = None
    ) -> tuple[Obs, dict[str, Any]]:
        """Reset ``env_ids`` (all rows when ``None``); the returned obs is the full batch.

        With ``seed``, row ``i`` restarts its own random stream from ``(seed, i)``; without one it
        continues its stream, so other rows are never affected.
        """
        ids = resolve_env_ids(env_ids, self.spec.num_envs, self.device)
        if seed is not None:
            self.rng.seed_rows(ids, seed)
        self._reset_rows(ids)
        return self._reset_result(ids)

    def step(self, action: torch.Tensor) -> StepResult:
        """One control step for every live row; finished rows stay frozen (reward 0)."""
        action = self.spec.check_action(action)
        if not bool(torch.isfinite(action).all()):
            rows = torch.nonzero(~torch.isfinite(action).all(dim=1)).flatten().tolist()
            raise EnvContractError(f"{self.spec.task}: non-finite action in rows {rows}")
        action = torch.clamp(action, self._low, self._high)
        live = ~(self._terminated | self._truncated)
        before = {k: v.clone() for k, v in self.s.items()}
        reward, terminated, success = self._advance(action)
        for key, old in before.items():
            mask = live.view(-1, *([1] * (old.dim() - 1)))
            self.s[key] = torch.where(mask, self.s[key], old)
        self._steps += live.long()
        terminated = live & terminated
        truncated = live & ~terminated & (self._steps >= self.spec.max_episode_steps)
        self._terminated |= terminated
        self._truncated |= truncated
        self._success = torch.where(live, success, self._success)
        reward = torch.where(live, reward.to(torch.float32), torch.zeros_like(reward, dtype=torch.float32))
        return self._observe(), reward, self._terminated.clone(), self._truncated.clone(), self._info()

    def get_state(self, env_ids: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Copy of the full state of ``env_ids`` laid out as ``spec.state``."""
        ids = resolve_env_ids(env_ids, self.spec.num_envs, self.device)
        out = {k: v[ids].clone() for k, v in self.s.items()}
        out.update(
            episode_step=self._steps[ids].clone(),
            terminated=self._terminated[ids].clone(),
            truncated=self._truncated[ids].clone(),
            success=self._success[ids].clone(),
        )
        out.update(self.rng.state(ids))
        return out

    def set_state(self, state: dict[str, torch.Tensor], env_ids: torch.Tensor | None = None) -> Obs:
        """Restore rows from a :meth:`get_state` dict; return the full-batch observation."""
        ids = resolve_env_ids(env_ids, self.spec.num_envs, self.device)
        assert self.spec.state is not None
        missing = [f.name for f in self.spec.state.fields if f.name not in state]
        if missing:
            raise EnvContractError(f"{self.spec.task}: set_state is missing fields {missing}")
        for f in self.physical_fields():
            value = state[f.name].to(self.device, torch_dtype(f.dtype))
            if tuple(value.shape) != (ids.numel(), *f.shape):
                raise EnvContractError(
                    f"{self.spec.task}: state {f.name!r} is {tuple(value.shape)}, "
                    f"expected {(ids.numel(), *f.shape)}"
                )
            self.s[f.name][ids] = value
        self._steps[ids] = state["episode_step"].to(self.device, torch.long)
        self._terminated[ids] = state["terminated"].to(self.device, torch.bool)
        self._truncated[ids] = state["truncated"].to(self.device, torch.bool)
        self._success[ids] = state["success"].to(self.device, torch.bool)
        self.rng.load(state, ids)
        return self._observe()

    def close(self) -> None:
        """Nothing to release for torch tasks."""
