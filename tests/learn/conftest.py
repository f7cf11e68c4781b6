"""A small pick_place store collected once per module for the learner tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from odsd.collect import CollectConfig, Collector


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("learn") / "store"
    cfg = CollectConfig(
        mode="dagger_sync",
        task="pick_place",
        num_envs=8,
        store=root,
        episodes_per_iteration=8,
        max_iterations=2,
        durability="process",
        seed=5,
        metrics_interval_s=3600,
    )
    Collector(cfg).run()
    return root
