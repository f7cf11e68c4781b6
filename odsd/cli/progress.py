"""What `odsd collect` / `odsd resume` show while they run.

Three renderings of the same reports:

- ``json``: every metrics record (``rolling``, ``iteration``, ``final``) as one JSON line on stderr;
- ``live`` (stderr is a terminal): a ``rich.progress`` view, episodes toward the run's bound with
  ETA, iteration, beta, rates and commit lag, redrawn in place; each finished iteration and every
  log record is printed above it as a permanent line;
- ``plain`` (stderr redirected): one ``[rolling]`` / ``[iteration]`` line per record.

Text from the run (log messages, record fields) is never read as rich markup.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal, TextIO

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from odsd.cli.logs import json_line

Style = Literal["json", "live", "plain"]


def choose_style(json_logs: bool, stream: TextIO | None = None) -> Style:
    if json_logs:
        return "json"
    stream = stream or sys.stderr
    return "live" if stream.isatty() else "plain"


def _fmt(value: Any, spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def record_line(kind: str, record: dict[str, Any]) -> str:
    """The plain one-line form of a metrics record."""
    sr = record.get("collection_success_rate")
    lat = record.get("expert_latency_ms_p50")
    lag = record.get("visibility_lag_ms_p95")
    version = record.get("policy_version")
    return (
        f"[{kind}] it={record.get('iteration')} beta={record.get('beta', 0):.3f} "
        f"policy={'-' if version is None or version < 0 else f'v{version}'} "
        f"episodes={record.get('episodes_finished')} "
        f"success={_fmt(sr, '.0%')} steps/s={record.get('env_steps_per_s', 0):.0f} "
        f"committed={record.get('episodes_committed_total')} "
        f"expert_p50={_fmt(lat, '.2f', 'ms')} commit_lag_p95={_fmt(None if lag is None else lag / 1e3, '.2f', 's')}"
    )


class _ConsoleLogHandler(logging.Handler):
    """Log records printed above the live view (as text, not markup)."""

    def __init__(self, console: Console) -> None:
        super().__init__()
        self.console = console
        self.setFormatter(logging.Formatter("odsd: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.console.print(escape(self.format(record)), highlight=False, soft_wrap=True)
        except Exception:
            self.handleError(record)


class RunProgress:
    """Receives the collector's reports (``report``) and ticks (``tick``) and renders them."""

    def __init__(
        self,
        style: Style,
        *,
        mode: str,
        episode_bound: int | None,
        duration_s: float | None = None,
        console: Console | None = None,
        stream: TextIO | None = None,
    ) -> None:
        self.style = style
        self.mode = mode
        self.episode_bound = episode_bound
        self.duration_s = duration_s
        self.stream = stream
        self._last: dict[str, Any] = {}
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._last_tick = 0.0
        self._collector: Any = None
        self._started = time.monotonic()
        if style == "live":
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[unit]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                TextColumn("{task.fields[stats]}"),
                console=console or Console(stderr=True),
                refresh_per_second=4,
                redirect_stdout=False,
                redirect_stderr=False,
            )

    @property
    def _out(self) -> TextIO:
        return self.stream or sys.stderr

    # -- lifecycle ---------------------------------------------------------------------------------

    @contextmanager
    def active(self) -> Iterator[RunProgress]:
        """Show the live view (when there is one) and route log records above it."""
        if self._progress is None:
            yield self
            return
        root = logging.getLogger()
        handler = _ConsoleLogHandler(self._progress.console)
        saved = root.handlers[:]
        root.handlers = [handler]
        self._progress.start()
        try:
            yield self
        finally:
            self._refresh()
            self._progress.stop()
            root.handlers = saved

    # -- inputs --------------------------------------------------------------------------------------

    def report(self, kind: str, record: dict[str, Any]) -> None:
        if self.style == "json":
            print(json_line(record), file=self._out, flush=True)
            return
        if kind == "final":
            return
        if kind in ("rolling", "iteration"):
            self._last = record
        if self._progress is None:
            print(record_line(kind, record), file=self._out, flush=True)
            return
        if kind == "iteration":
            self._progress.console.print(escape(record_line(kind, record)), highlight=False, soft_wrap=True)
        self._refresh()

    def tick(self, collector: Any) -> None:
        """Called on every collector tick; reads its counters at most 4 times a second."""
        if self._progress is None:
            return
        now = time.monotonic()
        if now - self._last_tick < 0.25:
            return
        self._last_tick = now
        self._collector = collector
        self._refresh()

    # -- rendering -----------------------------------------------------------------------------------

    @property
    def _counters(self) -> dict[str, Any]:
        c = self._collector
        return {} if c is None else {**c.progress.__dict__, "beta": c.beta}

    def stats_text(self) -> str:
        c, r = self._counters, self._last
        beta = c.get("beta", r.get("beta"))
        lag = r.get("visibility_lag_ms_p95")
        sr = r.get("collection_success_rate")
        parts = [
            f"it {c.get('iteration', r.get('iteration', 0))}",
            f"beta {_fmt(beta, '.3f')}",
            f"{r.get('env_steps_per_s', 0):,.0f} steps/s",
            f"{r.get('frames_committed_per_s', 0):,.0f} frames/s",
            f"success {_fmt(sr, '.0%')}",
            f"committed {c.get('episodes_committed', r.get('episodes_committed_total', 0))}",
            f"commit lag {_fmt(None if lag is None else lag / 1e3, '.1f', 's')}",
        ]
        return escape(" · ".join(parts))

    def _refresh(self) -> None:
        if self._progress is None:
            return
        c = self._counters
        if self.episode_bound is not None:
            total: float | None = self.episode_bound
            completed: float = c.get("episodes_accepted", 0)
            unit = "episodes"
        elif self.duration_s is not None:
            total = self.duration_s
            completed = min(time.monotonic() - self._started, self.duration_s)
            unit = "s"
        else:
            total, completed, unit = None, c.get("episodes_accepted", 0), "episodes (no bound)"
        if self._task is None:
            self._task = self._progress.add_task(
                self.mode, total=total, completed=completed, unit=unit, stats=self.stats_text()
            )
        else:
            self._progress.update(self._task, completed=completed, stats=self.stats_text())
