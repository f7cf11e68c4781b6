"""Per-row fallbacks: invalid expert → student if valid, else safe hold; invalid students never run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from collect_helpers import (
    HOLD,
    STUDENT_ACTION,
    ToyExpert,
    ToyVecEnv,
    publish_toy_student,
    stored_episodes,
    toy_expert_action,
)

from odsd.collect import (
    SOURCE_EXPERT,
    SOURCE_HOLD,
    SOURCE_NAMES,
    SOURCE_STUDENT,
    BetaSchedule,
    CollectConfig,
    Collector,
)
from odsd.experts.failures import Failure

# row: (expert problem, student problem) -> expected source
EXPECTED = {
    0: None,  # both valid: mixed by beta
    1: SOURCE_STUDENT,  # expert NaN, student valid
    2: SOURCE_HOLD,  # expert invalid (unreachable), student NaN
    3: SOURCE_EXPERT,  # expert valid, student out of bounds
    4: SOURCE_HOLD,  # expert out of bounds, student out of bounds
    5: SOURCE_EXPERT,  # expert valid, student NaN
}
FAILURE = {
    0: 0,
    1: int(Failure.NON_FINITE),
    2: int(Failure.UNREACHABLE),
    3: 0,
    4: int(Failure.OUT_OF_BOUNDS),
    5: 0,
}


def frames_by_row(store: Path) -> dict[int, dict[str, np.ndarray]]:
    rows: dict[int, list[dict[str, np.ndarray]]] = {}
    for meta, frames in stored_episodes(store):
        rows.setdefault(meta.env_row, []).append(frames)
    return {r: {k: np.concatenate([f[k] for f in eps]) for k in eps[0]} for r, eps in rows.items()}


@pytest.fixture(scope="module")
def fallback_run(tmp_path_factory) -> tuple[Path, ToyVecEnv]:
    tmp = tmp_path_factory.mktemp("fallback")
    env = ToyVecEnv(6)
    publish_toy_student(tmp / "pol", env.spec, version=0, nan_rows=[2, 5], oob_rows=[3, 4])
    expert = ToyExpert(nan_rows=[1], invalid_rows=[2], oob_rows=[4])
    cfg = CollectConfig(
        mode="dagger_sync",
        task="toy",
        store=tmp / "s",
        student=str(tmp / "pol"),
        durability="process",
        episodes_per_iteration=24,
        max_iterations=1,
        beta=BetaSchedule(kind="constant", init_beta=0.5),
    )
    Collector(cfg, env=env, expert=expert).run()
    return tmp / "s", env


def test_source_per_row(fallback_run) -> None:
    rows = frames_by_row(fallback_run[0])
    assert sorted(rows) == list(range(6))
    for r, want in EXPECTED.items():
        src = rows[r]["action.source"]
        if want is None:
            assert set(src.tolist()) == {SOURCE_STUDENT, SOURCE_EXPERT}, "beta=0.5 should mix both"
        else:
            assert set(src.tolist()) == {want}, (
                f"row {r}: {SOURCE_NAMES[want]} expected, got {set(src.tolist())}"
            )


def test_failure_reason_and_validity_recorded(fallback_run) -> None:
    rows = frames_by_row(fallback_run[0])
    for r, code in FAILURE.items():
        f = rows[r]
        assert set(f["action.expert_failure"].tolist()) == {code}, r
        assert bool(f["action.expert_valid"].all()) == (code == 0), r
        assert bool(f["action.student_valid"].all()) == (r in (0, 1)), r
        assert np.isfinite(f["action.expert"]).all(), "invalid labels are sanitized, never NaN in the store"
        if code:
            assert (f["action.expert_confidence"] == 0).all()


def test_behavior_matches_its_source(fallback_run) -> None:
    rows = frames_by_row(fallback_run[0])
    for f in rows.values():
        src, behavior = f["action.source"], f["action.behavior"]
        label = toy_expert_action(torch.from_numpy(f["observation.state"])).numpy()
        np.testing.assert_allclose(behavior[src == SOURCE_EXPERT], label[src == SOURCE_EXPERT], atol=1e-6)
        np.testing.assert_allclose(
            behavior[src == SOURCE_STUDENT],
            np.broadcast_to(STUDENT_ACTION, behavior[src == SOURCE_STUDENT].shape),
        )
        np.testing.assert_allclose(
            behavior[src == SOURCE_HOLD], np.broadcast_to(HOLD, behavior[src == SOURCE_HOLD].shape)
        )
        valid_expert = f["action.expert_valid"]
        np.testing.assert_allclose(f["action.expert"][valid_expert], label[valid_expert], atol=1e-6)


def test_env_executed_exactly_the_recorded_behavior(fallback_run) -> None:
    """What the env received at (global step, row) is the stored action.behavior of that frame;
    the env itself asserts no NaN / out-of-bounds action was ever executed."""
    store, env = fallback_run
    executed = torch.stack(env.actions).numpy()  # [T, n, A]
    checked = 0
    for meta, frames in stored_episodes(store):
        t = frames["observation.state"][:, 3].astype(int)
        np.testing.assert_array_equal(executed[t, meta.env_row], frames["action.behavior"])
        checked += meta.length
    assert checked > 0
    assert np.isfinite(executed).all() and (np.abs(executed) <= 1.0).all()


def test_expert_demo_invalid_label_holds(tmp_path) -> None:
    """expert_demo has no student: a row whose label is invalid executes the safe hold."""
    env = ToyVecEnv(3)
    cfg = CollectConfig(
        mode="expert_demo",
        task="toy",
        store=tmp_path / "s",
        durability="process",
        episodes_per_iteration=6,
        max_iterations=1,
        keep_failed=True,
    )
    Collector(cfg, env=env, expert=ToyExpert(nan_rows=[1])).run()
    rows = frames_by_row(tmp_path / "s")
    assert set(rows[1]["action.source"].tolist()) == {SOURCE_HOLD}
    np.testing.assert_allclose(
        rows[1]["action.behavior"], np.broadcast_to(HOLD, rows[1]["action.behavior"].shape)
    )
    assert set(rows[0]["action.source"].tolist()) == {SOURCE_EXPERT}
    assert (rows[0]["beta"] == 1.0).all()
    assert (rows[0]["policy_version"] == -1).all(), "no student ran in expert_demo"
