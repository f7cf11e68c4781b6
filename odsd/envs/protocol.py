"""The `VecEnv` protocol every environment (built-in or adapted) implements.

Contract (all tensors on ``spec.device``, batch dimension = env rows, ``n = spec.num_envs``)::

    obs, info = env.reset()                       # every row
    obs, info = env.reset(env_ids=torch.tensor([2, 5]), seed=7)
    # obs is the FULL batch [n, ...]; only rows 2 and 5 changed. With a seed, row i is seeded
    # from (seed, i), so it equals row i of ``env.reset(seed=7)``.
    obs, reward, terminated, truncated, info = env.step(action)   # action [n, A] float32
    # reward [n] float32, terminated/truncated [n] bool, info["success"] [n] bool.

- No hidden auto-reset: a finished row keeps its terminal observation until the caller resets it.
- A finished row that is stepped again stays frozen: same observation, reward 0, the same
  terminated/truncated/success flags, and its step counter does not advance.
- ``truncated`` is set when a row's own step counter reaches ``spec.max_episode_steps`` and the
  row did not terminate on that step (``terminated`` wins when both happen).

Optional capabilities are separate protocols so ``isinstance`` tells what an env supports:
:class:`SupportsState` (``get_state``/``set_state`` for replay and query-purity checks) and
:class:`SupportsSafeHold` (the task's safe hold action). An env whose ``info["success"]`` is
always False because it has no notion of success says so with ``success_signal = False``
(:func:`reports_success`); ``odsd check-env``, ``odsd eval`` and ``expert_demo`` then warn.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch

from odsd.envs.errors import EnvContractError
from odsd.envs.spec import EnvSpec

Obs = dict[str, torch.Tensor]
StepResult = tuple[Obs, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]


@runtime_checkable
class VecEnv(Protocol):
    """A batch of ``spec.num_envs`` independent environment rows driven by torch tensors."""

    spec: EnvSpec

    def reset(
        self, env_ids: torch.Tensor | None = None, seed: int | None = None
    ) -> tuple[Obs, dict[str, Any]]:
        """Reset ``env_ids`` (all rows when ``None``); return the full-batch observation."""
        ...

    def step(self, action: torch.Tensor) -> StepResult:
        """Advance every live row by one control step."""
        ...

    def close(self) -> None:
        """Release simulator resources; idempotent."""
        ...


@runtime_checkable
class SupportsState(Protocol):
    """Environments whose full simulator state can be read and restored per row."""

    def get_state(self, env_ids: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """State of ``env_ids`` (all rows when ``None``) laid out as ``spec.state``."""
        ...

    def set_state(self, state: dict[str, torch.Tensor], env_ids: torch.Tensor | None = None) -> Obs:
        """Restore rows from ``state``; return the full-batch observation afterwards."""
        ...


@runtime_checkable
class SupportsSafeHold(Protocol):
    """Environments that define a task-specific safe hold action."""

    def safe_hold_action(self, env_ids: torch.Tensor | None = None) -> torch.Tensor:
        """``[len(env_ids), A]`` raw actions that keep those rows still and safe."""
        ...


def safe_hold_action(env: VecEnv, env_ids: torch.Tensor | None = None) -> torch.Tensor:
    """The env's own safe hold, or zeros clipped into the action bounds when it defines none.

    >>> hold = safe_hold_action(env, torch.tensor([0, 3]))  # [2, A]
    """
    if isinstance(env, SupportsSafeHold):
        return env.safe_hold_action(env_ids)
    spec = env.spec
    rows = spec.num_envs if env_ids is None else int(torch.as_tensor(env_ids).numel())
    zeros = torch.zeros(rows, spec.action.dim, dtype=torch.float32, device=spec.device)
    return spec.action.clip(zeros)


def resolve_env_ids(
    env_ids: torch.Tensor | list[int] | None, num_envs: int, device: torch.device
) -> torch.Tensor:
    """Normalize ``env_ids`` (None, list, bool mask or index tensor) to a LongTensor of row indices."""
    if env_ids is None:
        return torch.arange(num_envs, device=device)
    ids = torch.as_tensor(env_ids, device=device)
    if ids.dtype == torch.bool:
        if ids.shape != (num_envs,):
            raise EnvContractError(f"env_ids mask must have shape ({num_envs},), got {tuple(ids.shape)}")
        return torch.nonzero(ids, as_tuple=False).flatten()
    ids = ids.to(torch.long).flatten()
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_envs):
        raise EnvContractError(f"env_ids out of range for {num_envs} rows: {ids.tolist()}")
    return ids


def reports_success(env: VecEnv) -> bool | None:
    """Whether ``env`` has a success signal: its optional ``success_signal`` attribute (True, False,
    or None when it cannot tell yet); envs without the attribute are taken to report success."""
    value = getattr(env, "success_signal", True)
    return None if value is None else bool(value)
