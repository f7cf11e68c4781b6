"""Masked behavior cloning of the reference MLP on a store snapshot.

Frames whose expert label is invalid are excluded from the loss by selection (never multiplied by
zero after a NaN), and normalization statistics are computed once from the training snapshot and
frozen into the published policy. The learning rate follows a cosine decay to zero by default:
with a constant rate the final iterate is noisy enough that two runs differing only in a few
steps differ by >10 points of student-only success on ``pick_place`` (see ``docs/results.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from odsd.envs import STATE_KEY, EnvSpec
from odsd.policies.fit import reference_meta
from odsd.policies.mlp import ReferenceMLP
from odsd.policies.snapshot import publish_snapshot
from odsd.store import Snapshot


@dataclass(frozen=True)
class BCConfig:
    steps: int = 2000
    batch_size: int = 256
    lr: float = 3e-3
    lr_schedule: str = "cosine"
    """``cosine`` (decay to zero over ``steps``) or ``constant``."""
    hidden: tuple[int, ...] = (256, 256)
    label: str = "action.expert"
    seed: int = 0
    device: str = "cpu"


def masked_bc_loss(
    model: ReferenceMLP, obs: torch.Tensor, target: torch.Tensor, valid: torch.Tensor
) -> torch.Tensor:
    """Mean squared error, in units of the action range, over rows with a valid label only."""
    rows = valid.nonzero().squeeze(1)
    if rows.numel() == 0:
        return torch.zeros((), device=obs.device, requires_grad=True)
    pred = model(obs[rows])
    scale = (model.action_high - model.action_low) / 2
    return (((pred - target[rows]) / scale) ** 2).mean()


def train_bc(
    snapshot: Snapshot, spec: EnvSpec, cfg: BCConfig, *, init: ReferenceMLP | None = None
) -> ReferenceMLP:
    """Train (or continue training ``init``) on every valid label in ``snapshot``."""
    device = torch.device(cfg.device)
    obs_np = snapshot.read(STATE_KEY)
    act_np = snapshot.read(cfg.label)
    valid_np = (
        snapshot.read("action.expert_valid") if cfg.label == "action.expert" else np.ones(len(obs_np), bool)
    )
    valid_np &= np.isfinite(act_np).all(axis=1)
    obs = torch.as_tensor(obs_np, device=device)
    act = torch.nan_to_num(torch.as_tensor(act_np, device=device))
    valid = torch.as_tensor(valid_np, device=device)
    good = obs[valid]
    mean = good.mean(0) if len(good) else torch.zeros(obs.shape[1], device=device)
    std = good.std(0).clamp_min(1e-3) if len(good) > 1 else torch.ones(obs.shape[1], device=device)
    gen = torch.Generator(device="cpu").manual_seed(cfg.seed)
    if init is None:
        torch.manual_seed(cfg.seed)
        model = ReferenceMLP(
            spec.state_dim,
            spec.action.dim,
            cfg.hidden,
            obs_mean=mean,
            obs_std=std,
            action_low=spec.action.low,
            action_high=spec.action.high,
        ).to(device)
    else:
        model = init.to(device)
        model.obs_mean.copy_(mean)
        model.obs_std.copy_(std)
    if cfg.lr_schedule not in ("cosine", "constant"):
        raise ValueError(f"lr_schedule must be 'cosine' or 'constant', got {cfg.lr_schedule!r}")
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    sched = (
        torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(cfg.steps, 1))
        if cfg.lr_schedule == "cosine"
        else None
    )
    idx = valid.nonzero().squeeze(1).cpu()
    if idx.numel() == 0:
        return model
    model.train()
    for _ in range(cfg.steps):
        batch = idx[torch.randint(idx.numel(), (cfg.batch_size,), generator=gen)].to(device)
        loss = masked_bc_loss(model, obs[batch], act[batch], valid[batch])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
    model.eval()
    return model


def publish_bc(policies_dir: Path, model: ReferenceMLP, spec: EnvSpec, snapshot: Snapshot) -> Path:
    """Publish ``model`` as the next snapshot version, recording the data watermark it saw."""
    meta = reference_meta(
        model,
        spec,
        parent_watermark=snapshot.watermark,
        extra={"frames": snapshot.num_frames, "episodes": snapshot.num_episodes},
    )
    return publish_snapshot(policies_dir, model, meta)
