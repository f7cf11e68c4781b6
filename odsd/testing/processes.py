"""Process-tree checks for crash tests: which processes of a session are still alive.

Start the process under test with ``start_new_session=True``; every process it starts (children,
helpers such as multiprocessing's resource tracker) stays in its session unless it calls
``setsid`` itself::

    proc = subprocess.Popen([...], start_new_session=True)
    proc.kill(); proc.wait()
    assert wait_session_gone(proc.pid) == {}
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return text[text.rindex(")") + 2 :].split()  # after "pid (comm) ": state, ppid, pgrp, session, ...


def session_members(sid: int) -> dict[int, str]:
    """Live (not zombie) processes of session ``sid``: pid -> command line."""
    members: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is None or fields[0] in ("Z", "X") or int(fields[3]) != sid:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except (FileNotFoundError, ProcessLookupError):
            continue
        members[int(entry.name)] = cmdline
    return members


def wait_session_gone(sid: int, timeout: float = 20.0) -> dict[int, str]:
    """Wait until no process of session ``sid`` is alive; return the survivors (empty: none)."""
    deadline = time.monotonic() + timeout
    while (members := session_members(sid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return members


def kill_session(sid: int) -> None:
    """SIGKILL every live process of session ``sid`` (test clean-up)."""
    for pid in session_members(sid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
