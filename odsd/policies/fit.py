"""A tiny behaviour-cloning fit of :class:`ReferenceMLP`, for tests, demos and bootstrapping.

::

    model = fit_reference_mlp(obs_state, actions, env.spec, epochs=30)
    path = publish_snapshot(root, model, reference_meta(model, env.spec))

The full learner lives in ``odsd.learn``; this only needs tensors already in memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from odsd.envs.spec import EnvSpec
from odsd.policies.meta import NormalizationStats, PolicyMeta
from odsd.policies.mlp import ARCHITECTURE, ReferenceMLP


def fit_reference_mlp(
    obs_state: torch.Tensor,
    actions: torch.Tensor,
    env_spec: EnvSpec,
    *,
    hidden: Sequence[int] = (256, 256),
    epochs: int = 30,
    batch_size: int = 256,
    lr: float = 3e-3,
    seed: int = 0,
) -> ReferenceMLP:
    """Regress ``actions`` ``[N, A]`` on ``obs_state`` ``[N, D]`` (MSE in normalized action space)."""
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    obs_state, actions = obs_state.detach().float().cpu(), actions.detach().float().cpu()
    low, high = env_spec.action.low_tensor(), env_spec.action.high_tensor()
    model = ReferenceMLP(
        obs_dim=obs_state.shape[1],
        action_dim=actions.shape[1],
        hidden=hidden,
        obs_mean=obs_state.mean(0),
        obs_std=obs_state.std(0),
        action_low=low,
        action_high=high,
    )
    target = torch.clamp((actions - low) / (high - low) * 2 - 1, -0.999, 0.999)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(1, epochs))
    n = obs_state.shape[0]
    for _ in range(epochs):
        for idx in torch.randperm(n, generator=generator).split(batch_size):
            pred = torch.tanh(model.normalized_forward(obs_state[idx]))
            loss = torch.nn.functional.mse_loss(pred, target[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        schedule.step()
    return model.eval()


def reference_meta(model: ReferenceMLP, env_spec: EnvSpec, **fields: Any) -> PolicyMeta:
    """``PolicyMeta`` for a :class:`ReferenceMLP` trained on ``env_spec``'s layout."""
    stats = NormalizationStats(
        obs_mean=model.obs_mean.tolist(),
        obs_std=model.obs_std.tolist(),
        action_low=model.action_low.tolist(),
        action_high=model.action_high.tolist(),
    )
    return PolicyMeta.for_env(
        env_spec, architecture=ARCHITECTURE, arch_kwargs=model.arch_kwargs(), normalization=stats, **fields
    )
