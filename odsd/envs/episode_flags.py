"""Per-row episode bookkeeping shared by the built-in tasks and the Gymnasium adapter."""

from __future__ import annotations

from typing import Any

import torch


class EpisodeFlagsMixin:
    """Step counter and terminated/truncated/success flags per env row.

    The env calls :meth:`_init_episode_flags` once, :meth:`_reset_flags` for rows it resets and
    returns :meth:`_reset_result` from ``reset``.
    """

    _steps: torch.Tensor
    _terminated: torch.Tensor
    _truncated: torch.Tensor
    _success: torch.Tensor

    def _init_episode_flags(self, num_envs: int, device: torch.device) -> None:
        self._steps = torch.zeros(num_envs, dtype=torch.long, device=device)
        self._terminated = torch.zeros(num_envs, dtype=torch.bool, device=device)
        self._truncated = torch.zeros(num_envs, dtype=torch.bool, device=device)
        self._success = torch.zeros(num_envs, dtype=torch.bool, device=device)

    def _info(self) -> dict[str, Any]:
        return {"success": self._success.clone(), "episode_step": self._steps.clone()}

    def _reset_result(self, ids: torch.Tensor) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Clear the rows' flags and build ``reset``'s return value (full-batch observation)."""
        self._steps[ids] = 0
        self._terminated[ids] = False
        self._truncated[ids] = False
        self._success[ids] = False
        info = self._info()
        info["reset_ids"] = ids
        return self._observe(), info  # type: ignore[attr-defined]
