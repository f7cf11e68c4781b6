"""Prometheus metrics of one run for node_exporter's textfile collector, written with ``prometheus_client``.

Every write builds a private :class:`~prometheus_client.CollectorRegistry` holding one collector
that reports the run's current status (``status.json``) and its newest metrics record (the last
``rolling`` or ``iteration`` line of ``metrics.jsonl``); ``write_to_textfile`` renders it with the
library's escaping and replaces the file atomically. Nothing is registered in the global registry.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, write_to_textfile
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from odsd.schema.run import RunStatus

LABELS = ("run_id", "task", "mode")

# (metric name, help, metrics-record key, factor to the metric's unit)
REPORT_GAUGES: tuple[tuple[str, str, str, float], ...] = (
    ("odsd_expert_latency_p50_seconds", "expert query latency, median (rolling)", "expert_latency_ms_p50", 1e-3),
    ("odsd_expert_latency_p95_seconds", "expert query latency, 95th percentile (rolling)", "expert_latency_ms_p95", 1e-3),
    ("odsd_invalid_label_ratio", "fraction of expert labels that were invalid (rolling)", "invalid_label_rate", 1.0),
    ("odsd_disagreement_l2", "mean L2 distance of expert and student actions (rolling)", "disagreement_l2", 1.0),
    ("odsd_expert_executed_ratio", "fraction of steps that executed the expert's action (rolling)", "expert_executed_fraction", 1.0),
    ("odsd_episode_length_mean_steps", "mean length of finished episodes (rolling)", "episode_length_mean", 1.0),
    ("odsd_commit_latency_p50_seconds", "store commit latency, median (rolling)", "commit_latency_ms_p50", 1e-3),
    ("odsd_commit_latency_p95_seconds", "store commit latency, 95th percentile (rolling)", "commit_latency_ms_p95", 1e-3),
    ("odsd_visibility_lag_p50_seconds", "from an episode's last step to its commit, median (rolling)", "visibility_lag_ms_p50", 1e-3),
    ("odsd_visibility_lag_p95_seconds", "from an episode's last step to its commit, 95th percentile (rolling)", "visibility_lag_ms_p95", 1e-3),
    ("odsd_resident_memory_bytes", "resident set size of the collector process", "rss_bytes", 1.0),
)  # fmt: skip


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


class RunCollector(Collector):
    """The metric families of one run: status gauges, counters and the newest metrics record."""

    def __init__(self, status: RunStatus, report: Mapping[str, Any] | None = None) -> None:
        self.status = status
        self.report = report or {}

    def collect(self) -> Iterator[Metric]:
        s = self.status
        values = [s.run_id, s.task, s.mode]
        gauges: list[tuple[str, str, float | None]] = [
            ("odsd_up", "1 while the collector runs", 1.0 if s.state in ("starting", "running") else 0.0),
            ("odsd_iteration", "current DAgger iteration", s.iteration),
            ("odsd_beta", "current beta", s.beta),
            ("odsd_policy_version", "student policy version", s.policy_version),
            ("odsd_store_watermark", "store watermark seen by the run", s.watermark),
            ("odsd_writer_queue_depth", "episodes waiting for the writer", s.writer_queue_depth),
            ("odsd_env_steps_per_second", "env row-steps per second (rolling)", s.env_steps_per_s),
            ("odsd_committed_frames_per_second", "committed frames per second (rolling)", s.frames_committed_per_s),
            ("odsd_collection_success_rate", "collection success rate (rolling)", s.collection_success_rate),
            ("odsd_heartbeat_timestamp_seconds", "unix time of the last heartbeat", time.time()),
        ]  # fmt: skip
        for name, help_text, key, factor in REPORT_GAUGES:
            value = _number(self.report.get(key))
            gauges.append((name, help_text, None if value is None else value * factor))
        for name, help_text, value in gauges:
            if value is None:
                continue
            family = GaugeMetricFamily(name, help_text, labels=LABELS)
            family.add_metric(values, float(value))
            yield family
        c = s.counters
        for name, help_text, total in (
            ("odsd_episodes_committed", "episodes committed", c.episodes_committed),
            ("odsd_frames_committed", "frames committed", c.frames_committed),
            ("odsd_episodes_finished", "episodes finished", c.episodes_finished),
            ("odsd_env_steps", "env row-steps", c.env_steps),
        ):
            counter = CounterMetricFamily(name, help_text, labels=LABELS)  # exported as <name>_total
            counter.add_metric(values, float(total))
            yield counter


def run_registry(status: RunStatus, report: Mapping[str, Any] | None = None) -> CollectorRegistry:
    """A dedicated registry with the run's metrics (render it with any ``prometheus_client`` exposition)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RunCollector(status, report))
    return registry


def write_metrics_textfile(path: Path, status: RunStatus, report: Mapping[str, Any] | None = None) -> None:
    """Write the run's metrics to ``path`` atomically (a temporary file renamed over it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_to_textfile(str(path), run_registry(status, report))
