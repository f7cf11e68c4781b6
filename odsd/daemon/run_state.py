"""Run-state manifests: ``runs/<run_id>/state/<seq>/manifest.json`` + ``COMPLETE`` written last."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from pydantic import ValidationError

from odsd.daemon.errors import RunStateError
from odsd.schema.run import RunState
from odsd.store.fsio import fsync_dir, fsync_file

log = logging.getLogger("odsd.daemon")

STATE_DIR = "state"
MANIFEST = "manifest.json"
COMPLETE = "COMPLETE"
KEEP = 20


class RunStateStore:
    """Writes numbered manifests atomically and finds the newest complete one."""

    def __init__(self, run_dir: Path, *, durable: bool = True, keep: int = KEEP) -> None:
        self.dir = run_dir / STATE_DIR
        self.durable = durable
        self.keep = keep

    def sequences(self) -> list[int]:
        if not self.dir.is_dir():
            return []
        return sorted(int(p.name) for p in self.dir.iterdir() if p.is_dir() and p.name.isdigit())

    def next_sequence(self) -> int:
        seqs = self.sequences()
        return seqs[-1] + 1 if seqs else 0

    def write(self, state: RunState) -> Path:
        target = self.dir / f"{state.sequence:08d}"
        target.mkdir(parents=True, exist_ok=False)
        manifest = target / MANIFEST
        manifest.write_text(state.model_dump_json(indent=1))
        if self.durable:
            fsync_file(manifest)
        (target / COMPLETE).write_text("ok\n")
        if self.durable:
            fsync_file(target / COMPLETE)
            fsync_dir(target)
            fsync_dir(self.dir)
        self._prune()
        return target

    def _prune(self) -> None:
        complete = [s for s in self.sequences() if (self.dir / f"{s:08d}" / COMPLETE).exists()]
        for seq in complete[: -self.keep]:
            shutil.rmtree(self.dir / f"{seq:08d}", ignore_errors=True)

    def newest_complete(self) -> RunState:
        """The newest manifest with a COMPLETE marker; incomplete or damaged ones are skipped."""
        for seq in reversed(self.sequences()):
            target = self.dir / f"{seq:08d}"
            if not (target / COMPLETE).exists():
                log.warning("skipping incomplete run-state manifest %s", target)
                continue
            try:
                return RunState.model_validate_json((target / MANIFEST).read_bytes())
            except (OSError, ValidationError, ValueError) as exc:
                raise RunStateError(
                    f"{target / MANIFEST}: damaged run-state manifest ({_first_line(exc)})"
                ) from exc
        raise RunStateError(f"{self.dir}: no complete run-state manifest to resume from")


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def newest_run(runs_dir: Path) -> str:
    """The run whose state directory changed last."""
    if not runs_dir.is_dir():
        raise RunStateError(f"{runs_dir}: no runs in this store")
    candidates = [p for p in runs_dir.iterdir() if (p / STATE_DIR).is_dir()]
    if not candidates:
        raise RunStateError(f"{runs_dir}: no run has a run-state manifest")
    return max(candidates, key=lambda p: os.stat(p / STATE_DIR).st_mtime).name
