"""Shared fixtures: a small feature schema and a fresh episode store in a temporary directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from odsd.store import EpisodeStore
from odsd.testing.store import TINY_FEATURES


@pytest.fixture
def features() -> dict[str, dict[str, Any]]:
    """A small schema with float, bool and int fields (see ``odsd.testing.store.TINY_FEATURES``)."""
    return {name: dict(spec) for name, spec in TINY_FEATURES.items()}


@pytest.fixture
def tmp_store(tmp_path: Path, features: dict[str, dict[str, Any]]) -> EpisodeStore:
    """An empty store with ``features`` at fps 10 and process-crash durability (fast)."""
    return EpisodeStore.create(tmp_path / "store", features=features, fps=10, durability="process")
