"""Child processes that die with their parent at every moment of their life.

``PR_SET_PDEATHSIG`` set in a spawned child's target function comes too late: the child first
imports the target's module (for the writer: numpy, zarr, pydantic, seconds on a busy machine),
and a parent killed in that window leaves an orphan that never gets the signal. A
:class:`DieWithParent` target is unpickled from this small module (nothing heavy is imported),
arms the signal, checks the parent is still the one that started it (exiting otherwise: it died
before the signal was armed), and only then imports and runs the real target::

    ctx.Process(target=DieWithParent("odsd.collect.commit_process:_child_main"), args=(...))

multiprocessing's resource tracker needs nothing: it exits when the last process holding its pipe
(the parent and its spawned children) is gone.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from importlib import import_module
from typing import Any

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when its parent dies (Linux); exit now if ``parent_pid`` is gone already."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(0)  # orphaned before the signal was armed: the parent's death went unnoticed


class DieWithParent:
    """A picklable process target ``"package.module:function"`` run by a child that dies with this process."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.parent_pid = os.getpid()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        die_with_parent(self.parent_pid)
        module, _, name = self.target.partition(":")
        return getattr(import_module(module), name)(*args, **kwargs)
