"""The `Expert` protocol.

::

    expert.reset(env_ids, obs, info)            # after the env reset those rows
    query = expert.act(obs, env_ids=env_ids)     # ExpertQuery for the rows in env_ids

``obs`` is the env's full-batch observation dict; ``env_ids`` (LongTensor) selects the rows to
label, and the query has one row per entry of ``env_ids``. Experts never step or mutate the
environment; stateful experts keep their own per-row caches and invalidate them in ``reset``.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch

from odsd.experts.query import ExpertQuery, ExpertSpec


@runtime_checkable
class Expert(Protocol):
    """An action labeller for an environment's observations."""

    spec: ExpertSpec

    def reset(self, env_ids: torch.Tensor, obs: dict[str, torch.Tensor], info: dict[str, Any]) -> None:
        """Forget per-row state of ``env_ids`` (their episodes restarted)."""
        ...

    def act(self, obs: dict[str, torch.Tensor], *, env_ids: torch.Tensor) -> ExpertQuery:
        """Label the rows ``env_ids`` of ``obs``."""
        ...
