"""The tiny LeRobot ACT the policy tests train (shared by conftest and the tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ACT_CHUNK_SIZE = 4
ACT_ACTION_STEPS = 3
PICK_PLACE = {"max_episode_steps": 40}
"""Task kwargs of every pick_place env in these tests (short episodes)."""


CAMERA_TASK = {"cameras": ["top"], "image_size": 32, "max_episode_steps": 30}
"""Task kwargs of the ``pick_place_cam`` envs here (one 32x32 camera, short episodes)."""


def train_tiny_act(store: Path, out: Path, *, steps: int = 5) -> Path:
    """Train a tiny ACT on ``store`` for ``steps`` steps; save it with its processors. It reads the
    store's cameras too (a randomly initialized ResNet-18 backbone, nothing downloaded)."""
    import torch
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.factory import make_policy, make_pre_post_processors

    from odsd.lerobot import OdsdLeRobotDataset

    gen = torch.random.get_rng_state()
    torch.manual_seed(0)
    try:
        cfg = ACTConfig(
            chunk_size=ACT_CHUNK_SIZE,
            n_action_steps=ACT_ACTION_STEPS,
            dim_model=16,
            n_heads=2,
            dim_feedforward=32,
            n_encoder_layers=1,
            n_decoder_layers=1,
            n_vae_encoder_layers=1,
            latent_dim=4,
            use_vae=True,
            pretrained_backbone_weights=None,  # nothing is fetched
            replace_final_stride_with_dilation=False,
            device="cpu",
        )
        probe = OdsdLeRobotDataset(store)
        fps = probe.meta.fps
        ds = OdsdLeRobotDataset(store, delta_timestamps={"action": [i / fps for i in range(ACT_CHUNK_SIZE)]})
        policy = make_policy(cfg, ds_meta=ds.meta)
        pre, post = make_pre_post_processors(cfg, dataset_stats=ds.meta.stats)
        loader = torch.utils.data.DataLoader(ds, batch_size=16, shuffle=True)
        opt = torch.optim.AdamW(policy.parameters(), lr=1e-3)
        policy.train()
        batches = iter(loader)
        for _ in range(steps):
            loss, _info = policy.forward(pre(next(batches)))
            opt.zero_grad()
            loss.backward()
            opt.step()
        save_pretrained(out, policy, pre, post)
    finally:
        torch.random.set_rng_state(gen)
    return out


def train_tiny_diffusion(store: Path, out: Path, *, n_obs_steps: int = 1) -> Path:
    """A tiny Diffusion policy (4 executed steps) after one training step."""
    import torch
    from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig
    from lerobot.policies.factory import make_policy, make_pre_post_processors

    from odsd.lerobot import OdsdLeRobotDataset

    gen = torch.random.get_rng_state()
    torch.manual_seed(0)
    try:
        cfg = DiffusionConfig(
            n_obs_steps=n_obs_steps,
            horizon=8,
            n_action_steps=4,
            down_dims=(16, 32),
            diffusion_step_embed_dim=16,
            num_inference_steps=2,
            num_train_timesteps=10,
            pretrained_backbone_weights=None,
            device="cpu",
        )
        fps = OdsdLeRobotDataset(store).meta.fps
        observed = [i / fps for i in range(1 - n_obs_steps, 1)]
        ds = OdsdLeRobotDataset(
            store,
            delta_timestamps={
                "observation.state": observed,
                "observation.environment_state": observed,
                "action": [i / fps for i in range(1 - n_obs_steps, 9 - n_obs_steps)],
            },
        )
        policy = make_policy(cfg, ds_meta=ds.meta)
        pre, post = make_pre_post_processors(cfg, dataset_stats=ds.meta.stats)
        batch = next(iter(torch.utils.data.DataLoader(ds, batch_size=16, shuffle=True)))
        loss, _info = policy.forward(pre(batch))
        loss.backward()
        save_pretrained(out, policy, pre, post)
    finally:
        torch.random.set_rng_state(gen)
    return out


def save_pretrained(out: Path, *parts: Any) -> None:
    """A LeRobot pretrained directory: the policy and its pre/post processors, side by side."""
    for part in parts:
        part.save_pretrained(out)
