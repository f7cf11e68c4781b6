"""status.json heartbeat and the Prometheus text-file metrics."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from odsd.daemon.status import StatusWriter, prometheus_text, read_status
from odsd.schema.run import RunCounters, RunStatus

HOSTILE = [
    'we"ird\\run',
    "back\\slash\\",
    "new\nline",
    'all of "them"\\\n at once',
    "ünïcødé ☃ 机器人",
    "}{,=# HELP",
]


def parse_metrics(text: str) -> dict[str, float]:
    """sample name -> value, parsed by ``prometheus_client``'s text-format parser (one run, one sample each)."""
    assert text.endswith("\n")
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        assert family.name.startswith("odsd_") and family.documentation
        assert family.type in ("gauge", "counter"), family
        for sample in family.samples:
            assert set(sample.labels) == {"run_id", "task", "mode"}, sample
            if sample.name.endswith("_total"):
                assert family.type == "counter", family
            assert sample.name not in values
            values[sample.name] = sample.value
    return values


def status(**fields) -> RunStatus:
    base = {
        "run_id": "r1",
        "state": "running",
        "pid": 1,
        "host": "h",
        "started": "t",
        "mode": "dagger_sync",
        "task": "reach",
    }
    return RunStatus(**{**base, **fields})


def test_prometheus_text_has_gauges_and_counters() -> None:
    text = prometheus_text(
        status(
            iteration=3,
            beta=0.125,
            policy_version=2,
            watermark=17,
            counters=RunCounters(
                episodes_committed=40, frames_committed=900, episodes_finished=41, env_steps=1000
            ),
            env_steps_per_s=250.0,
            frames_committed_per_s=200.0,
            collection_success_rate=0.5,
            writer_queue_depth=1,
        )
    )
    v = parse_metrics(text)
    assert v["odsd_up"] == 1.0
    assert v["odsd_iteration"] == 3 and v["odsd_beta"] == 0.125 and v["odsd_policy_version"] == 2
    assert v["odsd_store_watermark"] == 17 and v["odsd_writer_queue_depth"] == 1
    assert v["odsd_episodes_committed_total"] == 40 and v["odsd_frames_committed_total"] == 900
    assert v["odsd_episodes_finished_total"] == 41 and v["odsd_env_steps_total"] == 1000
    assert v["odsd_env_steps_per_second"] == 250 and v["odsd_collection_success_rate"] == 0.5
    assert v["odsd_heartbeat_timestamp_seconds"] > 1.6e9


def test_prometheus_text_skips_unknown_gauges_and_is_down_when_stopped() -> None:
    v = parse_metrics(prometheus_text(status(state="stopped")))
    assert v["odsd_up"] == 0.0
    assert "odsd_beta" not in v and "odsd_env_steps_per_second" not in v
    assert v["odsd_episodes_committed_total"] == 0
    assert parse_metrics(prometheus_text(status(state="failed")))["odsd_up"] == 0.0
    assert parse_metrics(prometheus_text(status(state="starting")))["odsd_up"] == 1.0


def test_status_writer_throttles_and_forces(tmp_path: Path) -> None:
    textfile = tmp_path / "metrics" / "odsd.prom"
    w = StatusWriter(
        tmp_path / "run",
        run_id="r1",
        mode="dagger_sync",
        task="reach",
        incarnation=2,
        textfile=textfile,
        interval_s=3600,
    )
    assert w.update(force=True, state="running", iteration=1, counters={"episodes_committed": 5})
    s = read_status(tmp_path / "run")
    assert s is not None and s.state == "running" and s.iteration == 1 and s.incarnation == 2
    assert s.pid == os.getpid() and s.counters.episodes_committed == 5
    assert not w.update(iteration=2)  # throttled: nothing written
    assert read_status(tmp_path / "run").iteration == 1
    assert w.update(force=True, iteration=2, state="stopped", stop_reason="signal")
    s = read_status(tmp_path / "run")
    assert s.iteration == 2 and s.state == "stopped" and s.stop_reason == "signal"
    assert parse_metrics(textfile.read_text())["odsd_iteration"] == 2
    assert not list(tmp_path.rglob("*.tmp*")), "atomic writes left temporary files"


def test_status_writer_writes_after_the_interval(tmp_path: Path) -> None:
    w = StatusWriter(tmp_path, run_id="r1", mode="m", task="t", interval_s=0.0)
    assert w.update(iteration=1) and w.update(iteration=2)
    assert json.loads((tmp_path / "status.json").read_text())["iteration"] == 2


def test_status_writer_rejects_an_unknown_state(tmp_path: Path) -> None:
    w = StatusWriter(tmp_path, run_id="r1", mode="m", task="t")
    with pytest.raises(ValueError):
        w.update(force=True, state="exploded")


def test_read_status_of_missing_or_garbled_file(tmp_path: Path) -> None:
    assert read_status(tmp_path) is None
    (tmp_path / "status.json").write_text("{not json")
    assert read_status(tmp_path) is None


REPORT = {
    "expert_latency_ms_p50": 0.5,
    "expert_latency_ms_p95": 2.0,
    "invalid_label_rate": 0.25,
    "disagreement_l2": 0.125,
    "expert_executed_fraction": 0.75,
    "episode_length_mean": 40.0,
    "commit_latency_ms_p50": 10.0,
    "commit_latency_ms_p95": 30.0,
    "visibility_lag_ms_p50": 500.0,
    "visibility_lag_ms_p95": 1500.0,
    "rss_bytes": 123456789,
}


def test_prometheus_text_exports_the_metrics_record() -> None:
    v = parse_metrics(prometheus_text(status(), REPORT))
    assert v["odsd_expert_latency_p50_seconds"] == pytest.approx(0.0005)
    assert v["odsd_expert_latency_p95_seconds"] == pytest.approx(0.002)
    assert v["odsd_invalid_label_ratio"] == 0.25 and v["odsd_disagreement_l2"] == 0.125
    assert v["odsd_expert_executed_ratio"] == 0.75 and v["odsd_episode_length_mean_steps"] == 40
    assert v["odsd_commit_latency_p50_seconds"] == pytest.approx(0.01)
    assert v["odsd_commit_latency_p95_seconds"] == pytest.approx(0.03)
    assert v["odsd_visibility_lag_p50_seconds"] == pytest.approx(0.5)
    assert v["odsd_visibility_lag_p95_seconds"] == pytest.approx(1.5)
    assert v["odsd_resident_memory_bytes"] == 123456789
    # A record without a figure (no expert in the window) leaves its gauge out rather than writing 0.
    v = parse_metrics(prometheus_text(status(), {**REPORT, "expert_latency_ms_p50": None}))
    assert "odsd_expert_latency_p50_seconds" not in v


@pytest.mark.parametrize("hostile", HOSTILE)
def test_metrics_textfile_parses_with_hostile_run_ids_and_tasks(tmp_path: Path, hostile: str) -> None:
    """Quotes, backslashes, newlines and unicode in the run id and the task name: the text file
    parses with prometheus_client's parser (what node_exporter accepts) and the same registry
    rendered as OpenMetrics parses with the strict OpenMetrics parser; the label values survive."""
    textfile = tmp_path / "odsd.prom"
    w = StatusWriter(
        tmp_path / "run", run_id=hostile, mode="dagger_sync", task=hostile + "-task", textfile=textfile
    )
    w.report = REPORT
    w.update(force=True, state="running", iteration=4, counters={"episodes_committed": 7})
    text = textfile.read_text()
    families = list(text_string_to_metric_families(text))
    assert {f.name for f in families} >= {"odsd_up", "odsd_iteration", "odsd_episodes_committed"}
    for family in families:
        for sample in family.samples:
            assert sample.labels == {"run_id": hostile, "task": hostile + "-task", "mode": "dagger_sync"}
    assert parse_metrics(text)["odsd_episodes_committed_total"] == 7
    from odsd.daemon.textfile import run_registry

    registry = run_registry(w.status, REPORT)
    strict = {f.name: f for f in openmetrics_families(openmetrics_latest(registry).decode())}
    assert strict["odsd_episodes_committed"].type == "counter"
    assert strict["odsd_episodes_committed"].samples[0].name == "odsd_episodes_committed_total"
    assert strict["odsd_iteration"].samples[0].labels["run_id"] == hostile
    assert strict["odsd_iteration"].samples[0].value == 4
