"""The learner process logic: readiness on committed data, rounds, atomic publication."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from odsd.errors import ConfigError
from odsd.learn.bc import BCConfig
from odsd.learn.learner import Learner, LearnerConfig, wait_for_store
from odsd.policies import latest_snapshot, load_snapshot
from odsd.policies.snapshot import snapshot_versions


def test_learner_round_publishes_and_readiness_counts_committed_episodes(
    demo_store: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    shutil.copytree(demo_store, store)
    policies = tmp_path / "policies"
    cfg = LearnerConfig(
        store=store, policies_dir=policies, min_new_episodes=16, bc=BCConfig(steps=50), max_rounds=1
    )
    learner = Learner(cfg)
    assert learner.ready()  # 16 committed episodes, nothing trained yet
    assert learner.run(threading.Event()) == 1
    path = latest_snapshot(policies)
    assert path is not None and load_snapshot(path, env_spec=learner.spec).meta.extra["episodes"] == 16
    # Nothing new committed: a fresh learner on the same directory is not ready (no busy retraining).
    assert not Learner(cfg).ready()


def test_learner_config_errors() -> None:
    with pytest.raises(ConfigError, match="min_new_episodes"):
        LearnerConfig(store=Path("x"), min_new_episodes=0)
    with pytest.raises(ConfigError, match="recent_fraction needs recent"):
        LearnerConfig(store=Path("x"), recent_fraction=0.5)


def test_reader_never_loads_a_half_written_snapshot(demo_store: Path, tmp_path: Path) -> None:
    """A follower polling while snapshots are published only ever sees complete, verified ones."""
    store = tmp_path / "store"
    shutil.copytree(demo_store, store)
    policies = tmp_path / "policies"
    learner = Learner(
        LearnerConfig(store=store, policies_dir=policies, bc=BCConfig(steps=5), warm_start=False)
    )
    stop = threading.Event()
    seen: list[int] = []
    errors: list[BaseException] = []

    def follow() -> None:
        while not stop.is_set():
            for version, path in snapshot_versions(policies) if policies.exists() else []:
                try:
                    seen.append(load_snapshot(path, env_spec=learner.spec).version)
                except BaseException as exc:  # any partial read would show up here
                    errors.append(exc)
                assert version >= 0

    thread = threading.Thread(target=follow)
    thread.start()
    try:
        for _ in range(6):
            learner.round()
    finally:
        stop.set()
        thread.join()
    assert not errors, errors[:3]
    assert set(seen) <= set(range(1, 7)) and seen


def test_learner_waits_for_the_collector_to_create_the_store(demo_store: Path, tmp_path: Path) -> None:
    store = tmp_path / "late"
    cfg = LearnerConfig(store=store, poll_interval_s=0.02, min_new_episodes=16)
    staging = tmp_path / "staging"
    shutil.copytree(demo_store, staging)
    creator = threading.Timer(0.3, lambda: staging.rename(store))
    creator.start()
    try:
        assert wait_for_store(cfg, threading.Event())
    finally:
        creator.join()
    assert Learner(cfg).ready()
    stop = threading.Event()
    stop.set()
    assert not wait_for_store(LearnerConfig(store=tmp_path / "never"), stop)


def test_learner_trains_on_named_segments_only(demo_store: Path, tmp_path: Path, monkeypatch) -> None:
    import odsd.learn.learner as learner_module

    seen = []
    real_train = learner_module.train_bc

    def spy(dataset, *args, **kwargs):
        seen.append(dataset)
        return real_train(dataset, *args, **kwargs)

    monkeypatch.setattr(learner_module, "train_bc", spy)
    cfg = LearnerConfig(
        store=demo_store,
        policies_dir=tmp_path / "p",
        bc=BCConfig(steps=20),
        segments=("grasp",),
        max_rounds=1,
    )
    Learner(cfg).round()
    (dataset,) = seen
    view = dataset.view
    grasp = {
        int(view.segment_id[view.from_index[i] + ref.start])
        for i, entry in enumerate(view.entries)
        for ref in entry.meta.segments
        if ref.name == "grasp"
    }
    assert len(dataset) > 0 and len(grasp) == 1
    assert set(view.segment_id[dataset.anchors].tolist()) == grasp  # every training anchor is a grasp frame


def test_learner_names_the_segments_that_exist(demo_store: Path, tmp_path: Path) -> None:
    cfg = LearnerConfig(
        store=demo_store, policies_dir=tmp_path / "p", bc=BCConfig(steps=5), segments=("nope",)
    )
    with pytest.raises(
        ConfigError, match=r"no selected episode has a segment named nope \(segments present: reach"
    ):
        Learner(cfg).round()
