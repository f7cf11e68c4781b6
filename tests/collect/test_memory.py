"""A collector that runs for days holds no per-episode or per-iteration state that keeps growing."""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

from collect_helpers import ToyExpert, ToyVecEnv, publish_toy_student

import odsd.collect.collector as collector_module
from odsd.collect import CollectConfig, Collector


def _config(tmp_path: Path, **kwargs) -> CollectConfig:
    publish_toy_student(tmp_path / "pol", ToyVecEnv(4).spec, version=0)
    return CollectConfig(
        mode="dagger_sync",
        task="toy",
        num_envs=4,
        store=tmp_path / "s",
        student=str(tmp_path / "pol"),
        durability="process",
        writer="thread",  # the writer's store and the loop in this process, where tracemalloc sees both
        commit_max_episodes=4,
        **kwargs,
    )


def test_collector_memory_does_not_grow_with_committed_episodes(tmp_path: Path, monkeypatch) -> None:
    """The collector and its writer follow the log without the store's per-episode index."""
    monkeypatch.setattr(collector_module, "PER_ITERATION_KEPT", 2, raising=False)
    cfg = _config(tmp_path, episodes_per_iteration=40, max_iterations=12)
    marks: dict[int, tuple[tracemalloc.Snapshot, int]] = {}
    # The toy env and expert record every call for other tests: not the collector's memory.
    harness = [tracemalloc.Filter(False, "*collect_helpers.py", all_frames=True)]

    def at_boundary(collector: Collector) -> None:
        if collector.progress.iteration in (3, 12):
            collector.worker.drain()
            gc.collect()
            snapshot = tracemalloc.take_snapshot().filter_traces(harness)
            marks[collector.progress.iteration] = (snapshot, collector.progress.episodes_committed)

    tracemalloc.start(10)
    try:
        collector = Collector(cfg, env=ToyVecEnv(4), expert=ToyExpert(), on_iteration_end=at_boundary)
        collector.run()
    finally:
        tracemalloc.stop()
    (snap0, eps0), (snap1, eps1) = marks[3], marks[12]
    grown = sum(stat.size_diff for stat in snap1.compare_to(snap0, "filename"))
    per_episode = grown / (eps1 - eps0)
    # Before: ~9 KB per episode (the store's index of every episode, in the loop's process and
    # the writer's). What is left is in-flight data (queued batches, the compactor's tail).
    assert per_episode < 1000, f"{per_episode:.0f} bytes kept per committed episode"
    state = collector.store.refresh()
    assert state.episodes == {} and state.segments == {}
    assert state.next_episode_id == collector.progress.episodes_committed == 480


def test_run_summary_keeps_only_the_newest_iterations(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(collector_module, "PER_ITERATION_KEPT", 2, raising=False)
    cfg = _config(tmp_path, episodes_per_iteration=4, max_iterations=5)
    summary = Collector(cfg, env=ToyVecEnv(4), expert=ToyExpert()).run()
    assert summary.iterations == 5
    assert [it["iteration"] for it in summary.per_iteration] == [3, 4]
