"""Stores with recorded simulator state, collected once per test session (small and fast)."""

from __future__ import annotations

from pathlib import Path

import pytest

from odsd.collect import CollectConfig, Collector
from odsd.store import EpisodeStore


def collect(path: Path, task: str, *, episodes: int, num_envs: int, record_state: bool = True, **kw) -> Path:
    cfg = CollectConfig(
        task=task,
        record_state=record_state,
        store=path,
        durability="process",
        max_episodes=episodes,
        num_envs=num_envs,
        mode="expert_demo",
        keep_failed=True,
        **kw,
    )
    Collector(cfg).run()
    return path


@pytest.fixture(scope="session")
def pick_place_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pick_place with default perturbations (noise, pushes, slips); 3 rows resetting at different times.

    ``max_episode_steps=45`` makes some episodes fail (truncated), so segment tables carry failures.
    """
    return collect(
        tmp_path_factory.mktemp("pp") / "store",
        "pick_place",
        episodes=9,
        num_envs=3,
        task_kwargs={"max_episode_steps": 45, "push_prob": 0.1, "slip_prob": 0.02},
    )


@pytest.fixture(scope="session")
def reach_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return collect(
        tmp_path_factory.mktemp("reach") / "store",
        "reach",
        episodes=4,
        num_envs=2,
        task_kwargs={"action_noise": 0.2},
    )


@pytest.fixture(scope="session")
def stateless_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return collect(
        tmp_path_factory.mktemp("nostate") / "store", "reach", episodes=2, num_envs=2, record_state=False
    )


@pytest.fixture(scope="session")
def fetch_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("gymnasium_robotics")
    pytest.importorskip("mujoco")
    return collect(
        tmp_path_factory.mktemp("fetch") / "store",
        "gymnasium:FetchPickAndPlace-v4",
        episodes=2,
        num_envs=2,
    )


def snapshot(path: Path):
    return EpisodeStore.open(path).snapshot()
