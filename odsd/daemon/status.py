"""``status.json`` heartbeat and Prometheus text-file metrics, both written atomically."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

from odsd.schema.run import RunCounters, RunStatus
from odsd.schema.store import utc_now
from odsd.store.fsio import write_atomic

STATUS_FILE = "status.json"


def prometheus_text(status: RunStatus) -> str:
    """node_exporter text-file format for one run."""
    labels = f'run_id="{status.run_id}",task="{status.task}",mode="{status.mode}"'
    c = status.counters
    gauges: list[tuple[str, str, float | None]] = [
        ("odsd_up", "1 while the collector runs", 1.0 if status.state in ("starting", "running") else 0.0),
        ("odsd_iteration", "current DAgger iteration", status.iteration),
        ("odsd_beta", "current beta", status.beta),
        ("odsd_policy_version", "student policy version", status.policy_version),
        ("odsd_store_watermark", "store watermark seen by the run", status.watermark),
        ("odsd_writer_queue_depth", "episodes waiting for the writer thread", status.writer_queue_depth),
        ("odsd_env_steps_per_second", "env row-steps per second (rolling)", status.env_steps_per_s),
        (
            "odsd_committed_frames_per_second",
            "committed frames per second (rolling)",
            status.frames_committed_per_s,
        ),
        ("odsd_collection_success_rate", "collection success rate (rolling)", status.collection_success_rate),
        ("odsd_heartbeat_timestamp_seconds", "unix time of the last heartbeat", time.time()),
    ]
    counters: list[tuple[str, str, float]] = [
        ("odsd_episodes_committed_total", "episodes committed", c.episodes_committed),
        ("odsd_frames_committed_total", "frames committed", c.frames_committed),
        ("odsd_episodes_finished_total", "episodes finished", c.episodes_finished),
        ("odsd_env_steps_total", "env row-steps", c.env_steps),
    ]
    lines: list[str] = []
    for name, help_text, value in gauges:
        if value is None:
            continue
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name}{{{labels}}} {float(value)}"]
    for name, help_text, value in counters:
        lines += [
            f"# HELP {name} {help_text}",
            f"# TYPE {name} counter",
            f"{name}{{{labels}}} {float(value)}",
        ]
    return "\n".join(lines) + "\n"


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
            self.textfile.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.textfile, prometheus_text(self.status).encode(), durable=False)
        self._last = now
        return True


def read_status(run_dir: Path) -> RunStatus | None:
    try:
        return RunStatus.model_validate_json((run_dir / STATUS_FILE).read_bytes())
    except (OSError, ValueError):
        return None
