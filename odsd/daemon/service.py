"""The foreground service: lock, signals, heartbeat, systemd notify and run-state manifests around a collector."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from odsd.collect import CollectConfig, Collector, RunSummary
from odsd.daemon.errors import RunStateError
from odsd.daemon.lock import RunLock
from odsd.daemon.notify import SystemdNotifier
from odsd.daemon.resume import capture, restore, resume_config
from odsd.daemon.run_state import RunStateStore, newest_run
from odsd.daemon.signals import SignalHandlers
from odsd.daemon.status import StatusWriter
from odsd.errors import ConfigError, StorageError, as_storage_error
from odsd.schema.names import name_problem
from odsd.store import EpisodeStore

log = logging.getLogger("odsd.daemon")


@dataclass(frozen=True)
class ServiceOptions:
    metrics_textfile: Path | None = None
    heartbeat_interval_s: float = 1.0


class CollectService:
    """Runs one collector incarnation with everything an unattended service needs.

    At every iteration boundary (the writer already drained) and at shutdown, a run-state
    manifest is written; ``odsd resume`` continues from the newest complete one.
    """

    def __init__(
        self,
        config: CollectConfig,
        *,
        options: ServiceOptions | None = None,
        on_report: Callable[[str, dict[str, Any]], None] | None = None,
        on_tick: Callable[[Collector], None] | None = None,
        resume_state: Any = None,
    ) -> None:
        self.config = config
        self.options = options or ServiceOptions()
        textfile = self.options.metrics_textfile
        if textfile is not None and not textfile.parent.is_dir():
            raise ConfigError(
                f"--metrics-textfile {textfile}: its directory {textfile.parent} does not exist"
            )
        self.on_report = on_report
        self.on_tick = on_tick
        self.resume_state = resume_state
        self.notifier = SystemdNotifier()
        self._ready = False
        self._stopping_sent = False
        self._last_report: dict[str, Any] = {}

    def run(self) -> RunSummary:
        incarnation = self.resume_state.incarnation + 1 if self.resume_state is not None else 0
        collector = Collector(
            self.config,
            on_report=self._report,
            on_tick=self._tick,
            on_start=self._started,
            on_iteration_end=self._iteration_end,
            incarnation=incarnation,
        )
        assert collector.run_dir is not None
        self.collector = collector
        self.states = RunStateStore(collector.run_dir, durable=self.config.durability == "fsync")
        self.status = StatusWriter(
            collector.run_dir,
            run_id=collector.run_id,
            mode=self.config.mode,
            task=self.config.task,
            incarnation=incarnation,
            textfile=self.options.metrics_textfile,
            interval_s=self.options.heartbeat_interval_s,
        )
        with RunLock(collector.run_dir), SignalHandlers() as signals:
            self.signals = signals
            if self.resume_state is None and self.states.sequences():
                raise RunStateError(
                    f"run {collector.run_id} already exists in {self.config.store}; "
                    "continue it with `odsd resume` or choose another --run-id"
                )
            if self.resume_state is not None:
                restore(collector, self.resume_state)
                log.info(
                    "resuming run %s at iteration %d (incarnation %d)",
                    collector.run_id,
                    collector.progress.iteration,
                    incarnation,
                )
            self.status.update(force=True, state="starting")
            try:
                summary = collector.run(signals.stop, abort=signals.abort)
            except BaseException as exc:
                storage = as_storage_error(exc)
                if storage is not None:
                    # Full disk, read-only filesystem: one line that says what is safe.
                    p = collector.progress
                    storage = StorageError(
                        f"{storage}; run {collector.run_id} stopped with {p.episodes_committed} episodes "
                        f"committed (store watermark {collector.watermark}); `odsd resume` continues it "
                        "once the store can be written"
                    )
                message = str(storage or exc).splitlines()[0] if str(exc) else type(exc).__name__
                try:
                    self.status.update(force=True, state="failed", last_error=message, **self._fields())
                except OSError as status_exc:  # the same full disk: the error line still says it all
                    log.debug("could not write status.json: %s", status_exc)
                self.notifier.stopping()
                self._write_state("failure", quiet=storage is not None)
                if storage is not None:
                    raise storage from exc
                raise
            self._write_state("shutdown")
            self.status.update(force=True, state="stopped", stop_reason=summary.stop_reason, **self._fields())
            self.notifier.stopping()
            self.notifier.close()
        return summary

    # -- hooks ---------------------------------------------------------------------------------

    def _fields(self) -> dict[str, Any]:
        c = self.collector
        rep = self._last_report
        return {
            "iteration": c.progress.iteration,
            "beta": c.beta,
            "policy_version": c.policy_version,
            "watermark": c.watermark,
            "counters": dict(c.progress.__dict__),
            "writer_queue_depth": c.worker.depth if c.worker is not None else 0,
            "env_steps_per_s": rep.get("env_steps_per_s"),
            "frames_committed_per_s": rep.get("frames_committed_per_s"),
            "collection_success_rate": rep.get("collection_success_rate"),
        }

    def _tick(self, collector: Collector) -> None:
        if not self._ready:
            self._ready = True
            self.notifier.ready(f"collecting run {collector.run_id}")
            self.status.update(force=True, state="running", **self._fields())
        if self.signals.reload.is_set():
            self.signals.reload.clear()
            collector.reload_requested.set()
        if self.signals.stop.is_set() and not self._stopping_sent:
            self._stopping_sent = True
            self.notifier.stopping()
            self.status.update(force=True, state="stopping", **self._fields())
        self.notifier.watchdog()
        if self.on_tick is not None:
            self.on_tick(collector)
        if self.status.update(**self._fields()):
            p = collector.progress
            self.notifier.status(
                f"iteration {p.iteration}, beta {collector.beta:.3f}, {p.episodes_committed} episodes committed"
            )

    def _started(self, collector: Collector) -> None:
        # A first manifest before any step: a run killed before its first boundary can be resumed.
        if self.resume_state is None:
            self._write_state("start")

    def _iteration_end(self, collector: Collector) -> None:
        self._write_state("iteration")

    def _report(self, kind: str, record: dict[str, Any]) -> None:
        if kind in ("rolling", "iteration"):
            self._last_report = record
            self.status.report = record
        if self.on_report is not None:
            self.on_report(kind, record)

    def _write_state(self, reason: str, *, quiet: bool = False) -> None:
        c = self.collector
        if c.store is None or (c.worker is not None and c.worker.failed):
            return
        try:
            self.states.write(capture(c, reason=reason, sequence=self.states.next_sequence()))
        except OSError as exc:
            log.log(
                logging.DEBUG if quiet else logging.ERROR, "could not write the run-state manifest: %s", exc
            )


def load_resume(store_path: Path, run_id: str | None, overrides: dict[str, Any]) -> tuple[CollectConfig, Any]:
    """The config and newest complete run state of a run in ``store_path``."""
    store = EpisodeStore.open(store_path)
    runs = store.root / "runs"
    run_id = run_id or newest_run(runs)
    problem = name_problem(run_id)
    if problem:
        raise ConfigError(f"--run: run id {run_id!r} {problem}")
    run_dir = runs / run_id
    if not run_dir.is_dir():
        raise RunStateError(f"{run_dir}: no such run in this store")
    state = RunStateStore(run_dir).newest_complete()
    config = resume_config(state, {**overrides, "store": store.root, "run_id": run_id})
    return config, state
