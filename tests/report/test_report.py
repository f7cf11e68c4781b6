"""``odsd report``: plots and summary from a small real dagger_sync store (pick_place, 2 iterations)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from odsd.collect import BetaSchedule, CollectConfig, Collector
from odsd.errors import ConfigError
from odsd.report import build_report, load_report_data

pytest.importorskip("matplotlib")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def small_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """Two dagger_sync iterations of 4 episodes each, plus one student-only eval record per iteration."""
    store = tmp_path_factory.mktemp("report") / "store"
    cfg = CollectConfig(
        mode="dagger_sync",
        task="pick_place",
        num_envs=4,
        store=store,
        seed=3,
        episodes_per_iteration=4,
        max_iterations=2,
        beta=BetaSchedule(init_beta=1.0, decay=0.5),
        durability="process",
        commit_max_age_s=0.2,
        metrics_interval_s=3600,
    )
    collector = Collector(cfg)
    collector.run()
    run_dir = store / "runs" / collector.run_id
    with open(run_dir / "eval.jsonl", "w") as fh:
        for k, rate in enumerate((0.25, 0.75)):
            rec = {
                "kind": "eval",
                "iteration": k,
                "policy_version": k + 1,
                "success_rate": rate,
                "ci95": [rate - 0.2, rate + 0.2],
                "episodes": 8,
                "labels": 100 * (k + 1),
                "failure_points": {"grasp": 4 - 2 * k, "reach": 2 - k},
            }
            fh.write(json.dumps(rec) + "\n")
    return store, collector.run_id


def test_load_report_data_joins_metrics_evals_and_segments(small_store: tuple[Path, str]) -> None:
    store, run_id = small_store
    data = load_report_data(store)
    assert [r.run_id for r in data.runs] == [run_id]
    rd = data.runs[0]
    assert rd.mode == "dagger_sync" and rd.task == "pick_place"
    assert [int(r["iteration"]) for r in rd.iterations] == [0, 1]
    assert [b for _, b in rd.metric("beta")] == [1.0, 0.5]
    assert [e["success_rate"] for e in rd.evals] == [0.25, 0.75]
    assert rd.episodes == data.episodes == 8
    assert rd.frames == data.frames
    # every episode starts in the planner's first phase; segment counts are per episode
    assert rd.segments["reach"].reached == 8
    assert all(s.reached <= 8 for s in rd.segments.values())
    assert sum(s.failed_in for s in rd.segments.values()) == rd.episodes - rd.successes


def test_build_report_writes_pngs_and_summary(small_store: tuple[Path, str], tmp_path: Path) -> None:
    store, run_id = small_store
    result = build_report(store, tmp_path / "out")
    expected = {"success", "beta", "invalid labels", "disagreement", "throughput", "failures"}
    assert set(result.images) == expected
    for path in result.images.values():
        assert path.read_bytes()[:8] == PNG_MAGIC
        assert path.stat().st_size > 2000
    text = result.summary.read_text()
    assert run_id in text
    assert "| 0 | 1.000 |" in text and "| 1 | 0.500 |" in text
    assert "75% (55%–95%, n=8)" in text  # the eval record of iteration 1
    for name in ("success.png", "beta.png", "throughput.png"):
        assert f"]({name})" in text
    assert "| reach | 8 |" in text


def test_report_single_run_and_unknown_run(small_store: tuple[Path, str], tmp_path: Path) -> None:
    store, run_id = small_store
    assert build_report(store, tmp_path / "one", run=run_id).runs == 1
    with pytest.raises(ConfigError, match="no such run"):
        build_report(store, tmp_path / "two", run="nope")


def test_report_on_store_without_runs(tmp_store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = build_report(tmp_store.root, tmp_path / "empty")
    assert result.runs == 0 and result.images == {}
    assert "No runs in this store." in result.summary.read_text()


def test_report_cmd(small_store: tuple[Path, str], tmp_path: Path) -> None:
    from odsd.cli.report import report_cmd

    app = typer.Typer()
    app.command()(report_cmd)
    out = tmp_path / "cli"
    res = CliRunner().invoke(app, [str(small_store[0]), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert (out / "summary.md").is_file() and (out / "success.png").is_file()
    assert "1 run(s)" in res.output
