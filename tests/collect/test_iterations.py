"""Iterations: exact per-iteration counts, retention across iterations, policy switch at a boundary."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from collect_helpers import ToyExpert, ToyVecEnv, publish_toy_student, stored_episodes

from odsd.collect import BetaSchedule, CollectConfig, Collector
from odsd.store import EpisodeStore


def config(tmp: Path, **kw) -> CollectConfig:
    base = dict(
        mode="dagger_sync",
        task="toy",
        store=tmp / "s",
        student=str(tmp / "pol"),
        durability="process",
        beta=BetaSchedule(kind="exponential", init_beta=1.0, decay=0.5),
    )
    base.update(kw)
    return CollectConfig(**base)


@pytest.fixture(scope="module")
def switched(tmp_path_factory):
    """3 iterations of 6 episodes; v1 is published when iteration 0 reports."""
    tmp = tmp_path_factory.mktemp("switch")
    env = ToyVecEnv(4)
    publish_toy_student(tmp / "pol", env.spec, version=0)
    boundary: dict[str, int] = {}
    reports: list[tuple[str, dict]] = []

    def on_report(kind: str, record: dict) -> None:
        reports.append((kind, record))
        if kind == "iteration" and record["iteration"] == 0:
            boundary["t"] = env.global_t  # steps taken so far; later frames run under v1
            publish_toy_student(tmp / "pol", env.spec, version=1, offset=0.25)

    cfg = config(
        tmp, episodes_per_iteration=6, max_iterations=3, beta=BetaSchedule(kind="constant", init_beta=0.0)
    )
    summary = Collector(cfg, env=env, expert=ToyExpert(), on_report=on_report).run()
    return tmp, env, summary, boundary["t"], reports


def test_exact_episode_count_per_iteration(switched) -> None:
    tmp, _, summary, _, _ = switched
    metas = [m for m, _ in stored_episodes(tmp / "s")]
    assert Counter(m.iteration for m in metas) == {0: 6, 1: 6, 2: 6}
    assert summary.iterations == 3 and summary.episodes_committed == 18
    assert [it["episodes_committed"] for it in summary.per_iteration] == [6, 6, 6]


def test_policy_version_switches_at_the_boundary(switched) -> None:
    tmp, _, summary, t_boundary, _ = switched
    assert [it["policy_version"] for it in summary.per_iteration] == [0, 1, 1]
    saw_mixed = False
    for meta, f in stored_episodes(tmp / "s"):
        t = f["observation.state"][:, 3]
        version = f["policy_version"]
        np.testing.assert_array_equal(version, np.where(t < t_boundary, 0, 1))
        assert meta.policy_version_first == version[0] and meta.policy_version_last == version[-1]
        if meta.iteration == 0:
            assert (version == 0).all()
        # the student actually changed: v1 acts with +0.25 on the first dim (beta = 0: student acts)
        np.testing.assert_allclose(f["action.student"][:, 0], 0.5 + 0.25 * version)
        np.testing.assert_allclose(f["action.behavior"], f["action.student"])
        saw_mixed |= version[0] != version[-1]
    assert saw_mixed, "an episode spanning the boundary shows both versions, frame by frame"


def test_reports(switched) -> None:
    *_, reports = switched
    kinds = [k for k, _ in reports]
    assert kinds.count("iteration") == 3 and kinds[-1] == "final"
    final = reports[-1][1]
    assert final["stop_reason"] == "max_iterations" and final["episodes_committed"] == 18


def test_metrics_jsonl_written(switched) -> None:
    tmp, *_ = switched
    runs = list((tmp / "s" / "runs").iterdir())
    assert len(runs) == 1
    lines = (runs[0] / "metrics.jsonl").read_text().splitlines()
    assert sum('"kind": "iteration"' in line for line in lines) == 3
    assert (runs[0] / "run.json").exists()


def test_earlier_iterations_stay_readable(tmp_path) -> None:
    """Data of iteration 0 is retained and readable after later iterations and a second run."""
    env = ToyVecEnv(3)
    publish_toy_student(tmp_path / "pol", env.spec, version=0)
    Collector(config(tmp_path, episodes_per_iteration=4, max_iterations=2), env=env, expert=ToyExpert()).run()
    snap0 = EpisodeStore.open(tmp_path / "s").snapshot()
    first = {
        int(e.episode_id): snap0.episode(e.episode_id)["observation.state"].copy()
        for e in snap0.entries
        if e.meta.iteration == 0
    }
    assert len(first) == 4

    env2 = ToyVecEnv(3)
    Collector(
        config(tmp_path, episodes_per_iteration=5, max_iterations=2, run_id="second"),
        env=env2,
        expert=ToyExpert(),
    ).run()
    snap = EpisodeStore.open(tmp_path / "s").snapshot()
    assert snap.num_episodes == 4 + 4 + 5 + 5
    for eid, obs in first.items():
        np.testing.assert_array_equal(snap.episode(eid)["observation.state"], obs)
    runs = Counter((e.meta.run_id == "second", e.meta.iteration) for e in snap.entries)
    assert runs == {(False, 0): 4, (False, 1): 4, (True, 0): 5, (True, 1): 5}


def test_max_episodes_is_exact_when_rows_finish_together(tmp_path) -> None:
    """All 4 rows finish on the same step: max_episodes=6 must not commit 8."""
    env = ToyVecEnv(4, length_fn=lambda r, k: 4)
    publish_toy_student(tmp_path / "pol", env.spec, version=0)
    summary = Collector(
        config(tmp_path, max_episodes=6, episodes_per_iteration=100), env=env, expert=ToyExpert()
    ).run()
    assert summary.stop_reason == "max_episodes"
    assert summary.episodes_committed == 6 == len(stored_episodes(tmp_path / "s"))


def test_max_iterations_is_exact_when_rows_finish_together(tmp_path) -> None:
    env = ToyVecEnv(3, length_fn=lambda r, k: 4)
    publish_toy_student(tmp_path / "pol", env.spec, version=0)
    summary = Collector(
        config(tmp_path, episodes_per_iteration=2, max_iterations=2), env=env, expert=ToyExpert()
    ).run()
    metas = [m for m, _ in stored_episodes(tmp_path / "s")]
    assert Counter(m.iteration for m in metas) == {0: 2, 1: 2}
    assert len(summary.per_iteration) == 2


def test_duration_bound_and_stop_event(tmp_path) -> None:
    import threading

    env = ToyVecEnv(2)
    publish_toy_student(tmp_path / "pol", env.spec, version=0)
    summary = Collector(
        config(tmp_path, duration_s=0.3, episodes_per_iteration=10**6), env=env, expert=ToyExpert()
    ).run()
    assert summary.stop_reason == "duration"
    stop = threading.Event()
    stop.set()
    env2 = ToyVecEnv(2)
    summary = Collector(config(tmp_path, run_id="stopped"), env=env2, expert=ToyExpert()).run(stop)
    assert summary.stop_reason == "signal" and summary.episodes_committed == 0


def test_initial_student_is_created_when_missing(tmp_path) -> None:
    """dagger_sync without any snapshot starts from a fresh reference MLP published as v0."""
    from odsd.policies import snapshot_versions

    env = ToyVecEnv(2)
    cfg = CollectConfig(
        mode="dagger_sync",
        task="toy",
        store=tmp_path / "s",
        durability="process",
        episodes_per_iteration=2,
        max_iterations=1,
    )
    Collector(cfg, env=env, expert=ToyExpert()).run()
    assert [v for v, _ in snapshot_versions(tmp_path / "s" / "policies")] == [0]
    assert all(m.policy_version_first == 0 for m, _ in stored_episodes(tmp_path / "s"))
