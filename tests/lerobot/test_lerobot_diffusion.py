"""A real LeRobot Diffusion policy, built by make_policy from OdsdLeRobotDataset.meta, trains on odsd batches."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from odsd.lerobot import OdsdLeRobotDataset
from odsd.store import EpisodeStore

pytest.importorskip("lerobot.datasets.lerobot_dataset")
pytestmark = pytest.mark.lerobot


def test_diffusion_trains_through_dataloader(collected_store: Path) -> None:
    from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig
    from lerobot.policies.factory import make_policy, make_pre_post_processors

    torch.manual_seed(0)
    fps = EpisodeStore.open(collected_store).manifest.fps
    cfg = DiffusionConfig(
        n_obs_steps=2,
        horizon=8,
        n_action_steps=4,
        down_dims=(32, 64),
        diffusion_step_embed_dim=32,
        num_train_timesteps=20,
        device="cpu",
    )
    obs_deltas = [i / fps for i in range(1 - cfg.n_obs_steps, 1)]
    ds = OdsdLeRobotDataset(
        collected_store,
        delta_timestamps={
            "observation.state": obs_deltas,
            "observation.environment_state": obs_deltas,
            "action": [i / fps for i in range(1 - cfg.n_obs_steps, 1 - cfg.n_obs_steps + cfg.horizon)],
        },
    )
    policy = make_policy(cfg, ds_meta=ds.meta)
    assert set(cfg.input_features) >= {"observation.state", "observation.environment_state"}
    assert set(cfg.output_features) == {"action"}
    pre, post = make_pre_post_processors(cfg, dataset_stats=ds.meta.stats)

    loader = torch.utils.data.DataLoader(torch.utils.data.Subset(ds, list(range(32))), batch_size=32)
    batch = pre(next(iter(loader)))
    assert batch["observation.state"].shape[:2] == (32, cfg.n_obs_steps)
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    policy.train()
    losses = []
    for _ in range(60):  # overfit one batch: the denoiser's loss falls clearly below its start
        loss, _ = policy.forward(batch)
        assert torch.isfinite(loss)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.7 * first, losses

    policy.eval()
    policy.reset()
    item = ds[0]
    obs = {k: v[-1:].clone() for k, v in item.items() if k.startswith("observation.")}
    with torch.no_grad():
        action = post(policy.select_action(pre(obs)))
    assert action.shape == (1, ds.meta.features["action"]["shape"][0]) and torch.isfinite(action).all()
