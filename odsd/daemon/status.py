"""``status.json`` heartbeat and (through :mod:`odsd.daemon.textfile`) the metrics text file, written atomically."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest

from odsd.daemon.textfile import run_registry, write_metrics_textfile
from odsd.schema.run import RunCounters, RunStatus
from odsd.schema.store import utc_now
from odsd.store.fsio import write_atomic

STATUS_FILE = "status.json"


def prometheus_text(status: RunStatus, report: Mapping[str, Any] | None = None) -> str:
    """The run's metrics in the Prometheus text format that the metrics text file holds."""
    return generate_latest(run_registry(status, report)).decode()


class StatusWriter:
    """Writes the run's status at most every ``interval_s`` (and always on state changes)."""

    def __init__(
        self,
        run_dir: Path,
        *,
        run_id: str,
        mode: str,
        task: str,
        incarnation: int = 0,
        textfile: Path | None = None,
        interval_s: float = 1.0,
    ) -> None:
        self.path = run_dir / STATUS_FILE
        self.textfile = textfile
        self.interval_s = interval_s
        self._last = 0.0
        self.base: dict[str, Any] = {
            "run_id": run_id,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": utc_now(),
            "mode": mode,
            "task": task,
            "incarnation": incarnation,
        }
        self.status = RunStatus(state="starting", **self.base)
        self.report: Mapping[str, Any] = {}
        """The newest metrics record (rolling or iteration); its figures go into the text file."""

    def update(self, *, force: bool = False, **fields: Any) -> bool:
        """Merge ``fields`` into the status; write it if forced or the interval has passed."""
        now = time.monotonic()
        if not force and now - self._last < self.interval_s:
            return False
        if "counters" in fields and not isinstance(fields["counters"], RunCounters):
            fields["counters"] = RunCounters(**fields["counters"])
        self.status = self.status.model_copy(update={**fields, "heartbeat": utc_now()})
        self.status = RunStatus.model_validate(self.status.model_dump())
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, self.status.model_dump_json(indent=1).encode(), durable=False)
        if self.textfile is not None:
            write_metrics_textfile(self.textfile, self.status, self.report)
        self._last = now
        return True


def read_status(run_dir: Path) -> RunStatus | None:
    try:
        return RunStatus.model_validate_json((run_dir / STATUS_FILE).read_bytes())
    except (OSError, ValueError):
        return None
