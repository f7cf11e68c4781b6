"""Masked BC loss and training through the reader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from odsd.envs import make_env
from odsd.learn.bc import BCConfig, masked_bc_loss, publish_bc, train_bc
from odsd.lerobot import OdsdLeRobotDataset
from odsd.policies import load_snapshot
from odsd.policies.mlp import ReferenceMLP


def _model() -> ReferenceMLP:
    torch.manual_seed(0)
    return ReferenceMLP(5, 2, (16,), action_low=[-1.0, -1.0], action_high=[1.0, 1.0])


def _grads(
    model: ReferenceMLP, obs: torch.Tensor, target: torch.Tensor, valid: torch.Tensor
) -> list[torch.Tensor]:
    model.zero_grad()
    masked_bc_loss(model, obs, target, valid).backward()
    return [p.grad.clone() for p in model.parameters()]


def test_invalid_and_nan_labels_have_no_effect_on_gradients() -> None:
    model = _model()
    obs = torch.randn(8, 5)
    target = torch.rand(8, 2) * 2 - 1
    valid = torch.tensor([True, True, False, True, False, True, True, False])
    clean = _grads(model, obs[valid], target[valid], torch.ones(int(valid.sum()), dtype=torch.bool))
    poisoned = target.clone()
    poisoned[~valid] = torch.tensor([float("nan"), float("inf")])
    mixed = _grads(model, obs, poisoned, valid)
    for a, b in zip(clean, mixed, strict=True):
        assert torch.isfinite(b).all()
        torch.testing.assert_close(a, b)


def test_all_invalid_gives_zero_loss_and_no_nan() -> None:
    model = _model()
    loss = masked_bc_loss(
        model, torch.randn(4, 5), torch.full((4, 2), float("nan")), torch.zeros(4, dtype=torch.bool)
    )
    loss.backward()
    assert float(loss.detach()) == 0.0


def test_train_through_reader_fits_labels_and_records_provenance(demo_store: Path, tmp_path: Path) -> None:
    spec = make_env("pick_place", num_envs=1).spec
    dataset = OdsdLeRobotDataset(demo_store)
    before = ReferenceMLP(
        spec.state_dim, spec.action.dim, (64, 64), action_low=spec.action.low, action_high=spec.action.high
    )
    batch = dataset.get_batch(np.arange(len(dataset)))
    torch.set_grad_enabled(False)
    obs, act = batch["observation.state"], batch["action"]
    scale = (before.action_high - before.action_low) / 2
    err_before = float((((before(obs) - act) / scale) ** 2).mean())
    torch.set_grad_enabled(True)
    model = train_bc(dataset, spec, BCConfig(steps=300, hidden=(64, 64)))
    torch.set_grad_enabled(False)
    err_after = float((((model(obs) - act) / scale) ** 2).mean())
    torch.set_grad_enabled(True)
    assert err_after < 0.5 * err_before
    # Normalization comes from the reader's frozen statistics and is recorded with its version.
    np.testing.assert_allclose(
        model.obs_mean.numpy(), dataset.meta.stats["observation.state"]["mean"], rtol=1e-6
    )
    path = publish_bc(tmp_path / "policies", model, spec, dataset)
    meta = load_snapshot(path, env_spec=spec).meta
    assert meta.parent_watermark == dataset.watermark
    assert meta.stats_version == dataset.meta.stats_version
    assert meta.extra["episodes"] == dataset.meta.total_episodes == 16
