"""resume_config / capture / restore / recount, in process (fast) on the reach task."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from odsd.collect import CollectConfig, Collector
from odsd.collect.beta import BetaSchedule
from odsd.daemon.errors import RunStateError
from odsd.daemon.resume import UNSAFE_CHANGES, identity_hash, restore, resume_config
from odsd.daemon.run_state import RunStateStore
from odsd.daemon.service import CollectService, load_resume
from odsd.schema.run import RunState
from odsd.store import EpisodeStore

EPI = 6


def config(store: Path, **kw: Any) -> CollectConfig:
    base = {
        "mode": "dagger_sync",
        "task": "reach",
        "num_envs": 4,
        "episodes_per_iteration": EPI,
        "max_iterations": 3,
        "store": store,
        "run_id": "r1",
        "durability": "process",
        "seed": 3,
    }
    return CollectConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An in-process service run of 3 iterations; manifests 0..2 at boundaries, 3 at shutdown."""
    store = tmp_path_factory.mktemp("resume") / "store"
    summary = CollectService(config(store)).run()
    assert summary.stop_reason == "max_iterations" and summary.episodes_committed == 3 * EPI
    return store


def manifests(store: Path) -> list[RunState]:
    states = RunStateStore(store / "runs" / "r1")
    return [
        RunState.model_validate_json((states.dir / f"{s:08d}" / "manifest.json").read_bytes())
        for s in states.sequences()
    ]


def test_manifests_at_start_every_boundary_and_at_shutdown(ran: Path) -> None:
    ms = manifests(ran)
    assert [m.reason for m in ms] == ["start"] + ["iteration"] * 3 + ["shutdown"]
    assert [m.sequence for m in ms] == [0, 1, 2, 3, 4]
    assert [m.counters.iteration for m in ms] == [0, 1, 2, 3, 3]
    assert [m.counters.episodes_committed for m in ms] == [0, 6, 12, 18, 18]
    assert all(m.counters.episodes_in_iteration == 0 for m in ms)
    assert [m.beta for m in ms] == [1.0, 0.5, 0.25, 0.125, 0.125]
    store = EpisodeStore.open(ran)
    for m in ms:
        # Everything a manifest counts is committed at or below its watermark.
        snap = store.snapshot(m.watermark)
        assert snap.num_episodes == m.counters.episodes_committed
    assert ms[-1].policy_path is not None and ms[-1].policy_version == 0
    assert ms[-1].config_identity_hash == identity_hash(config(ran))


def test_restore_puts_a_fresh_collector_where_the_manifest_left_it(ran: Path) -> None:
    cfg, state = load_resume(ran, "r1", {"max_iterations": 5})
    assert state.reason == "shutdown" and cfg.max_iterations == 5 and cfg.run_id == "r1"
    c = Collector(cfg, incarnation=state.incarnation + 1)
    torch.manual_seed(12345)
    np.random.seed(12345)
    restore(c, state)
    assert c.progress.__dict__ == state.counters.model_dump()
    assert c.beta == state.beta == 0.125
    assert c.policy_version == state.policy_version
    assert base64.b64encode(torch.random.get_rng_state().numpy().tobytes()).decode() == state.rng.torch
    assert np.random.get_state()[2] == state.rng.numpy["pos"]
    assert c.mixer.state() == state.rng.mixer
    assert c.env_seed != state.rng.env_seed  # a new incarnation reseeds its envs


def test_recount_includes_episodes_committed_after_the_manifest(ran: Path) -> None:
    """A SIGKILL after commits but before the next manifest loses no counted progress."""
    first = manifests(ran)[0]  # after iteration 0: 12 more episodes were committed later
    cfg = resume_config(first, {"max_iterations": 5})
    c = Collector(cfg, incarnation=1)
    restore(c, first)
    assert c.progress.iteration == 3 and c.progress.episodes_in_iteration == 0
    assert c.progress.episodes_committed == 18 and c.progress.episodes_accepted == 18
    assert c.beta == 0.125


def test_restore_refuses_a_watermark_beyond_the_store(ran: Path) -> None:
    _, state = load_resume(ran, "r1", {})
    bad = state.model_copy(update={"watermark": state.watermark + 100})
    c = Collector(resume_config(state, {}), incarnation=1)
    with pytest.raises(RunStateError, match="beyond the store"):
        restore(c, bad)


@pytest.mark.parametrize(("field", "bad"), [("schema_hash", "x" * 16), ("env_layout_hash", "y" * 16)])
def test_restore_refuses_changed_schema_or_layout(ran: Path, field: str, bad: str) -> None:
    _, state = load_resume(ran, "r1", {})
    c = Collector(resume_config(state, {}), incarnation=1)
    with pytest.raises(RunStateError):
        restore(c, state.model_copy(update={field: bad}))


def test_restore_refuses_a_missing_student_snapshot(ran: Path, tmp_path: Path) -> None:
    _, state = load_resume(ran, "r1", {})
    c = Collector(resume_config(state, {}), incarnation=1)
    with pytest.raises(RunStateError, match="cannot load its student"):
        restore(c, state.model_copy(update={"policy_path": str(tmp_path / "nope" / "v000000")}))


UNSAFE = {
    "task": "pick_place",
    "task_kwargs": {"goal_radius": 0.5},
    "expert": "planner:other",
    "expert_kwargs": {"noise": 0.1},
    "mode": "expert_demo",
    "record_state": True,
    "num_envs": 8,
    "mixing": "episode",
    "beta": BetaSchedule(init_beta=0.5),
    "episodes_per_iteration": 7,
    "seed": 4,
}


def test_every_unsafe_field_is_covered() -> None:
    assert set(UNSAFE) == set(UNSAFE_CHANGES)


@pytest.fixture(scope="module")
def state(ran: Path) -> RunState:
    return load_resume(ran, "r1", {})[1]


@pytest.mark.parametrize("field", sorted(UNSAFE))
def test_resume_refuses_unsafe_changes(state: RunState, field: str) -> None:
    with pytest.raises(RunStateError) as err:
        resume_config(state, {field: UNSAFE[field]})
    assert f"resume cannot change {field}" in str(err.value)
    assert identity_hash(CollectConfig.model_validate({**state.config, field: UNSAFE[field]})) != (
        state.config_identity_hash
    )


@pytest.mark.parametrize(
    "override",
    [
        {"max_iterations": 9},
        {"max_episodes": 100},
        {"duration_s": 5.0},
        {"metrics_interval_s": 1.0},
        {"commit_max_episodes": 4},
        {"durability": "fsync"},
        {"task": "reach", "seed": 3},  # same values are not changes
        {"seed": None},  # None means "not given"
    ],
)
def test_resume_accepts_safe_overrides(state: RunState, override: dict[str, Any]) -> None:
    cfg = resume_config(state, override)
    for k, v in override.items():
        if v is not None:
            assert getattr(cfg, k) == v
    assert identity_hash(cfg) == state.config_identity_hash
