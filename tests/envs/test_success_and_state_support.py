"""Optional env capabilities: no success signal is a warning, no simulator state is `unsupported`;
neither is a failure (`odsd check-env` exits 0). `odsd eval` on such an env says so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("gymnasium")
pytestmark = pytest.mark.gym

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pendulum"


def odsd(*args: object, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(pythonpath), env.get("PYTHONPATH", "")) if p)
    return subprocess.run(
        [sys.executable, "-m", "odsd", *map(str, args)], capture_output=True, text=True, timeout=300, env=env
    )


def checks(proc: subprocess.CompletedProcess) -> dict[str, dict]:
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["ok"] is True
    return {c["name"]: c for c in report["checks"]}


def test_check_env_pendulum_state_unsupported_and_no_success_signal() -> None:
    c = checks(odsd("check-env", "gymnasium:Pendulum-v1", "--json"))
    assert c["state round trip"]["status"] == "unsupported" and c["state round trip"]["ok"]
    assert c["success signal"]["status"] == "warning" and "no success signal" in c["success signal"]["detail"]
    table = odsd("check-env", "gymnasium:Pendulum-v1")
    assert table.returncode == 0 and "FAIL" not in table.stdout
    assert "unsupported" in table.stdout and "warning" in table.stdout


def test_check_env_builtin_and_wrapped_pendulum_report_success() -> None:
    assert checks(odsd("check-env", "reach", "--json"))["success signal"]["status"] == "ok"
    wrapped = checks(odsd("check-env", "pendulum_task:make_env", "--json", pythonpath=EXAMPLE))
    assert wrapped["success signal"]["status"] == "ok"


def test_eval_on_a_task_without_planner_or_success_signal(tmp_path: Path) -> None:
    """`odsd eval` needs no `--expert none` on a task without a planner, and warns that success is 0
    by construction when the env reports none."""
    from odsd.collect.student import publish_initial_student
    from odsd.envs import make_env

    env = make_env("gymnasium:Pendulum-v1", num_envs=1)
    publish_initial_student(tmp_path / "policies", env.spec, seed=0)
    env.close()
    args = ("eval", "--policy", tmp_path / "policies", "--task", "gymnasium:Pendulum-v1", "--episodes", "2")
    proc = odsd(*args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "reports no success signal" in proc.stderr
    assert "student-only success on gymnasium:Pendulum-v1: 0.0%" in proc.stdout
    data = json.loads(odsd(*args, "--json").stdout)
    assert data["success_signal"] is False and data["episodes"] == 2
