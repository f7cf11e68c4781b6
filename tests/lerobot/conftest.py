"""Fixtures for the LeRobot reader/export tests: hand-built stores and one collected store."""

from __future__ import annotations

import atexit
import importlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# LeRobot must never reach the network here, and `datasets` must not fill the user's cache.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
if "HF_DATASETS_CACHE" not in os.environ:
    _cache = tempfile.mkdtemp(prefix="odsd-hf-cache-")
    os.environ["HF_DATASETS_CACHE"] = _cache
    atexit.register(shutil.rmtree, _cache, True)

from lerobot_helpers import build_camera_store, build_store


@pytest.fixture(autouse=True)
def _no_half_loaded_torchcodec() -> Iterator[None]:
    """LeRobot probes torchcodec when it opens a video dataset; where torchcodec cannot load (no
    system FFmpeg libraries, as here) the probe can leave a half-initialized ``torchcodec`` in
    ``sys.modules``, and ``datasets`` then fails on ``import torchcodec.decoders`` in every later
    test of the process. Drop such leftovers so tests do not depend on their order."""
    yield
    if "torchcodec" in sys.modules:
        try:
            importlib.import_module("torchcodec.decoders")
        except (ImportError, OSError, RuntimeError):
            for name in [m for m in sys.modules if m == "torchcodec" or m.startswith("torchcodec.")]:
                del sys.modules[name]


@pytest.fixture
def small_store(tmp_path: Path):
    """6 episodes over 3 iterations, some failed, some invalid expert labels, segment tables."""
    return build_store(tmp_path / "small", seed=0)


@pytest.fixture(scope="session")
def camera_store(tmp_path_factory: pytest.TempPathFactory):
    """``small_store`` with two 24x32 RGB cameras (``observation.images.top`` / ``.wrist``) whose
    frames are ``lerobot_helpers.camera_frame(episode_id, frame, 24, 32, camera)``; built once."""
    return build_camera_store(tmp_path_factory.mktemp("cameras") / "store", seed=0)


@pytest.fixture(scope="session")
def collected_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real dagger_sync pick_place store (16 episodes, ~1k frames, all labels valid)."""
    from odsd.collect import CollectConfig, Collector

    path = tmp_path_factory.mktemp("collected") / "store"
    Collector(
        CollectConfig(
            mode="dagger_sync",
            task="pick_place",
            num_envs=8,
            store=str(path),
            episodes_per_iteration=8,
            max_iterations=2,
            durability="process",
        )
    ).run()
    return path
