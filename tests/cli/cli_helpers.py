"""Run the real ``odsd`` console script: with pipes, or on a pseudo-terminal."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ODSD = [sys.executable, "-m", "odsd"]


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")}
    env.update({"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"})
    env.update(extra or {})
    return env


def odsd(*args: Any, timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*ODSD, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=child_env(env)
    )


def odsd_on_pty(*args: Any, timeout: float = 300, columns: int = 200) -> tuple[int, str]:
    """Run ``odsd ARGS`` with stdin, stdout and stderr on a pseudo-terminal; (exit code, everything it wrote)."""
    master, slave = pty.openpty()
    env = child_env({"TERM": "xterm-256color", "COLUMNS": str(columns), "LINES": "50"})
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([*ODSD, *map(str, args)], stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
        rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return rc, b"".join(chunks).decode(errors="replace")


def reach_collect_args(store: Path, *extra: Any, iterations: int = 3, per_iteration: int = 8) -> list[str]:
    return [
        "collect",
        "--mode",
        "dagger_sync",
        "--task",
        "reach",
        "--num-envs",
        "4",
        "--episodes-per-iteration",
        str(per_iteration),
        "--max-iterations",
        str(iterations),
        "--store",
        str(store),
        "--durability",
        "process",
        *map(str, extra),
    ]
