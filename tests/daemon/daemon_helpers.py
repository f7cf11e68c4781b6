"""Helpers for the daemon tests: run the real ``odsd`` console script, wait for its heartbeat,
and check a store's episodes against the invariants of docs/architecture.md (transition order, commit protocol, resume)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from collections import Counter
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import numpy as np

from odsd.collect.beta import BetaSchedule
from odsd.store import EpisodeStore

ODSD = [sys.executable, "-m", "odsd"]

# Small and fast: the reach task, 4 rows, 6 committed episodes per iteration.
EPISODES_PER_ITERATION = 6
MAX_ITERATIONS = 12
SEED = 3
RUN_ID = "r1"


def collect_args(store: Path, *, run_id: str = RUN_ID, max_iterations: int = MAX_ITERATIONS) -> list[str]:
    return [
        "collect",
        "--mode",
        "dagger_sync",
        "--task",
        "reach",
        "--num-envs",
        "4",
        "--episodes-per-iteration",
        str(EPISODES_PER_ITERATION),
        "--max-iterations",
        str(max_iterations),
        "--store",
        str(store),
        "--run-id",
        run_id,
        "--durability",
        "process",
        "--seed",
        str(SEED),
    ]


def resume_args(store: Path, *, run_id: str = RUN_ID, max_iterations: int = MAX_ITERATIONS) -> list[str]:
    return ["resume", str(store), "--run", run_id, "--max-iterations", str(max_iterations)]


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")}
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra or {})
    return env


def odsd(*args: Any, timeout: float = 180, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*ODSD, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=child_env(env)
    )


def odsd_inprocess(*args: Any) -> subprocess.CompletedProcess:
    """``odsd ARGS`` through ``odsd.cli.main`` in this process (no 2 s torch import); for commands
    that fail before collecting. Warnings are recorded into stderr."""
    from odsd.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            main([str(a) for a in args])
            code: Any = 0
        except SystemExit as exc:
            code = exc.code
    stderr = err.getvalue() + "".join(f"{w.category.__name__}: {w.message}\n" for w in caught)
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), stderr)


def spawn(
    *args: Any, env: dict[str, str] | None = None, log: Path | None = None, new_session: bool = False
) -> subprocess.Popen:
    """Start odsd in the background; stdout+stderr go to ``log`` (a file: no pipe can fill up).

    ``new_session``: in a session of its own (id = its pid), so that every process it starts can be
    found afterwards (:func:`odsd.testing.processes.session_members`)."""
    out = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115
    try:
        return subprocess.Popen(
            [*ODSD, *map(str, args)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=child_env(env),
            start_new_session=new_session,
        )
    finally:
        if log is not None:
            out.close()


def assert_one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("odsd: error:")]
    assert len(errors) == 1, f"expected one `odsd: error:` line, got stderr={proc.stderr!r}"
    return errors[0]


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def wait_running(
    proc: subprocess.Popen, run_dir: Path, *, timeout: float = 60, log: Path | None = None
) -> dict[str, Any] | None:
    """Wait until ``status.json`` says this process is running; None if it exited first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = read_json(run_dir / "status.json")
        if status is not None and status.get("pid") == proc.pid and status.get("state") == "running":
            return status
        if proc.poll() is not None:
            return None
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    tail = log.read_text()[-3000:] if log is not None and log.exists() else ""
    raise AssertionError(f"odsd pid {proc.pid} did not report running within {timeout}s\n{tail}")


def terminate(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
    proc.send_signal(sig)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"odsd pid {proc.pid} did not exit within {timeout}s of signal {sig}") from None


def tree_digest(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under ``root`` (to prove nothing was modified)."""
    out: dict[str, str] = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


# -- store invariants ------------------------------------------------------------------------------


def episodes_table(store: Path) -> list[dict[str, Any]]:
    """Per committed episode, in episode-id order: id, writer, iteration, beta, policy versions, length."""
    snap = EpisodeStore.open(store).snapshot()
    return [
        {
            "episode_id": e.episode_id,
            "writer_id": e.meta.writer_id,
            "run_id": e.meta.run_id,
            "iteration": e.meta.iteration,
            "beta": e.meta.beta,
            "policy_version_first": e.meta.policy_version_first,
            "policy_version_last": e.meta.policy_version_last,
            "length": e.meta.length,
        }
        for e in snap.entries
    ]


def assert_no_partial_episodes(store: Path) -> int:
    """Every visible episode is whole: steps 0..len-1, done only (and always) on its last frame."""
    snap = EpisodeStore.open(store).snapshot()
    ids = [e.episode_id for e in snap.entries]
    assert len(ids) == len(set(ids)), "duplicate episode ids"
    assert ids == sorted(ids)
    if not ids:
        return 0
    step = snap.column("episode_step")
    done = snap.column("terminated").astype(bool) | snap.column("truncated").astype(bool)
    assert len(step) == snap.num_frames
    for i, e in enumerate(snap.entries):
        a, b = int(snap.starts[i]), int(snap.starts[i] + snap.lengths[i])
        assert e.meta.length == b - a
        np.testing.assert_array_equal(step[a:b], np.arange(b - a), err_msg=f"episode {e.episode_id}")
        assert done[b - 1], f"episode {e.episode_id}: last frame is neither terminated nor truncated"
        assert not done[a : b - 1].any(), f"episode {e.episode_id}: done before its last frame"
        assert e.meta.terminated or e.meta.truncated
    return len(ids)


def frame_betas(store: Path) -> list[np.ndarray]:
    snap = EpisodeStore.open(store).snapshot()
    col = snap.column("beta")
    return [
        col[int(snap.starts[i]) : int(snap.starts[i] + snap.lengths[i])] for i in range(snap.num_episodes)
    ]


def assert_continues_like(reference: list[dict[str, Any]], got: list[dict[str, Any]], store: Path) -> None:
    """The interrupted run's committed episodes continue the uninterrupted one's schedule exactly.

    Episodes' contents differ (each incarnation reseeds its envs and restarts interrupted
    episodes), so what must match is the sequence the run is defined by: per committed episode in
    id order its iteration, beta (the iteration's) and policy versions, with exactly
    ``episodes_per_iteration`` episodes per iteration. Frames record the beta in force at their
    own step: never above the episode's iteration's start, never increasing.
    """
    schedule = BetaSchedule()
    per_iter = Counter(e["iteration"] for e in got)
    assert per_iter == Counter({k: EPISODES_PER_ITERATION for k in range(MAX_ITERATIONS)}), per_iter
    for key in ("iteration", "beta", "policy_version_first", "policy_version_last", "run_id"):
        assert [e[key] for e in got] == [e[key] for e in reference], key
    for e in got:
        assert e["beta"] == schedule.value(e["iteration"])
    for betas, e in zip(frame_betas(store), got, strict=True):
        assert (np.diff(betas) <= 0).all()
        assert float(betas[-1]) >= float(np.float32(e["beta"]))
