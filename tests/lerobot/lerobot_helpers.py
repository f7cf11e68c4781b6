"""Hand-built stores with controlled labels, outcomes and segments, and a reference window rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from odsd.schema import EpisodeMeta
from odsd.schema.store import SegmentRef
from odsd.store import Episode, EpisodeStore

FEATURES: dict[str, dict[str, Any]] = {
    "observation.state": {"dtype": "float32", "shape": [3], "names": ["x", "y", "z"]},
    "action.expert": {"dtype": "float32", "shape": [2], "names": ["a0", "a1"]},
    "action.expert_valid": {"dtype": "bool", "shape": []},
    "action.behavior": {"dtype": "float32", "shape": [2], "names": ["a0", "a1"]},
    "reward": {"dtype": "float32", "shape": []},
    "terminated": {"dtype": "bool", "shape": []},
    "truncated": {"dtype": "bool", "shape": []},
    "success": {"dtype": "bool", "shape": []},
    "episode_step": {"dtype": "int32", "shape": []},
    "segment_id": {"dtype": "int16", "shape": []},
    "policy_version": {"dtype": "int32", "shape": []},
}
PHASES = ["reach", "grasp", "lift"]


def features_with(action_dim: int) -> dict[str, dict[str, Any]]:
    """FEATURES with ``action_dim`` action components (1 is the shape LeRobot stores as a plain value)."""
    names = [f"a{i}" for i in range(action_dim)]
    action = {"dtype": "float32", "shape": [action_dim], "names": names}
    return {**FEATURES, "action.expert": action, "action.behavior": dict(action)}


def make_episode(
    length: int,
    rng: np.random.Generator,
    *,
    iteration: int = 0,
    success: bool = True,
    invalid_rate: float = 0.0,
    nan_invalid: bool = True,
    task: str = "pick",
    action_dim: int = 2,
) -> Episode:
    # segments: split into up to 3 runs
    cuts = (
        sorted(rng.choice(np.arange(1, length), size=min(2, length - 1), replace=False).tolist())
        if length > 2
        else []
    )
    bounds = [0, *cuts, length]
    seg = np.zeros(length, dtype=np.int16)
    refs = []
    for k in range(len(bounds) - 1):
        seg[bounds[k] : bounds[k + 1]] = k
        last = k == len(bounds) - 2
        refs.append(
            SegmentRef(
                name=PHASES[k],
                start=bounds[k],
                end=bounds[k + 1],
                success=(success if last else True),
                failure_reason=None if (success or not last) else "timeout",
            )
        )
    valid = rng.random(length) >= invalid_rate
    expert = rng.uniform(-1, 1, (length, action_dim)).astype(np.float32)
    if nan_invalid:
        expert[~valid] = np.nan
    frames = {
        "observation.state": rng.standard_normal((length, 3)).astype(np.float32),
        "action.expert": expert,
        "action.expert_valid": valid,
        "action.behavior": rng.uniform(-1, 1, (length, action_dim)).astype(np.float32),
        "reward": rng.standard_normal(length).astype(np.float32),
        "terminated": np.arange(length) == length - 1,
        "truncated": np.zeros(length, dtype=bool),
        "success": (np.arange(length) == length - 1) & success,
        "episode_step": np.arange(length, dtype=np.int32),
        "segment_id": seg,
        "policy_version": np.full(length, iteration, dtype=np.int32),
    }
    meta = EpisodeMeta(
        length=length,
        iteration=iteration,
        success=success,
        task=task,
        segments=refs,
        policy_version_first=iteration,
        policy_version_last=iteration,
    )
    return Episode(frames=frames, meta=meta)


def build_store(
    path: Path,
    *,
    seed: int = 0,
    lengths: list[int] | None = None,
    invalid_rate: float = 0.2,
    fps: float = 10,
    action_dim: int = 2,
) -> EpisodeStore:
    """Commit episodes in 3 commits (one per iteration); odd episodes fail."""
    rng = np.random.default_rng(seed)
    lengths = lengths or [12, 7, 20, 5, 15, 9]
    features = features_with(action_dim)
    store = EpisodeStore.create(path, features=features, fps=fps, durability="process")
    writer = store.writer(run_id="t")
    per = max(1, -(-len(lengths) // 3))
    for it, start in enumerate(range(0, len(lengths), per)):
        eps = [
            make_episode(
                n,
                rng,
                iteration=it,
                success=(i % 2 == 0),
                invalid_rate=invalid_rate,
                task="pick" if i % 3 else "place",
                action_dim=action_dim,
            )
            for i, n in enumerate(lengths[start : start + per], start=start)
        ]
        writer.commit(eps)
    return store


def reference_window(
    anchor: int, ep_from: int, ep_to: int, deltas: list[int], valid: np.ndarray | None
) -> tuple[list[int], list[bool]]:
    """The rule written out plainly: clamp into the episode; pad outside it (and invalid labels)."""
    idx, pad = [], []
    for d in deltas:
        q = anchor + d
        c = min(max(q, ep_from), ep_to - 1)
        idx.append(c)
        pad.append(not (ep_from <= q < ep_to) or (valid is not None and not bool(valid[c])))
    return idx, pad


CAMERAS = ("top", "wrist")


def camera_frame(episode: int, frame: int, height: int, width: int, camera: int = 0) -> np.ndarray:
    """The uint8 ``[H, W, 3]`` frame ``frame`` of store episode ``episode``: a smooth function of both.

    Smooth shading plus a soft moving blob, so a lossy video codec reproduces it closely.
    """
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    t = frame * 0.15 + episode * 0.7 + camera * 1.3
    cy = height * (0.5 + 0.3 * np.sin(t))
    cx = width * (0.5 + 0.3 * np.cos(0.8 * t))
    blob = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * (0.15 * min(height, width)) ** 2))
    r = 60 + 90 * yy / height + 100 * blob
    g = 80 + 60 * xx / width + 40 * np.sin(t) + 80 * blob
    b = 120 + 40 * np.cos(t + yy / height) - 60 * blob
    return np.clip(np.stack([r, g, b], axis=-1), 0, 255).astype(np.uint8)


def camera_features(height: int, width: int, cameras: tuple[str, ...] = CAMERAS) -> dict[str, dict[str, Any]]:
    """FEATURES plus one ``observation.images.<camera>`` image field per camera."""
    images = {
        f"observation.images.{cam}": {
            "dtype": "uint8",
            "shape": [height, width, 3],
            "names": ["height", "width", "channels"],
            "kind": "image",
        }
        for cam in cameras
    }
    return {**FEATURES, **images}


def build_camera_store(
    path: Path,
    *,
    seed: int = 0,
    lengths: list[int] | None = None,
    height: int = 24,
    width: int = 32,
    cameras: tuple[str, ...] = CAMERAS,
    invalid_rate: float = 0.2,
    fps: float = 10,
    depth: bool = False,
) -> EpisodeStore:
    """``build_store`` with camera fields whose frames are ``camera_frame(episode_id, frame, ...)``."""
    rng = np.random.default_rng(seed)
    lengths = lengths or [12, 7, 20, 5, 15, 9]
    features = camera_features(height, width, cameras)
    if depth:
        features[f"observation.depth.{cameras[0]}"] = {
            "dtype": "uint16",
            "shape": [height, width, 1],
            "names": ["height", "width", "channels"],
            "kind": "depth",
        }
    store = EpisodeStore.create(path, features=features, fps=fps, durability="process")
    writer = store.writer(run_id="t")
    per = max(1, -(-len(lengths) // 3))
    episode_id = 0
    for it, start in enumerate(range(0, len(lengths), per)):
        eps = []
        for i, n in enumerate(lengths[start : start + per], start=start):
            ep = make_episode(n, rng, iteration=it, success=(i % 2 == 0), invalid_rate=invalid_rate)
            for c, cam in enumerate(cameras):
                ep.frames[f"observation.images.{cam}"] = np.stack(
                    [camera_frame(episode_id, f, height, width, c) for f in range(n)]
                )
            if depth:
                ep.frames[f"observation.depth.{cameras[0]}"] = (
                    500 + ep.frames[f"observation.images.{cameras[0]}"][..., :1].astype(np.uint16) * 3
                )
            eps.append(ep)
            episode_id += 1
        writer.commit(eps)
    return store


def train_act_with_camera(meta: Any, loader: Any, steps: int = 4) -> list[float]:
    """``make_policy(ACTConfig(...), ds_meta=meta)`` with a camera input: a few optimizer steps.

    A tiny ACT (dim_model 32, one layer each, resnet18 without pretrained weights: no download).
    Returns the losses; asserts the camera is a policy input and every loss is finite.
    """
    import torch
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.factory import make_policy, make_pre_post_processors

    torch.manual_seed(0)
    cfg = ACTConfig(
        chunk_size=4,
        n_action_steps=4,
        dim_model=32,
        n_heads=2,
        dim_feedforward=64,
        n_encoder_layers=1,
        n_decoder_layers=1,
        n_vae_encoder_layers=1,
        latent_dim=8,
        use_vae=True,
        vision_backbone="resnet18",
        pretrained_backbone_weights=None,
        device="cpu",
    )
    policy = make_policy(cfg, ds_meta=meta)
    assert hasattr(policy.model, "backbone")
    assert "observation.images.top" in cfg.image_features
    pre, _post = make_pre_post_processors(cfg, dataset_stats=meta.stats)
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    policy.train()
    losses: list[float] = []
    for batch in loader:
        batch = pre(batch)
        loss, _ = policy.forward(batch)
        assert torch.isfinite(loss)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if len(losses) == steps:
            break
    assert len(losses) == steps
    return losses
