"""Rows finish and reset independently without leaking data between rows or episodes, and
terminal frames keep the pre-action observation (the reset observation starts the next episode)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from collect_helpers import ToyExpert, ToyVecEnv, publish_toy_student, stored_episodes

from odsd.collect import BetaSchedule, CollectConfig, Collector


@pytest.fixture(scope="module")
def staggered(tmp_path_factory) -> tuple[Path, ToyVecEnv]:
    tmp = tmp_path_factory.mktemp("staggered")
    env = ToyVecEnv(5, max_episode_steps=10)  # lengths 3..11 per (row, episode); 11 truncates at 10
    publish_toy_student(tmp / "pol", env.spec, version=0)
    cfg = CollectConfig(
        mode="dagger_sync",
        task="toy",
        store=tmp / "s",
        student=str(tmp / "pol"),
        durability="process",
        episodes_per_iteration=10,
        max_iterations=3,
        commit_max_episodes=4,
        beta=BetaSchedule(kind="constant", init_beta=0.5),
    )
    Collector(cfg, env=env, expert=ToyExpert()).run()
    return tmp / "s", env


def test_each_episode_is_one_row_and_one_episode(staggered) -> None:
    store, env = staggered
    episodes = stored_episodes(store)
    assert len(episodes) >= 30
    for meta, f in episodes:
        x = f["observation.state"]
        n = meta.length
        assert (x[:, 0] == meta.env_row).all(), "frames from another row leaked in"
        assert len(set(x[:, 1].tolist())) == 1, "frames from two episodes of a row were mixed"
        k = int(x[0, 1])
        assert n == env.length(meta.env_row, k)
        np.testing.assert_array_equal(x[:, 2], np.arange(n))
        np.testing.assert_array_equal(f["episode_step"], np.arange(n))
        assert (np.diff(x[:, 3]) == 1).all(), "frames of one episode are consecutive env steps"
        np.testing.assert_allclose(f["reward"], np.arange(1, n + 1) + 0.5)


def test_done_flags_only_on_the_last_frame(staggered) -> None:
    store, env = staggered
    saw_truncation = False
    for meta, f in stored_episodes(store):
        k = int(f["observation.state"][0, 1])
        natural = env.length_fn(meta.env_row, k) <= env.spec.max_episode_steps
        assert not f["terminated"][:-1].any() and not f["truncated"][:-1].any()
        assert bool(f["terminated"][-1]) == natural == meta.terminated
        assert bool(f["truncated"][-1]) == (not natural) == meta.truncated
        assert meta.success == (natural and env.success_fn(meta.env_row, k))
        assert not f["success"][:-1].any() and bool(f["success"][-1]) == meta.success
        assert meta.terminal_reason == (
            "success" if meta.success else "terminated" if natural else "truncated"
        )
        saw_truncation |= not natural
    assert saw_truncation


def test_rows_keep_every_episode_in_order(staggered) -> None:
    """dagger_sync keeps every finished episode: per row, episode indices run 0, 1, 2, ... with no gap."""
    store, env = staggered
    per_row: dict[int, list[int]] = {}
    for meta, f in stored_episodes(store):
        per_row.setdefault(meta.env_row, []).append(int(f["observation.state"][0, 1]))
    assert sorted(per_row) == list(range(env.n))
    for row, ks in per_row.items():
        assert ks == list(range(len(ks))), f"row {row}: {ks}"


def test_terminal_frame_keeps_pre_action_observation(staggered) -> None:
    """Last frame: the obs before the terminal action (step len-1), not the reset obs; the next
    episode of the row starts with the reset obs (step 0), produced by the same env step."""
    store, _ = staggered
    per_row: dict[int, list[np.ndarray]] = {}
    for meta, f in stored_episodes(store):
        x = f["observation.state"]
        assert x[-1, 2] == meta.length - 1 and x[0, 2] == 0
        per_row.setdefault(meta.env_row, []).append(x)
    pairs = 0
    for eps in per_row.values():
        for prev, nxt in itertools.pairwise(eps):
            assert nxt[0, 1] == prev[0, 1] + 1 and nxt[0, 2] == 0
            assert nxt[0, 3] == prev[-1, 3] + 1, "the reset obs follows the terminal step"
            pairs += 1
    assert pairs > 10


def test_segments_follow_the_expert_phase(staggered) -> None:
    store, _ = staggered
    for meta, f in stored_episodes(store):
        step = f["observation.state"][:, 2].astype(int)
        phase = (step // 2) % 3
        np.testing.assert_array_equal(f["segment_id"], phase)
        starts = np.r_[True, phase[1:] != phase[:-1]]
        np.testing.assert_array_equal(f["segment_start"], starts)
        seg_step = np.zeros_like(step)
        for i in range(1, len(step)):
            seg_step[i] = 0 if starts[i] else seg_step[i - 1] + 1
        np.testing.assert_array_equal(f["segment_step"], seg_step)
        table = meta.segments
        assert [s.start for s in table] == np.flatnonzero(starts).tolist()
        assert table[-1].end == meta.length
        assert [s.name for s in table] == [["a", "b", "c"][int(phase[s.start])] for s in table]
        assert table[-1].success == meta.success


def test_expert_is_reset_for_exactly_the_finished_rows(tmp_path) -> None:
    env = ToyVecEnv(4)
    expert = ToyExpert()
    cfg = CollectConfig(
        mode="expert_demo",
        task="toy",
        store=tmp_path / "s",
        durability="process",
        episodes_per_iteration=8,
        max_iterations=1,
        keep_failed=True,
    )
    Collector(cfg, env=env, expert=expert).run()
    assert expert.resets == env.resets, "expert.reset must follow env resets row for row"
    assert env.closed
