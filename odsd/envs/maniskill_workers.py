"""CPU ManiSkill rows in worker processes: one single-row ``physx_cpu`` env per process.

ManiSkill's CPU backend holds one env per process, so ``maniskill:<EnvId>`` with several CPU rows
runs each row in its own spawned process (:class:`ManiSkillWorkers`). The pool offers the same
row interface as :class:`~odsd.envs.maniskill_sim.ManiSkillSim` (``reset``/``step``/``get_state``/
``set_state`` on row ids), steps only the rows it is given, all at once, and exchanges numpy arrays
through pipes::

    pool = ManiSkillWorkers("PickCube-v1", num_rows=4, sim_kwargs={"obs_mode": "state", ...})
    obs, reward, terminated, success = pool.step(torch.tensor([0, 2]), actions)   # rows 0 and 2
    pool.close()

Workers die with the process that started them (``PR_SET_PDEATHSIG``, armed before anything heavy
is imported: :mod:`odsd.child_guard`), ignore SIGINT (their owner closes them) and run
one torch thread each. A worker that dies or fails makes the next call raise one line naming it.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import signal
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import torch

from odsd.child_guard import DieWithParent
from odsd.envs.errors import EnvContractError, EnvSpecError, ManiSkillUnavailableError
from odsd.envs.maniskill_sim import SimLayout

START_TIMEOUT_S = 900.0
"""Importing ManiSkill and building a scene takes 15-40 s on a busy 2-core machine."""
CALL_TIMEOUT_S = 300.0
_ERRORS = {"spec": EnvSpecError, "unavailable": ManiSkillUnavailableError}


def _numpy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, dict):
        return {k: _numpy(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return type(value)(_numpy(v) for v in value)
    return value


def _torch(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    if isinstance(value, dict):
        return {k: _torch(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return type(value)(_torch(v) for v in value)
    return value


def worker_main(conn: Connection, env_id: str, sim_kwargs: dict[str, Any]) -> None:
    """Serve one single-row :class:`ManiSkillSim` over ``conn`` until ``close`` or EOF."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)
    from odsd.envs.maniskill_sim import ManiSkillSim

    try:
        sim = ManiSkillSim(env_id, num_rows=1, **sim_kwargs)
    except ManiSkillUnavailableError as exc:
        conn.send(("unavailable", str(exc)))
        return
    except EnvSpecError as exc:
        conn.send(("spec", str(exc)))
        return
    except Exception as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ok", (sim.layout, sim.has_success())))
    row = torch.zeros(1, dtype=torch.long)
    while True:
        try:
            command, args = conn.recv()
        except (EOFError, OSError):
            break
        if command == "close":
            break
        try:
            args = _torch(args)
            if command == "step":
                result = sim.step(row, args)
            elif command == "reset":
                result = sim.reset(row, [int(args)])
            elif command == "get_state":
                result = sim.get_state(row)
            elif command == "set_state":
                result = sim.set_state(args, row)
            else:
                raise ValueError(f"unknown command {command!r}")
            conn.send(("ok", _numpy(result)))
        except Exception as exc:
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
    sim.close()


class ManiSkillWorkers:
    """``num_rows`` single-row ManiSkill envs, one per spawned process (see module docstring)."""

    def __init__(self, env_id: str, *, num_rows: int, sim_kwargs: dict[str, Any]) -> None:
        self.env_id = env_id
        self.num_rows = int(num_rows)
        self.device = torch.device("cpu")
        ctx = mp.get_context("spawn")
        self._conns: list[Connection] = []
        self._procs: list[Any] = []
        try:
            for _ in range(self.num_rows):
                parent, child = ctx.Pipe()
                proc = ctx.Process(
                    target=DieWithParent("odsd.envs.maniskill_workers:worker_main"),
                    args=(child, env_id, sim_kwargs),
                    daemon=True,
                    name=f"odsd-maniskill-{env_id}",
                )
                proc.start()
                child.close()
                self._conns.append(parent)
                self._procs.append(proc)
            replies = [self._recv(i, START_TIMEOUT_S, starting=True) for i in range(self.num_rows)]
        except BaseException:
            self.close()
            raise
        self.layout: SimLayout = replies[0][0]
        self.success_reported = bool(replies[0][1])

    def _recv(self, i: int, timeout: float = CALL_TIMEOUT_S, *, starting: bool = False) -> Any:
        conn, proc = self._conns[i], self._procs[i]
        try:
            ready = conn.poll(timeout)
            status, payload = conn.recv() if ready else ("error", f"no answer in {timeout:g} s")
        except (EOFError, OSError):
            proc.join(timeout=5)
            status, payload = "error", f"exited (code {proc.exitcode})"
        if status == "ok":
            return payload
        if status in _ERRORS:
            raise _ERRORS[status](payload)
        what = "starting" if starting else "serving"
        raise EnvContractError(f"maniskill:{self.env_id}: worker for row {i} failed while {what}: {payload}")

    def _call(self, ids: torch.Tensor, command: str, args: list[Any]) -> list[Any]:
        rows = [int(i) for i in ids.tolist()]
        for i, arg in zip(rows, args, strict=True):
            try:
                self._conns[i].send((command, _numpy(arg)))
            except (BrokenPipeError, OSError):
                raise EnvContractError(
                    f"maniskill:{self.env_id}: worker for row {i} is gone (exit code {self._procs[i].exitcode})"
                ) from None
        return [_torch(self._recv(i)) for i in rows]

    def reset(self, ids: torch.Tensor, seeds: list[int]) -> dict[str, torch.Tensor]:
        """Reset rows ``ids``, row ``ids[k]`` with ``seeds[k]``; their observations."""
        parts = self._call(ids, "reset", [int(s) for s in seeds])
        return {k: torch.cat([p[k] for p in parts]) for k in parts[0]} if parts else {}

    def step(
        self, ids: torch.Tensor, action: torch.Tensor
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor]:
        """Step rows ``ids`` (in parallel) with ``action[k]`` for row ``ids[k]``."""
        action = action.detach().to("cpu", torch.float32)
        parts = self._call(ids, "step", [action[k : k + 1] for k in range(action.shape[0])])
        obs = {k: torch.cat([p[0][k] for p in parts]) for k in parts[0][0]}
        return obs, *(torch.cat([p[j] for p in parts]) for j in (1, 2, 3))  # type: ignore[return-value]

    def get_state(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """Simulator state of rows ``ids``."""
        parts = self._call(ids, "get_state", [None] * ids.numel())
        return {k: torch.cat([p[k] for p in parts]) for k in parts[0]} if parts else {}

    def set_state(self, state: dict[str, torch.Tensor], ids: torch.Tensor) -> None:
        """Restore rows ``ids`` (row ``ids[k]`` from element ``k`` of each field)."""
        cpu = {k: v.detach().cpu() for k, v in state.items()}
        self._call(ids, "set_state", [{k: v[j : j + 1] for k, v in cpu.items()} for j in range(ids.numel())])

    @property
    def pids(self) -> list[int]:
        """Process ids of the workers (for tests and diagnostics)."""
        return [int(p.pid) for p in self._procs if p.pid is not None]

    def close(self) -> None:
        """Stop every worker (a polite ``close``, then terminate); idempotent."""
        for conn in self._conns:
            with contextlib.suppress(BrokenPipeError, OSError):
                conn.send(("close", None))
        for proc in self._procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
        for conn in self._conns:
            conn.close()
        self._conns, self._procs = [], []
