"""RunLock: one live process owns a run; a lock left by a dead process is taken over."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from odsd.daemon.errors import LockHeldError, RunLockIOError
from odsd.daemon.lock import RunLock, pid_alive


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def write_lock(run_dir: Path, pid: int, host: str | None = None) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "lock"
    path.write_text(
        json.dumps({"pid": pid, "host": host or socket.gethostname(), "started": "t0", "command": "x"})
    )
    return path


def test_acquire_writes_owner_and_release_removes_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "r1"
    with RunLock(run_dir) as lock:
        assert lock.held
        info = json.loads((run_dir / "lock").read_text())
        assert info["pid"] == os.getpid()
        assert info["host"] == socket.gethostname()
        assert info["started"]
    assert not (run_dir / "lock").exists()
    assert not lock.held


def hold_lock_in_child(run_dir: Path) -> subprocess.Popen[str]:
    """A child process that takes the run lock and keeps it until killed."""
    script = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from odsd.daemon.lock import RunLock
        RunLock(Path({str(run_dir)!r})).acquire()
        print("held", flush=True)
        time.sleep(60)
        """
    )
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def test_lock_held_by_a_live_process_is_refused_with_its_pid(tmp_path: Path) -> None:
    run_dir = tmp_path / "r1"
    holder = hold_lock_in_child(run_dir)
    try:
        path = run_dir / "lock"
        before = path.read_bytes()
        assert json.loads(before)["pid"] == holder.pid
        with pytest.raises(LockHeldError) as err:
            RunLock(run_dir).acquire()
        assert err.value.exit_code == 5
        message = str(err.value)
        assert f"pid {holder.pid}" in message and str(path) in message
        assert "\n" not in message
        assert path.read_bytes() == before  # untouched
    finally:
        holder.kill()
        holder.wait()


def test_lock_of_a_sigkilled_holder_is_taken_over(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The kernel lock dies with its holder: a SIGKILLed owner's lock is free at once."""
    holder = hold_lock_in_child(tmp_path)
    holder.kill()
    holder.wait()
    with caplog.at_level(logging.WARNING, logger="odsd.daemon"), RunLock(tmp_path):
        assert json.loads((tmp_path / "lock").read_text())["pid"] == os.getpid()
    assert any("stale lock" in r.getMessage() and str(holder.pid) in r.getMessage() for r in caplog.records)


def test_lock_naming_a_live_pid_that_does_not_hold_it_is_taken_over(tmp_path: Path) -> None:
    """The pid in the file is information: a reused pid (here: a live sleeper that never took the
    lock) does not keep a run locked."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        write_lock(tmp_path, sleeper.pid)
        with RunLock(tmp_path) as lock:
            assert lock.held
            assert json.loads((tmp_path / "lock").read_text())["pid"] == os.getpid()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_second_lock_in_the_same_process_is_refused(tmp_path: Path) -> None:
    with RunLock(tmp_path), pytest.raises(LockHeldError, match=f"pid {os.getpid()}"):
        RunLock(tmp_path).acquire()


def test_stale_lock_of_a_dead_pid_is_taken_over_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pid = dead_pid()
    write_lock(tmp_path, pid)
    with caplog.at_level(logging.WARNING, logger="odsd.daemon"), RunLock(tmp_path):
        assert json.loads((tmp_path / "lock").read_text())["pid"] == os.getpid()
    assert any("stale lock" in r.getMessage() and str(pid) in r.getMessage() for r in caplog.records)
    assert not list(tmp_path.glob("lock.stale-*"))


def test_lock_of_another_host_is_never_taken_over(tmp_path: Path) -> None:
    write_lock(tmp_path, dead_pid(), host="some-other-host")
    with pytest.raises(LockHeldError, match="some-other-host"):
        RunLock(tmp_path).acquire()


@pytest.mark.parametrize(
    "content", [b"", b"garbage\x00\xff", b"{}", b'{"pid": 12}', b"[1, 2]", b'{"host": "h"'], ids=repr
)
def test_unreadable_lock_file_is_taken_over_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes
) -> None:
    """An empty, garbled or field-less lock file (e.g. a process killed between creating and
    writing it) holds no kernel lock: it is stale, taken over with a warning naming the file."""
    (tmp_path / "lock").write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="odsd.daemon"), RunLock(tmp_path):
        assert json.loads((tmp_path / "lock").read_text())["pid"] == os.getpid()
    if content:
        assert any("stale lock" in r.getMessage() and "lock" in r.getMessage() for r in caplog.records)
    assert not (tmp_path / "lock").exists()


def test_release_does_not_remove_a_lock_file_that_replaced_its_own(tmp_path: Path) -> None:
    lock = RunLock(tmp_path)
    lock.acquire()
    replacement = tmp_path / "other"
    replacement.write_text("someone else's")
    os.replace(replacement, tmp_path / "lock")
    lock.release()
    assert (tmp_path / "lock").read_text() == "someone else's"
    assert not lock.held


def test_a_lock_file_that_cannot_be_created_is_one_line_exit_3(tmp_path: Path) -> None:
    (tmp_path / "runs").write_text("a regular file where the run directory should be")
    with pytest.raises(RunLockIOError) as err:
        RunLock(tmp_path / "runs" / "r1").acquire()
    assert err.value.exit_code == 3 and "\n" not in str(err.value)


def test_pid_alive() -> None:
    assert pid_alive(os.getpid())
    assert not pid_alive(dead_pid())


def test_concurrent_acquire_has_exactly_one_winner(tmp_path: Path) -> None:
    """Eight processes race for the same run lock: one wins, seven get LockHeldError."""
    script = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from odsd.daemon.lock import RunLock
        from odsd.daemon.errors import LockHeldError
        go = Path({str(tmp_path / "go")!r})
        while not go.exists():
            time.sleep(0.001)
        try:
            RunLock(Path({str(tmp_path / "run")!r})).acquire()
        except LockHeldError:
            print("held", flush=True)
            sys.exit(5)
        print("won", flush=True)
        time.sleep(2)
        """
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True) for _ in range(8)
    ]
    (tmp_path / "go").touch()
    outs = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert sorted(outs) == ["held"] * 7 + ["won"], outs
    assert sorted(p.returncode for p in procs) == [0] + [5] * 7


def _takeover_worker(
    run_dir: Path, marker: Path, start: Any, done: Any, rounds: int, results: Any, index: int
) -> None:
    """One contender: each round, wait for the stale lock, try to take it over, record holding."""
    holds = violations = 0
    for _round in range(rounds):
        start.wait()
        lock = RunLock(run_dir)
        try:
            lock.acquire()
        except LockHeldError:
            pass
        else:
            holds += 1
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                violations += 1
            else:
                os.close(fd)
                time.sleep(0.003)
                marker.unlink()
            lock.release()
        done.wait()
    results[index] = (holds, violations)


def test_concurrent_stale_takeover_never_has_two_holders(tmp_path: Path) -> None:
    """Six processes take over the same stale lock (left by a dead pid) at once, 200 rounds: each
    holder creates an O_EXCL marker while it holds the lock, so a second simultaneous holder
    fails to create it. Never two holders; every round the stale lock is taken over by someone."""
    ctx = multiprocessing.get_context("fork")
    procs_n, rounds = 6, 200
    run_dir, marker = tmp_path / "run", tmp_path / "holding"
    start, done = ctx.Barrier(procs_n + 1), ctx.Barrier(procs_n + 1)
    manager = ctx.Manager()
    results = manager.dict()
    workers = [
        ctx.Process(target=_takeover_worker, args=(run_dir, marker, start, done, rounds, results, i))
        for i in range(procs_n)
    ]
    for worker in workers:
        worker.start()
    stale = dead_pid()
    try:
        for _round in range(rounds):
            write_lock(run_dir, stale)
            start.wait(timeout=60)
            done.wait(timeout=60)
    finally:
        for worker in workers:
            worker.join(timeout=60)
            if worker.is_alive():
                worker.kill()
    assert [w.exitcode for w in workers] == [0] * procs_n
    outcomes = list(results.values())
    manager.shutdown()
    holds = sum(h for h, _ in outcomes)
    violations = sum(v for _, v in outcomes)
    assert violations == 0, f"two holders at once in {violations} of {rounds} rounds"
    assert holds >= rounds
