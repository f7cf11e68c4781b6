"""sd_notify without systemd: datagrams on a test socket, watchdog interval, and a real process."""

from __future__ import annotations

import itertools
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_helpers import RUN_ID, collect_args, read_json, spawn, terminate, wait_running

from odsd.daemon.notify import SystemdNotifier


@pytest.fixture
def notify_socket() -> Iterator[tuple[socket.socket, str]]:
    # AF_UNIX paths are limited to ~107 bytes: pytest's tmp_path can be longer.
    with tempfile.TemporaryDirectory(prefix="odsd-n") as d:
        path = os.path.join(d, "notify.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        sock.settimeout(5)
        try:
            yield sock, path
        finally:
            sock.close()


def drain(sock: socket.socket, timeout: float = 0.2) -> list[str]:
    out: list[str] = []
    sock.settimeout(timeout)
    while True:
        try:
            out.append(sock.recv(4096).decode())
        except (TimeoutError, BlockingIOError):
            return out


def test_disabled_without_notify_socket() -> None:
    n = SystemdNotifier({})
    assert not n.enabled and n.watchdog_interval_s is None
    n.ready("x")
    n.status("x")
    n.watchdog()
    n.stopping()
    n.close()


def test_messages_on_a_socket(notify_socket: tuple[socket.socket, str]) -> None:
    sock, path = notify_socket
    n = SystemdNotifier({"NOTIFY_SOCKET": path})
    assert n.enabled
    n.ready("collecting run r1")
    assert sock.recv(4096) == b"READY=1\nSTATUS=collecting run r1"
    n.ready()
    assert sock.recv(4096) == b"READY=1"
    n.status("iteration 3")
    assert sock.recv(4096) == b"STATUS=iteration 3"
    n.stopping()
    assert sock.recv(4096) == b"STOPPING=1"
    n.watchdog()  # no WATCHDOG_USEC: no pings
    assert drain(sock) == []
    n.close()


def test_abstract_socket_address() -> None:
    name = f"odsd-test-{os.getpid()}-{time.monotonic_ns()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(5)
    try:
        n = SystemdNotifier({"NOTIFY_SOCKET": "@" + name})
        n.ready()
        assert sock.recv(4096) == b"READY=1"
    finally:
        sock.close()


def test_watchdog_pings_at_half_the_interval(notify_socket: tuple[socket.socket, str]) -> None:
    sock, path = notify_socket
    n = SystemdNotifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "2000000"})
    assert n.watchdog_interval_s == pytest.approx(1.0)
    n.watchdog(now=100.0)
    n.watchdog(now=100.5)  # too early
    n.watchdog(now=101.0)
    n.watchdog(now=101.9)  # too early
    n.watchdog(now=102.1)
    assert drain(sock) == ["WATCHDOG=1"] * 3


def test_watchdog_for_another_pid_is_ignored(notify_socket: tuple[socket.socket, str]) -> None:
    _sock, path = notify_socket
    other = SystemdNotifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "1000", "WATCHDOG_PID": "1"})
    assert other.watchdog_interval_s is None
    ours = SystemdNotifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "1000", "WATCHDOG_PID": str(os.getpid())})
    assert ours.watchdog_interval_s == pytest.approx(0.0005)


def test_vanished_socket_is_not_an_error(tmp_path: Path) -> None:
    n = SystemdNotifier({"NOTIFY_SOCKET": str(tmp_path / "gone.sock")})
    n.ready()
    n.stopping()
    n.close()


def test_collect_process_speaks_sd_notify(tmp_path: Path, notify_socket: tuple[socket.socket, str]) -> None:
    """READY=1 once running, STATUS= updates, WATCHDOG=1 pings at WATCHDOG_USEC/2, STOPPING=1 on SIGTERM."""
    sock, path = notify_socket
    store = tmp_path / "store"
    log = tmp_path / "odsd.log"
    proc = spawn(
        *collect_args(store, max_iterations=500),
        env={"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "400000"},  # ping every 0.2 s
        log=log,
    )
    messages: list[str] = []
    try:
        sock.settimeout(60)
        messages.append(sock.recv(4096).decode())  # the first datagram
        assert wait_running(proc, store / "runs" / RUN_ID, log=log) is not None
        time.sleep(2.5)
        messages += drain(sock)
        rc = terminate(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    messages += drain(sock, timeout=0.5)
    assert rc == 0, log.read_text()[-3000:]
    assert messages[0] == f"READY=1\nSTATUS=collecting run {RUN_ID}", messages[:3]
    assert sum(m.startswith("READY=1") for m in messages) == 1
    statuses = [m for m in messages if m.startswith("STATUS=")]
    assert statuses and all(m.startswith("STATUS=iteration ") for m in statuses), statuses
    pings = messages.count("WATCHDOG=1")
    assert pings >= 5, f"only {pings} watchdog pings in ~2.5 s at a 0.2 s interval"
    assert "STOPPING=1" in messages
    stop_at = messages.index("STOPPING=1")
    assert "READY=1" not in "".join(messages[stop_at:])
    status = read_json(store / "runs" / RUN_ID / "status.json")
    assert status is not None and status["state"] == "stopped"


def _recv_timed(sock: socket.socket, until: float) -> list[tuple[float, str]]:
    """Datagrams with their arrival time (monotonic), until ``until`` or a STOPPING=1."""
    out: list[tuple[float, str]] = []
    while time.monotonic() < until:
        sock.settimeout(max(0.05, until - time.monotonic()))
        try:
            message = sock.recv(4096).decode()
        except (TimeoutError, BlockingIOError):
            break
        out.append((time.monotonic(), message))
        if message == "STOPPING=1":
            break
    return out


def test_watchdog_and_heartbeat_continue_through_policy_wait(
    tmp_path: Path, notify_socket: tuple[socket.socket, str]
) -> None:
    """WatchdogSec=4 and --policy-wait 9 with no learner: the collector waits 9 s at the first
    boundary; WATCHDOG=1 keeps arriving about every WatchdogSec/2 through it (systemd would kill
    the unit after a 4 s gap), status.json's heartbeat keeps moving, and no wait follows the
    last iteration."""
    sock, path = notify_socket
    store = tmp_path / "store"
    log = tmp_path / "odsd.log"
    watchdog_s = 4.0
    proc = spawn(
        *collect_args(store, max_iterations=2),
        "--policy-wait",
        "9",
        env={"NOTIFY_SOCKET": path, "WATCHDOG_USEC": str(int(watchdog_s * 1e6))},
        log=log,
    )
    heartbeats: set[str] = set()
    messages: list[tuple[float, str]] = []
    try:
        deadline = time.monotonic() + 240
        while proc.poll() is None and time.monotonic() < deadline:
            messages += _recv_timed(sock, time.monotonic() + 0.5)
            status = read_json(store / "runs" / RUN_ID / "status.json")
            if status is not None and status.get("state") == "running":
                heartbeats.add(status["heartbeat"])
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    messages += _recv_timed(sock, time.monotonic() + 0.5)
    text = log.read_text()
    assert rc == 0, text[-3000:]
    kinds = [m for _, m in messages]
    ready = next(i for i, m in enumerate(kinds) if m.startswith("READY=1"))
    stop = kinds.index("STOPPING=1")
    pings = [t for t, m in messages[ready:stop] if m == "WATCHDOG=1"]
    assert len(pings) >= 4, f"{len(pings)} watchdog pings through a 9 s policy wait: {kinds}"
    times = [messages[ready][0], *pings, messages[stop][0]]
    gap = max(b - a for a, b in itertools.pairwise(times))
    assert gap <= 0.75 * watchdog_s, f"{gap:.1f} s without WATCHDOG=1 (WatchdogSec={watchdog_s:g})"
    # The heartbeat is rewritten during the wait (about every second), not only at the boundary.
    assert len(heartbeats) >= 5, heartbeats
    # One boundary waits (after iteration 0); after the last iteration there is nothing to wait for.
    assert text.count("waiting up to") == 1, text[-3000:]
