"""Fixtures for collector tests; the toy env / expert / student live in ``collect_helpers``."""

from __future__ import annotations

import pytest
from collect_helpers import ToyVecEnv


@pytest.fixture
def toy_env() -> ToyVecEnv:
    return ToyVecEnv()
