"""A run that commits only successes but never sees one says so instead of spinning silently."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pendulum"


@pytest.mark.gym
def test_expert_demo_without_successes_warns(tmp_path: Path) -> None:
    """Gymnasium Pendulum as it is (no success signal) with an expert that swings it up: no episode
    counts as a success, so expert_demo commits nothing; after NO_SUCCESS_WARNING_EPISODES finished
    episodes the run warns once, naming the missing success signal, and still stops cleanly."""
    pytest.importorskip("gymnasium")
    log = tmp_path / "odsd.log"
    path = os.pathsep.join(p for p in (str(EXAMPLE), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    args = [
        *("collect", "--mode", "expert_demo", "--task", "gymnasium:Pendulum-v1"),
        *(
            "--expert",
            "pendulum_expert:make_expert",
            "--num-envs",
            "16",
            "--max-episodes",
            "10",
            "--store",
            str(tmp_path / "store"),
        ),
        *("--durability", "process", "--set", "metrics_interval_s=0.5"),
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "odsd", *args], stdout=out, stderr=subprocess.STDOUT, env=env
        )
    try:
        deadline = time.monotonic() + 240
        while (
            "without success" not in log.read_text() and proc.poll() is None and time.monotonic() < deadline
        ):
            time.sleep(0.2)
        text = log.read_text()
        assert proc.poll() is None, text[-3000:]  # it never reaches --max-episodes 10
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    from odsd.collect.collector import NO_SUCCESS_WARNING_EPISODES

    text = log.read_text()
    warnings = [line for line in text.splitlines() if "without success" in line]
    assert len(warnings) == 1, text[-3000:]
    assert f"{NO_SUCCESS_WARNING_EPISODES} episodes in a row finished without success" in warnings[0]
    assert "reports no success signal" in warnings[0] and "--keep-failed" in warnings[0]
