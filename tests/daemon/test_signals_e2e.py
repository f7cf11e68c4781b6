"""Real processes and real signals: SIGTERM at random moments, a second SIGTERM, SIGHUP.

The loop test is the acceptance test of docs/operations.md: ``odsd collect`` then ``odsd resume`` is
terminated at random moments (>= 20 times); afterwards no partial episode is visible, episode ids
are unique and the run's iteration / beta / policy-version sequence is exactly the one an
uninterrupted run with the same seed committed.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
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

from odsd.daemon.run_state import RunStateStore

MIN_SIGTERMS = 20


def newest_manifest(run_dir: Path) -> dict[str, Any]:
    return RunStateStore(run_dir).newest_complete().model_dump(mode="json")


def check_stopped(store: Path, proc_pid: int, incarnation: int, committed_before: int) -> dict[str, Any]:
    """After a clean exit: status stopped, lock released, and the shutdown manifest counts exactly
    the episodes the store holds for the run. Returns the status."""
    run_dir = store / "runs" / RUN_ID
    status = read_json(run_dir / "status.json")
    assert status is not None and status["pid"] == proc_pid, status
    assert status["state"] == "stopped", status
    assert not (run_dir / "lock").exists(), "the lock survived a clean exit"
    manifest = newest_manifest(run_dir)
    assert manifest["reason"] == "shutdown" and manifest["incarnation"] == incarnation
    episodes = [e for e in episodes_table(store) if e["run_id"] == RUN_ID]
    c = manifest["counters"]
    assert c["episodes_committed"] == len(episodes) >= committed_before
    assert c["iteration"] * EPISODES_PER_ITERATION + c["episodes_in_iteration"] == len(episodes)
    assert manifest["beta"] == status["beta"]
    return status


@pytest.mark.slow
def test_sigterm_at_random_moments_then_resume_matches_uninterrupted_run(
    tmp_path: Path, reference: list[dict[str, Any]], max_delay: float
) -> None:
    seed = int(os.environ.get("ODSD_TEST_SEED", time.time_ns() % 100_000))
    rng = random.Random(seed)
    store = tmp_path / "store"
    run_dir = store / "runs" / RUN_ID
    log = tmp_path / "odsd.log"
    args = collect_args(store)
    sigterms = 0
    incarnation = 0
    committed = 0
    finished = False
    while sigterms < MIN_SIGTERMS + 2:
        proc = spawn(*args, log=log)
        running = wait_running(proc, run_dir, log=log)
        if running is None:  # finished (or failed) before it reported running
            rc = proc.wait()
            assert rc == 0, f"seed {seed}: exit {rc}\n{log.read_text()[-3000:]}"
        else:
            assert running["incarnation"] == incarnation
            time.sleep(rng.uniform(0.0, max_delay))
            rc = terminate(proc)
            status = read_json(run_dir / "status.json") or {}
            if rc == -signal.SIGTERM and status.get("stop_reason") == "max_iterations":
                # Landed after the run had finished and restored the default handlers (exit path).
                rc = 0
            assert rc == 0, f"seed {seed}: SIGTERM gave exit {rc}\n{log.read_text()[-3000:]}"
        status = check_stopped(store, proc.pid, incarnation, committed)
        committed = status["counters"]["episodes_committed"]
        incarnation += 1
        args = resume_args(store)
        if status["stop_reason"] != "signal":
            assert status["stop_reason"] == "max_iterations", status
            finished = True
            break
        sigterms += 1
    if not finished:  # finish the run without interruption
        done = odsd(*args)
        assert done.returncode == 0, done.stderr[-3000:]
        status = read_json(run_dir / "status.json")
        assert status is not None and status["stop_reason"] == "max_iterations", status
    assert sigterms >= MIN_SIGTERMS, f"seed {seed}: only {sigterms} SIGTERMs landed before the run finished"
    assert_no_partial_episodes(store)
    got = episodes_table(store)
    assert_continues_like(reference, got, store)
    # Each incarnation committed under its own writer id.
    assert len({e["writer_id"] for e in got}) >= 2
    fsck = odsd("store", "fsck", store, "--json")
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr


def test_second_sigterm_aborts_but_never_publishes_a_partial_episode(
    tmp_path: Path, max_delay: float
) -> None:
    store = tmp_path / "store"
    run_dir = store / "runs" / RUN_ID
    log = tmp_path / "odsd.log"
    proc = spawn(*collect_args(store, max_iterations=500), log=log)
    assert wait_running(proc, run_dir, log=log) is not None
    time.sleep(max_delay)
    proc.send_signal(signal.SIGTERM)
    rc = terminate(proc)  # the second one
    assert rc == 0, log.read_text()[-3000:]
    status = read_json(run_dir / "status.json")
    assert status is not None and status["state"] == "stopped" and status["stop_reason"] == "signal"
    assert_no_partial_episodes(store)
    manifest = newest_manifest(run_dir)
    n = len(episodes_table(store))
    assert manifest["counters"]["episodes_committed"] == n
    assert manifest["counters"]["episodes_accepted"] == n  # dropped episodes are not counted
    # The run continues: every iteration up to the next boundary has exactly 6 episodes.
    target = manifest["counters"]["iteration"] + 1
    done = odsd(*resume_args(store, max_iterations=target))
    assert done.returncode == 0, done.stderr[-3000:]
    assert_no_partial_episodes(store)
    per_iteration = Counter(e["iteration"] for e in episodes_table(store))
    assert per_iteration == Counter(dict.fromkeys(range(target), EPISODES_PER_ITERATION))


def test_sighup_does_not_stop_the_run(tmp_path: Path) -> None:
    store = tmp_path / "store"
    run_dir = store / "runs" / RUN_ID
    log = tmp_path / "odsd.log"
    proc = spawn(*collect_args(store, max_iterations=500), log=log)
    assert wait_running(proc, run_dir, log=log) is not None
    for _ in range(3):
        proc.send_signal(signal.SIGHUP)
        time.sleep(0.3)
        assert proc.poll() is None, "SIGHUP stopped the collector"
    rc = terminate(proc)
    text = log.read_text()
    assert rc == 0, text[-3000:]
    assert "SIGHUP" in text
    status = read_json(run_dir / "status.json")
    assert status is not None and status["stop_reason"] == "signal"
    assert_no_partial_episodes(store)


def test_sigterm_before_the_collector_runs_leaves_the_store_usable(tmp_path: Path) -> None:
    """A SIGTERM during startup (torch import, env build) may kill the process by the signal,
    but it never leaves a lock that blocks the next start nor damages the store."""
    store = tmp_path / "store"
    log = tmp_path / "odsd.log"
    first = odsd(*collect_args(store, max_iterations=1))
    assert first.returncode == 0, first.stderr[-3000:]
    proc = spawn(*resume_args(store, max_iterations=2), log=log)
    time.sleep(0.3)
    rc = terminate(proc)
    assert rc in (0, -signal.SIGTERM), log.read_text()[-3000:]
    done = odsd(*resume_args(store, max_iterations=2))
    assert done.returncode == 0, done.stderr[-3000:]
    assert_no_partial_episodes(store)
    per_iteration = Counter(e["iteration"] for e in episodes_table(store))
    assert per_iteration == Counter(dict.fromkeys(range(2), EPISODES_PER_ITERATION))
