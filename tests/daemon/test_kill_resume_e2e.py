"""SIGKILL at random moments: the store stays consistent, committed work is never lost or
corrupted, and ``odsd resume`` continues from the newest complete run-state manifest (plus the
episodes committed after it), taking over the dead process's lock."""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from daemon_helpers import (
    EPISODES_PER_ITERATION,
    RUN_ID,
    assert_continues_like,
    assert_no_partial_episodes,
    collect_args,
    episodes_table,
    odsd,
    read_json,
    resume_args,
    spawn,
    terminate,
    wait_running,
)

from odsd.daemon.run_state import COMPLETE, MANIFEST, RunStateStore
from odsd.testing.processes import kill_session, session_members, wait_session_gone

KILLS = 10


def wait_first_manifest(proc, run_dir: Path, timeout: float = 120) -> None:
    states = RunStateStore(run_dir)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if any((states.dir / f"{s:08d}" / COMPLETE).exists() for s in states.sequences()):
            return
        time.sleep(0.02)
    raise AssertionError("the first run-state manifest never appeared")


def sigkill_leaving_nothing(proc) -> None:
    """SIGKILL the collector alone (not its group) and assert no process of its session survives."""
    try:
        rc = terminate(proc, signal.SIGKILL)
        assert rc == -signal.SIGKILL
        survivors = wait_session_gone(proc.pid)
        assert survivors == {}, f"processes of the killed run survived it: {survivors}"
    finally:
        kill_session(proc.pid)


def wait_writer_starting(proc, timeout: float = 120) -> bool:
    """Wait until the collector has started its writer child (a spawned multiprocessing child)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        members = session_members(proc.pid)
        if any("--multiprocessing-fork" in cmd for pid, cmd in members.items() if pid != proc.pid):
            return True
        time.sleep(0.005)
    return False


@pytest.mark.slow
def test_sigkill_at_any_moment_of_start_up_and_run_leaves_no_process_behind(tmp_path: Path) -> None:
    """``odsd collect`` SIGKILLed just as its writer process starts, and at random moments of its
    start-up and run: no process of the run (writer, resource tracker) outlives it."""
    seed = int(os.environ.get("ODSD_TEST_SEED", time.time_ns() % 100_000))
    rng = random.Random(seed)
    store = tmp_path / "store"
    moments: list[float | None] = [None, *(rng.uniform(0.0, 8.0) for _ in range(5))]
    for i, delay in enumerate(moments):
        args = collect_args(store, run_id=f"k{i}", max_iterations=100_000)  # still running when killed
        proc = spawn(*args, log=tmp_path / "odsd.log", new_session=True)
        if delay is None:
            assert wait_writer_starting(proc), (tmp_path / "odsd.log").read_text()[-3000:]
        else:
            time.sleep(delay)
        if proc.poll() is None:
            sigkill_leaving_nothing(proc)
        else:
            kill_session(proc.pid)
            raise AssertionError(f"seed {seed}: the run ended before its kill at {delay} s")
    assert_no_partial_episodes(store)


@pytest.mark.slow
def test_sigkill_at_random_moments_store_stays_consistent_and_resume_continues(
    tmp_path: Path, reference: list[dict[str, Any]], max_delay: float
) -> None:
    seed = int(os.environ.get("ODSD_TEST_SEED", time.time_ns() % 100_000))
    rng = random.Random(seed)
    store = tmp_path / "store"
    run_dir = store / "runs" / RUN_ID
    states = RunStateStore(run_dir)
    log = tmp_path / "odsd.log"

    # Incarnation 0 is killed only once it has a manifest (before that there is nothing to resume).
    proc = spawn(*collect_args(store), log=log, new_session=True)
    wait_first_manifest(proc, run_dir)
    time.sleep(rng.uniform(0.0, max_delay))
    kills = 0
    finished = False
    prev: list[dict[str, Any]] = []
    for cycle in range(KILLS + 1):
        if proc.poll() is None:
            sigkill_leaving_nothing(proc)
            kills += 1
        else:
            assert proc.returncode == 0, log.read_text()[-3000:]
            if read_json(run_dir / "status.json")["stop_reason"] == "max_iterations":
                finished = True
                break
        # Consistent after every kill: whole episodes, unique ids, nothing committed lost.
        n = assert_no_partial_episodes(store)
        table = episodes_table(store)
        assert table[: len(prev)] == prev, "a committed episode was lost or changed"
        prev = table
        manifest = states.newest_complete()
        # Resume must count the manifest's episodes plus the ones committed after it.
        expected_iteration = n // EPISODES_PER_ITERATION
        assert manifest.counters.episodes_committed <= n
        if cycle == 3:
            # A kill between manifest.json and COMPLETE: the half-written manifest is skipped.
            torn = states.dir / f"{states.next_sequence():08d}"
            torn.mkdir()
            (torn / MANIFEST).write_text(json.dumps({"run_id": RUN_ID, "sequence": 999})[:20])
        text_before = log.read_text()
        stale = (run_dir / "lock").exists()  # left by a process killed after taking it
        proc = spawn(*resume_args(store), log=log, new_session=True)
        if rng.random() < 0.3:
            time.sleep(rng.uniform(0.0, 3.0))  # kill during startup / restore
            continue
        running = wait_running(proc, run_dir, log=log)
        if running is None:
            continue
        assert running["incarnation"] == manifest.incarnation + 1
        assert expected_iteration <= running["iteration"] <= expected_iteration + 1, (running, n)
        assert running["counters"]["episodes_committed"] >= n
        new_log = log.read_text()[len(text_before) :]
        assert "Traceback" not in new_log
        if stale:
            assert "taking over stale lock" in new_log, new_log[-2000:]
        if cycle == 3:
            assert "skipping incomplete run-state manifest" in new_log
        time.sleep(rng.uniform(0.0, max_delay))
    if not finished:
        if proc.poll() is None:
            sigkill_leaving_nothing(proc)
            kills += 1
        done = odsd(*resume_args(store), timeout=400)
        assert done.returncode == 0, done.stderr[-3000:]
    assert kills >= KILLS // 2, f"seed {seed}: only {kills} kills landed"
    assert not (run_dir / "lock").exists()
    assert_no_partial_episodes(store)
    assert_continues_like(reference, episodes_table(store), store)
    fsck = odsd("store", "fsck", store, "--json")
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
