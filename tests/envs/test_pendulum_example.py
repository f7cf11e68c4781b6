"""The third-party plug-in path, end to end through the real CLI: examples/pendulum (Gymnasium
Pendulum-v1 with a success signal defined by the example, and an expert written outside odsd),
both used by import path."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("gymnasium")
pytestmark = pytest.mark.gym

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pendulum"
TASK = "pendulum_task:make_env"
EXPERT = "pendulum_expert:make_expert"


def env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(EXAMPLE), os.environ.get("PYTHONPATH", "")) if p)
    return {
        **os.environ,
        "PYTHONPATH": path,
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
        "HF_HUB_OFFLINE": "1",
    }


def odsd(*args: object, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "odsd", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env(),
    )


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    return proc


@pytest.fixture(scope="module")
def work() -> Path:
    d = Path(tempfile.mkdtemp(prefix="odsd-pendulum-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def demos(work: Path) -> Path:
    store = work / "demos"
    ok(odsd(
        "collect", "--mode", "expert_demo", "--task", TASK, "--expert", EXPERT, "--num-envs", "8",
        "--max-episodes", "16", "--store", store, "--durability", "process",
    ))  # fmt: skip
    return store


@pytest.fixture(scope="module")
def dagger(work: Path) -> Path:
    """`odsd collect --mode dagger_sync --policy-wait` beside `odsd learn` (two processes)."""
    store = work / "dagger"
    log = work / "learn.log"
    collect = [
        "collect", "--mode", "dagger_sync", "--task", TASK, "--expert", EXPERT, "--num-envs", "8",
        "--episodes-per-iteration", "16", "--max-iterations", "3", "--policy-wait", "300",
        "--torch-threads", "1", "--store", store, "--durability", "process", "--seed", "1",
    ]  # fmt: skip
    with open(log, "wb") as out:
        collector = subprocess.Popen(
            [sys.executable, "-m", "odsd", *map(str, collect)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=env(),
        )  # fmt: skip
        learner = None
        try:
            # The learner reads the task from the run's run.json: start it once the run exists.
            runs = store / "runs"
            while collector.poll() is None and not list(runs.glob("*/run.json")):
                time.sleep(0.2)
            learner = subprocess.Popen(
                [sys.executable, "-m", "odsd", "learn", str(store), "--min-new-episodes", "16", "--steps", "300",
                 "--torch-threads", "1"],
                stdout=out, stderr=subprocess.STDOUT, env=env(),
            )  # fmt: skip
            _, stderr = collector.communicate(timeout=900)
        finally:
            for proc in (collector, learner):
                if proc is not None and proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    try:
                        proc.wait(timeout=120)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
    assert collector.returncode == 0, stderr[-3000:] + log.read_text()[-2000:]
    assert "no student newer than" not in stderr, stderr[-3000:]  # every wait was answered
    return store


def test_check_env_accepts_the_example() -> None:
    report = json.loads(ok(odsd("check-env", TASK, "--json")).stdout)
    assert report["ok"], report["checks"]
    assert report["spec"]["features"]["observation.state"]["shape"] == [3]
    assert report["spec"]["features"]["action"]["shape"] == [1]


def test_the_gymnasium_registration_path_works_too() -> None:
    """`gymnasium:<module>:<EnvId>`: Gymnasium imports the module (which registers the id)."""
    report = json.loads(ok(odsd("check-env", "gymnasium:pendulum_task:PendulumUpright-v0", "--json")).stdout)
    assert report["ok"], report["checks"]
    assert {c["name"]: c["status"] for c in report["checks"]}["success signal"] == "ok"
    assert report["spec"]["max_episode_steps"] == 200


def test_expert_demo_commits_successful_demonstrations(demos: Path) -> None:
    info = json.loads(ok(odsd("store", "inspect", demos, "--json")).stdout)
    assert info["episodes"] == 16


def test_dagger_sync_with_odsd_learn(dagger: Path) -> None:
    from odsd.store import EpisodeStore

    snap = EpisodeStore.open(dagger).snapshot()
    last: dict[int, set[int]] = {}
    for e in snap.entries:
        last.setdefault(e.meta.iteration, set()).add(e.meta.policy_version_last)
    assert sorted(last) == [0, 1, 2]
    # Iteration k ran with a student the learner published after the data up to iteration k-1
    # (an episode started before a boundary finishes under the new student).
    assert last[0] == {0} and min(last[1]) >= 1 and min(last[2]) >= 2


def test_eval_of_the_learned_student(dagger: Path) -> None:
    data = json.loads(
        ok(odsd("eval", "--policy", dagger / "policies", "--task", TASK, "--episodes", "8", "--json")).stdout
    )
    assert data["episodes"] == 8 and data["success_signal"] is True and data["policy_version"] >= 2
    assert 0.0 <= data["success_rate"] <= 1.0


@pytest.mark.lerobot
def test_export_lerobot_of_the_demonstrations(demos: Path, work: Path) -> None:
    """Pendulum's action has shape (1,): needs export-lerobot to handle 1-D features."""
    lerobot_dataset = pytest.importorskip("lerobot.datasets.lerobot_dataset")
    out = work / "lerobot"
    ok(odsd("export-lerobot", demos, out, "--repo-id", "me/pendulum"))
    ds = lerobot_dataset.LeRobotDataset("me/pendulum", root=out)
    assert ds.num_episodes == 16
    assert tuple(ds.meta.features["action"]["shape"]) == (1,)
    assert ds[0]["action"].numel() == 1  # LeRobot serves a (1,) feature as a scalar
