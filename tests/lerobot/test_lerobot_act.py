"""A real LeRobot ACT policy, built by make_policy from OdsdLeRobotDataset.meta, trains on odsd batches."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from odsd.lerobot import OdsdLeRobotDataset

pytest.importorskip("lerobot.datasets.lerobot_dataset")
pytestmark = pytest.mark.lerobot


def test_act_overfits_through_dataloader(collected_store: Path) -> None:
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.factory import make_policy, make_pre_post_processors

    torch.manual_seed(0)
    chunk = 8
    cfg = ACTConfig(
        chunk_size=chunk,
        n_action_steps=chunk,
        dim_model=32,
        n_heads=2,
        dim_feedforward=64,
        n_encoder_layers=1,
        n_decoder_layers=1,
        n_vae_encoder_layers=1,
        latent_dim=8,
        use_vae=True,
        pretrained_backbone_weights=None,  # state-only: no vision backbone is built or fetched
        device="cpu",
    )
    ds = OdsdLeRobotDataset(
        collected_store, delta_timestamps={"action": [i / ds_fps(collected_store) for i in range(chunk)]}
    )
    policy = make_policy(cfg, ds_meta=ds.meta)
    assert not hasattr(policy.model, "backbone")
    assert set(cfg.input_features) >= {"observation.state", "observation.environment_state"}
    assert set(cfg.output_features) == {"action"}
    pre, _post = make_pre_post_processors(cfg, dataset_stats=ds.meta.stats)

    subset = torch.utils.data.Subset(ds, list(range(64)))  # a short overfit on 64 anchors
    loader = torch.utils.data.DataLoader(
        subset, batch_size=32, shuffle=True, num_workers=2, persistent_workers=True
    )
    opt = torch.optim.AdamW(policy.parameters(), lr=3e-3)
    policy.train()
    losses = []
    for _epoch in range(15):
        for batch in loader:
            batch = pre(batch)
            loss, _ = policy.forward(batch)
            assert torch.isfinite(loss)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    first, last = sum(losses[:4]) / 4, sum(losses[-4:]) / 4
    assert last < 0.5 * first, losses


def ds_fps(path: Path) -> float:
    from odsd.store import EpisodeStore

    return EpisodeStore.open(path).manifest.fps
