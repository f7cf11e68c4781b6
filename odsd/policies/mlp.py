"""`ReferenceMLP`: the reference state→action policy, normalization included.

::

    model = ReferenceMLP(obs_dim=17, action_dim=4, hidden=(256, 256),
                         obs_mean=mean, obs_std=std, action_low=low, action_high=high)
    action = model(obs_state)            # [n, 4], always inside [action_low, action_high]
    model.arch_kwargs()                  # JSON-able kwargs that rebuild the same shapes

Observations are standardized with the frozen ``obs_mean``/``obs_std`` buffers; the network's
``tanh`` output in ``[-1, 1]`` is mapped affinely onto the action bounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from odsd.policies.architectures import register_architecture

ARCHITECTURE = "reference_mlp"


class ReferenceMLP(nn.Module):
    """MLP policy with frozen observation normalization and bounded actions."""

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden: Sequence[int] = (256, 256),
        obs_mean: torch.Tensor | Sequence[float] | None = None,
        obs_std: torch.Tensor | Sequence[float] | None = None,
        action_low: torch.Tensor | Sequence[float] | None = None,
        action_high: torch.Tensor | Sequence[float] | None = None,
    ) -> None:
        super().__init__()
        self.obs_dim, self.action_dim, self.hidden = (
            int(obs_dim),
            int(action_dim),
            tuple(int(h) for h in hidden),
        )

        def buf(value: Any, size: int, default: float) -> torch.Tensor:
            if value is None:
                return torch.full((size,), default, dtype=torch.float32)
            return torch.as_tensor(value, dtype=torch.float32).reshape(size).clone()

        self.register_buffer("obs_mean", buf(obs_mean, self.obs_dim, 0.0))
        self.register_buffer("obs_std", torch.clamp(buf(obs_std, self.obs_dim, 1.0), min=1e-6))
        self.register_buffer("action_low", buf(action_low, self.action_dim, -1.0))
        self.register_buffer("action_high", buf(action_high, self.action_dim, 1.0))
        layers: list[nn.Module] = []
        width = self.obs_dim
        for h in self.hidden:
            layers += [nn.Linear(width, h), nn.SiLU()]
            width = h
        layers.append(nn.Linear(width, self.action_dim))
        self.net = nn.Sequential(*layers)

    def arch_kwargs(self) -> dict[str, Any]:
        """Kwargs that rebuild this module's shapes (buffers come from the weights)."""
        return {"obs_dim": self.obs_dim, "action_dim": self.action_dim, "hidden": list(self.hidden)}

    def normalized_forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Pre-tanh network output for standardized observations (use for training losses)."""
        return self.net((obs - self.obs_mean) / self.obs_std)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Raw env actions inside the bounds for ``obs`` ``[n, obs_dim]``."""
        unit = torch.tanh(self.normalized_forward(obs))
        return self.action_low + (unit + 1.0) * 0.5 * (self.action_high - self.action_low)


register_architecture(ARCHITECTURE, ReferenceMLP)
