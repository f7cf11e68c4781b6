"""RunLock: one live process owns a run; a lock left by a dead process is taken over."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from odsd.daemon.errors import LockHeldError
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


def test_lock_held_by_a_live_process_is_refused_with_its_pid(tmp_path: Path) -> None:
    run_dir = tmp_path / "r1"
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        path = write_lock(run_dir, holder.pid)
        before = path.read_bytes()
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


def test_unreadable_lock_file_is_refused_naming_the_file(tmp_path: Path) -> None:
    """An empty/garbled lock (e.g. a process killed between creating and writing it) is not
    guessed about: the error names the lock file so an operator can check and remove it."""
    (tmp_path / "lock").write_text("")
    with pytest.raises(LockHeldError) as err:
        RunLock(tmp_path).acquire()
    assert str(tmp_path / "lock") in str(err.value)


def test_release_does_not_remove_a_lock_someone_else_took_over(tmp_path: Path) -> None:
    lock = RunLock(tmp_path)
    lock.acquire()
    write_lock(tmp_path, os.getpid() + 1_000_000)
    lock.release()
    assert (tmp_path / "lock").exists()


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
