"""Fixtures for the LeRobot policy tests: a tiny ACT trained for a few steps on an odsd store."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from lerobot_policy_helpers import CAMERA_TASK, PICK_PLACE, train_tiny_act, train_tiny_diffusion

# LeRobot must never reach the network here.
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def act_dir(demo_store: Path) -> Path:
    """A LeRobot pretrained directory (ACT, chunk 4, 3 executed steps) for ``pick_place``."""
    pytest.importorskip("lerobot.policies.act.configuration_act")
    return train_tiny_act(demo_store, demo_store.parent / "act")


@pytest.fixture(scope="session")
def diffusion_dir(demo_store: Path) -> Path:
    """A LeRobot pretrained directory (Diffusion, n_obs_steps 1, 4 executed steps) for ``pick_place``."""
    pytest.importorskip("lerobot.policies.diffusion.configuration_diffusion")
    return train_tiny_diffusion(demo_store, demo_store.parent / "diffusion")


def collect_demos(store: Path, task: str, task_kwargs: dict, *, episodes: int) -> Path:
    """``episodes`` expert_demo episodes of ``task`` (one per row, failures kept) into ``store``."""
    from odsd.collect import CollectConfig, Collector

    Collector(
        CollectConfig(
            mode="expert_demo",
            task=task,
            task_kwargs=task_kwargs,
            num_envs=episodes,
            store=store,
            max_episodes=episodes,
            keep_failed=True,
            durability="process",
            writer="thread",
        )
    ).run()
    return store


@pytest.fixture(scope="session")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 expert_demo pick_place episodes (40 steps at most) to train the tiny policies on."""
    return collect_demos(tmp_path_factory.mktemp("demos") / "store", "pick_place", PICK_PLACE, episodes=4)


@pytest.fixture(scope="session")
def camera_act_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A LeRobot ACT reading ``observation.images.top`` (and the state) of ``pick_place_cam``."""
    pytest.importorskip("lerobot.policies.act.configuration_act")
    root = tmp_path_factory.mktemp("camera-act")
    collect_demos(root / "store", "pick_place_cam", CAMERA_TASK, episodes=2)
    return train_tiny_act(root / "store", root / "act", steps=1)
