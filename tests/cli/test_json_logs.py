"""`--json-logs`: every line the process writes, on stdout and stderr, is a JSON object."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

from cli_helpers import ODSD, child_env, odsd, reach_collect_args


def json_lines(text: str) -> list[dict]:
    records = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"not a JSON line: {line!r}") from None
        assert isinstance(records[-1], dict), line
    return records


def running(store: Path) -> bool:
    for path in (store / "runs").glob("*/status.json"):
        try:
            return json.loads(path.read_text())["state"] == "running"
        except (OSError, ValueError):
            return False
    return False


def test_a_run_interrupted_by_sigint_writes_only_json_lines(tmp_path: Path) -> None:
    """A fresh store (the "no student snapshot" warning), a SIGINT ("finishing the step…") and the
    run summary: all JSON lines, on both streams."""
    store = tmp_path / "store"
    args = reach_collect_args(store, "--json-logs", "--set", "metrics_interval_s=0.2", iterations=10_000)
    proc = subprocess.Popen(
        [*ODSD, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env()
    )
    try:
        deadline = time.monotonic() + 120
        while not running(store) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-3000:]
    logs = json_lines(err)
    kinds = {r.get("kind") for r in logs}
    assert {"log", "rolling"} <= kinds, kinds
    messages = [r["message"] for r in logs if r["kind"] == "log"]
    assert any("no student snapshot" in m for m in messages), messages
    assert any(m.startswith("SIGINT: finishing") for m in messages), messages
    assert all(r["level"] in ("info", "warning") for r in logs if r["kind"] == "log")
    (summary,) = json_lines(out)
    assert summary["kind"] == "summary" and summary["stop_reason"] == "signal"
    assert summary["episodes_committed"] >= 0 and summary["store"] == str(store)


def test_an_error_with_json_logs_is_a_json_line(tmp_path: Path) -> None:
    proc = odsd(*reach_collect_args(tmp_path / "store", "--json-logs", "--set", "num_envs=0"))
    assert proc.returncode == 2, proc.stderr
    (error,) = json_lines(proc.stderr)
    assert error["kind"] == "error" and error["exit_code"] == 2 and "num_envs" in error["message"]
    assert proc.stdout == ""
