"""`odsd collect` / `odsd resume` / `odsd status` through the console script: the lock, the
status and metrics files, exit codes, and bad input (one line, non-zero code, nothing modified)."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from daemon_helpers import (
    MAX_ITERATIONS,
    RUN_ID,
    assert_one_line_error,
    collect_args,
    odsd,
    odsd_inprocess,
    read_json,
    resume_args,
    spawn,
    terminate,
    tree_digest,
    wait_running,
)
from test_status import parse_metrics

from odsd.daemon.run_state import MANIFEST, RunStateStore


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


# -- the lock ---------------------------------------------------------------------------------------


def test_second_start_of_a_running_run_exits_5_naming_the_pid(tmp_path: Path) -> None:
    store = tmp_path / "store"
    run_dir = store / "runs" / RUN_ID
    log = tmp_path / "odsd.log"
    prom = tmp_path / "textfile" / "odsd.prom"
    prom.parent.mkdir()  # node_exporter's textfile directory exists (a missing one is an error)
    proc = spawn(*collect_args(store, max_iterations=500), "--metrics-textfile", prom, log=log)
    try:
        running = wait_running(proc, run_dir, log=log)
        assert running is not None and running["pid"] == proc.pid
        lock = json.loads((run_dir / "lock").read_text())
        assert lock["pid"] == proc.pid and lock["host"] == socket.gethostname()
        # Live metrics and status while it runs.
        assert parse_metrics(prom.read_text())["odsd_up"] == 1.0
        st = odsd("status", store, "--run", RUN_ID, "--json")
        assert st.returncode == 0, st.stderr
        (row,) = json.loads(st.stdout)["runs"]
        assert row["state"] in ("running", "stopping") and row["pid"] == proc.pid
        assert row["heartbeat_age_s"] < 30

        for args in (collect_args(store, max_iterations=500), resume_args(store)):
            second = odsd(*args)
            assert second.returncode == 5, second.stderr
            line = assert_one_line_error(second)
            assert f"pid {proc.pid}" in line and "lock" in line
        assert proc.poll() is None, "the refused start disturbed the running one"
        assert json.loads((run_dir / "lock").read_text())["pid"] == proc.pid
    finally:
        rc = terminate(proc)
    assert rc == 0, log.read_text()[-3000:]
    assert not (run_dir / "lock").exists()
    v = parse_metrics(prom.read_text())
    assert v["odsd_up"] == 0.0 and v["odsd_episodes_committed_total"] >= 0


def test_stale_lock_is_taken_over_with_a_warning(store_copy: Path) -> None:
    run_dir = store_copy / "runs" / RUN_ID
    pid = dead_pid()
    (run_dir / "lock").write_text(json.dumps({"pid": pid, "host": socket.gethostname(), "started": "x"}))
    proc = odsd(*resume_args(store_copy))  # already at max_iterations: starts, stops at once
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"taking over stale lock {run_dir / 'lock'} (pid {pid} no longer holds it)" in proc.stderr
    assert not (run_dir / "lock").exists()
    assert read_json(run_dir / "status.json")["stop_reason"] == "max_iterations"


def test_lock_held_by_a_live_process_refuses_and_modifies_nothing(store_copy: Path) -> None:
    run_dir = store_copy / "runs" / RUN_ID
    script = (
        "import sys, time; from pathlib import Path; from odsd.daemon.lock import RunLock; "
        f"RunLock(Path({str(run_dir)!r})).acquire(); print('held', flush=True); time.sleep(60)"
    )
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        before = tree_digest(store_copy)
        proc = odsd(*resume_args(store_copy, max_iterations=MAX_ITERATIONS + 1))
        assert proc.returncode == 5
        assert f"pid {holder.pid}" in assert_one_line_error(proc)
        assert tree_digest(store_copy) == before
    finally:
        holder.kill()
        holder.wait()


def test_collect_refuses_an_existing_run_id(store_copy: Path) -> None:
    """Starting a run id that already has run state would restart it at iteration 0 in the same run."""
    before = tree_digest(store_copy)
    proc = odsd(*collect_args(store_copy, max_iterations=1))
    assert proc.returncode == 2
    line = assert_one_line_error(proc)
    assert "already exists" in line and "odsd resume" in line
    assert tree_digest(store_copy) == before


# -- status and metrics -----------------------------------------------------------------------------


def test_status_of_a_finished_run(reference_store: Path) -> None:
    proc = odsd("status", reference_store, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    (row,) = data["runs"]
    assert row["run_id"] == RUN_ID and row["state"] == "stopped" and row["stop_reason"] == "max_iterations"
    assert row["iteration"] == MAX_ITERATIONS and row["counters"]["episodes_committed"] == 72
    assert row["watermark"] == data["watermark"] and row["task"] == "reach"
    table = odsd("status", reference_store, env={"COLUMNS": "200"})
    assert table.returncode == 0
    assert RUN_ID in table.stdout and "stopped" in table.stdout


def test_status_reports_a_dead_process(store_copy: Path) -> None:
    path = store_copy / "runs" / RUN_ID / "status.json"
    status = json.loads(path.read_text())
    path.write_text(json.dumps({**status, "state": "running", "pid": dead_pid()}))
    (row,) = json.loads(odsd("status", store_copy, "--json").stdout)["runs"]
    assert row["state"] == "dead (process gone)"


def test_status_of_a_run_without_status_file(store_copy: Path) -> None:
    (store_copy / "runs" / "other").mkdir()
    rows = json.loads(odsd("status", store_copy, "--json").stdout)["runs"]
    assert {r["run_id"]: r["state"] for r in rows}["other"].startswith("unknown")


def test_metrics_textfile_after_a_bounded_run(store_copy: Path, tmp_path: Path) -> None:
    prom = tmp_path / "prom" / "odsd.prom"
    prom.parent.mkdir()
    proc = odsd(*resume_args(store_copy), "--metrics-textfile", prom)
    assert proc.returncode == 0, proc.stderr[-3000:]
    v = parse_metrics(prom.read_text())
    assert v["odsd_up"] == 0.0
    assert v["odsd_iteration"] == MAX_ITERATIONS
    assert v["odsd_episodes_committed_total"] == 72
    assert v["odsd_beta"] == pytest.approx(0.5**MAX_ITERATIONS)


# -- bad input ----------------------------------------------------------------------------------------


def damage_newest_manifest(store: Path) -> Path:
    states = RunStateStore(store / "runs" / RUN_ID)
    manifest = states.dir / f"{states.sequences()[-1]:08d}" / MANIFEST
    manifest.write_text(manifest.read_text()[:100])
    return manifest


@pytest.mark.parametrize(
    ("case", "code", "needle"),
    [
        ("missing-store", 3, "no such store"),
        ("store-is-a-file", 3, "no such store"),
        ("not-a-store", 3, "not an odsd store"),
        ("damaged-store-manifest", 4, "odsd.json"),
        ("missing-run", 2, "no such run"),
        ("no-runs", 2, "no run"),
        ("no-manifest", 2, "no complete run-state manifest"),
        ("corrupt-manifest", 2, "damaged run-state manifest"),
        ("config-changes-task", 2, "resume cannot change task"),
        ("set-changes-seed", 2, "resume cannot change seed"),
        ("set-changes-beta", 2, "resume cannot change beta"),
        ("unknown-config-key", 2, "nonsense"),
    ],
)
def test_resume_bad_input_is_one_line_nonzero_and_modifies_nothing(
    store_copy: Path, tmp_path: Path, case: str, code: int, needle: str
) -> None:
    run_dir = store_copy / "runs" / RUN_ID
    target, extra = store_copy, []
    if case == "missing-store":
        target = tmp_path / "nope"
    elif case == "store-is-a-file":
        target = tmp_path / "file"
        target.write_text("x")
    elif case == "not-a-store":
        target = tmp_path / "empty"
        target.mkdir()
    elif case == "damaged-store-manifest":
        (store_copy / "odsd.json").write_text("{")
    elif case == "missing-run":
        extra = ["--run", "nope"]
    elif case == "no-runs":
        shutil.rmtree(store_copy / "runs")
    elif case == "no-manifest":
        shutil.rmtree(run_dir / "state")
    elif case == "corrupt-manifest":
        damage_newest_manifest(store_copy)
    elif case == "config-changes-task":
        cfg = tmp_path / "run.toml"
        cfg.write_text('task = "pick_place"\n')
        extra = ["--config", cfg]
    elif case == "set-changes-seed":
        extra = ["--set", "seed=4"]
    elif case == "set-changes-beta":
        extra = ["--set", "beta.init_beta=0.5"]
    elif case == "unknown-config-key":
        extra = ["--set", "nonsense=1"]
    args = ["resume", target] + ([] if case in ("missing-run", "no-runs") else ["--run", RUN_ID])
    before = tree_digest(tmp_path)
    proc = odsd_inprocess(*args, "--max-iterations", MAX_ITERATIONS + 2, *extra)
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    line = assert_one_line_error(proc)
    assert needle in line, line
    assert "Warning" not in proc.stderr, proc.stderr
    assert tree_digest(tmp_path) == before


def test_status_bad_input(tmp_path: Path, reference_store: Path) -> None:
    missing = odsd_inprocess("status", tmp_path / "nope")
    assert missing.returncode == 3
    assert "no such store" in assert_one_line_error(missing)
    run = odsd_inprocess("status", reference_store, "--run", "nope")
    assert run.returncode == 2
    assert "no such run" in assert_one_line_error(run)


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    for args in (["resume"], ["collect", "--num-envs", "zero"], ["resume", tmp_path, "--bogus"]):
        proc = odsd_inprocess(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert "Traceback" not in proc.stderr
    assert not any(tmp_path.iterdir())


def test_resume_after_interruption_exit_codes(tmp_path: Path) -> None:
    """A run stopped by SIGTERM exits 0 and `odsd resume` without --run picks it up."""
    store = tmp_path / "store"
    log = tmp_path / "odsd.log"
    proc = spawn(*collect_args(store, max_iterations=500), log=log)
    assert wait_running(proc, store / "runs" / RUN_ID, log=log) is not None
    time.sleep(0.2)
    assert terminate(proc, signal.SIGINT) == 0
    done = odsd("resume", store, "--max-iterations", 1)
    assert done.returncode == 0, done.stderr[-3000:]
    assert read_json(store / "runs" / RUN_ID / "status.json")["incarnation"] == 1


def test_metrics_textfile_of_a_real_run_carries_the_metrics_record(tmp_path: Path) -> None:
    """The text file of a real run parses and carries the figures of metrics.jsonl (expert latency,
    invalid-label rate, disagreement, commit latency, visibility lag). Hostile label values are
    covered in test_status.py (the CLI now refuses such run ids)."""
    from prometheus_client.parser import text_string_to_metric_families

    store, prom, run_id = tmp_path / "store", tmp_path / "prom" / "odsd.prom", "weird.run_1"
    prom.parent.mkdir()
    proc = odsd(*collect_args(store, run_id=run_id, max_iterations=2), "--metrics-textfile", prom)
    assert proc.returncode == 0, proc.stderr[-3000:]
    samples = {s.name: s for f in text_string_to_metric_families(prom.read_text()) for s in f.samples}
    assert samples["odsd_iteration"].labels == {"run_id": run_id, "task": "reach", "mode": "dagger_sync"}
    for name in (
        "odsd_expert_latency_p50_seconds",
        "odsd_expert_latency_p95_seconds",
        "odsd_invalid_label_ratio",
        "odsd_disagreement_l2",
        "odsd_commit_latency_p95_seconds",
        "odsd_visibility_lag_p50_seconds",
        "odsd_visibility_lag_p95_seconds",
    ):
        assert name in samples, sorted(samples)
        assert samples[name].value >= 0
    assert samples["odsd_visibility_lag_p95_seconds"].value > 0
    assert samples["odsd_episodes_committed_total"].value == 12
