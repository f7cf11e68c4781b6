"""status.json heartbeat and the Prometheus text-file metrics."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from odsd.daemon.status import StatusWriter, prometheus_text, read_status
from odsd.schema.run import RunCounters, RunStatus

SAMPLE = re.compile(r'^(odsd_[a-z_]+)\{run_id="r1",task="reach",mode="dagger_sync"\} (\S+)$')


def parse_metrics(text: str) -> dict[str, float]:
    """name -> value; also checks the text-file format (HELP and TYPE before each sample)."""
    values: dict[str, float] = {}
    lines = text.splitlines()
    assert text.endswith("\n")
    for i, line in enumerate(lines):
        if line.startswith("#"):
            assert re.match(r"^# (HELP|TYPE) odsd_[a-z_]+ .+$", line), line
            continue
        m = SAMPLE.match(line)
        assert m, line
        name = m.group(1)
        assert lines[i - 2].startswith(f"# HELP {name} ") and lines[i - 1] in (
            f"# TYPE {name} gauge",
            f"# TYPE {name} counter",
        )
        if name.endswith("_total"):
            assert lines[i - 1].endswith("counter")
        assert name not in values
        values[name] = float(m.group(2))
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
