"""Fixtures for the daemon tests: one uninterrupted reference run shared by the whole session."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from daemon_helpers import collect_args, episodes_table, odsd


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    """An uninterrupted ``odsd collect`` run (reach, 12 iterations x 6 episodes, seed 3), read-only,
    and its wall time (the machine's speed varies a lot; the signal loops scale their delays by it)."""
    store = tmp_path_factory.mktemp("reference") / "store"
    t0 = time.monotonic()
    proc = odsd(*collect_args(store), timeout=400)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    return store, elapsed


@pytest.fixture(scope="session")
def reference_store(reference_run: tuple[Path, float]) -> Path:
    return reference_run[0]


@pytest.fixture(scope="session")
def reference(reference_store: Path) -> list[dict[str, Any]]:
    return episodes_table(reference_store)


@pytest.fixture(scope="session")
def max_delay(reference_run: tuple[Path, float]) -> float:
    """Upper bound of the random delay before a signal: 1.5 s, less on a fast machine, so that
    the loops' signals land before the run has finished. With ~22 signals the expected running
    time between them adds up to ~20 % of the uninterrupted run, leaving room for machines
    whose speed varies during the test."""
    return max(0.05, min(1.5, reference_run[1] / 60))


@pytest.fixture
def store_copy(reference_store: Path, tmp_path: Path) -> Path:
    """A private copy of the reference store (to damage or resume)."""
    dst = tmp_path / "store"
    shutil.copytree(reference_store, dst)
    return dst
