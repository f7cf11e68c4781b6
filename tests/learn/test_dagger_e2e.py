"""A CI-sized DAgger run through the real CLI: collector and learner as two processes.

``odsd collect --policy-wait`` waits at each iteration boundary for the learner's next snapshot
(synchronous DAgger), ``odsd learn`` trains on committed data only; then the untrained v0 and
the final student are evaluated student-only with ``odsd eval``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def odsd(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "odsd", *args], capture_output=True, text=True, timeout=600, env=ENV
    )
    assert proc.returncode == 0, f"odsd {' '.join(args)} failed:\n{proc.stderr[-2000:]}"
    return proc


def success(policy: Path) -> float:
    out = odsd(
        "eval",
        "--policy",
        str(policy),
        "--task",
        "pick_place",
        "--episodes",
        "48",
        "--num-envs",
        "16",
        "--seed",
        "777",
        "--json",
    )
    return json.loads(out.stdout)["success_rate"]


def test_dagger_with_a_learner_process_beats_the_initial_student(tmp_path: Path) -> None:
    store = tmp_path / "store"
    # The learner starts first and waits for the collector to create the store.
    learn = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "odsd",
            "learn",
            str(store),
            "--min-new-episodes",
            "24",
            "--max-rounds",
            "3",
            "--steps",
            "1500",
            "--poll",
            "0.2",
            "--torch-threads",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        odsd(
            "collect",
            "--mode",
            "dagger_sync",
            "--task",
            "pick_place",
            "--num-envs",
            "8",
            "--store",
            str(store),
            "--episodes-per-iteration",
            "24",
            "--max-iterations",
            "3",
            "--run-id",
            "e2e",
            "--seed",
            "1",
            "--durability",
            "process",
            "--torch-threads",
            "1",
            "--policy-wait",
            "300",
        )
        _, learn_err = learn.communicate(timeout=600)
    finally:
        if learn.poll() is None:
            learn.kill()
    assert learn.returncode == 0, learn_err[-2000:]
    assert "published v000003" in learn_err
    info = json.loads(odsd("store", "inspect", str(store), "--json").stdout)
    assert {k: v["episodes"] for k, v in info["iterations"].items()} == {"0": 24, "1": 24, "2": 24}
    assert [v["policy_versions"] for v in info["iterations"].values()] == [[0], [1], [2]]
    policies = store / "policies"
    initial, final = success(policies / "v000000"), success(policies / "v000003")
    assert initial < 0.1
    assert final > initial + 0.2, (initial, final)
