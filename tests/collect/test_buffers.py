"""Episode buffer slots: finished episodes wait in retired slots while their rows restart."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from collect_helpers import ToyExpert, ToyVecEnv, stored_episodes

from odsd.collect import CollectConfig, Collector, frame_features
from odsd.collect.buffers import EpisodeBuffers, frame_nbytes, spare_slots_within
from odsd.collect.derived import DERIVED_FIELDS
from odsd.errors import ConfigError

FEATURES = {
    "x": {"dtype": "float32", "shape": [2]},
    "flag": {"dtype": "bool", "shape": []},
    "k": {"dtype": "int32", "shape": []},
}


def record(buf: EpisodeBuffers, step: torch.Tensor, value: float) -> None:
    n = buf.num_envs
    rows = torch.arange(n, dtype=torch.float32)
    buf.record(
        {
            "x": torch.stack((rows, torch.full((n,), value)), dim=1),
            "flag": torch.ones(n, dtype=torch.bool),
            "k": step.to(torch.int32),
        },
        step,
    )


def test_retired_episodes_survive_the_rows_next_episode() -> None:
    buf = EpisodeBuffers(FEATURES, num_envs=3, max_steps=5, device=torch.device("cpu"), spare_slots=3)
    step = torch.zeros(3, dtype=torch.long)
    for t in range(3):
        record(buf, step, float(t))
        step += 1
    old = buf.retire(torch.tensor([1]))
    step[1] = 0
    record(buf, step, 9.0)  # row 1's new episode writes into a fresh slot
    frames, offsets = buf.take_concat(old, torch.tensor([3]))
    assert offsets.tolist() == [0, 3]
    assert frames["x"][:, 1].tolist() == [0.0, 1.0, 2.0] and (frames["x"][:, 0] == 1).all()
    assert frames["k"].tolist() == [0, 1, 2]
    assert buf.field("x")[1, 0, 1].item() == 9.0
    buf.release(old)
    assert buf.free_slots == 3


def test_retiring_more_rows_than_free_slots_is_refused() -> None:
    buf = EpisodeBuffers(FEATURES, num_envs=2, max_steps=4, device=torch.device("cpu"), spare_slots=1)
    buf.retire(torch.tensor([0]))
    with pytest.raises(RuntimeError, match="slots are free"):
        buf.retire(torch.tensor([1]))


def test_an_episode_longer_than_the_buffer_is_refused() -> None:
    buf = EpisodeBuffers(FEATURES, num_envs=2, max_steps=2, device=torch.device("cpu"))
    with pytest.raises(RuntimeError, match="longer than the buffer"):
        record(buf, torch.tensor([2, 0]), 0.0)


def test_spare_slots_fit_the_memory_budget() -> None:
    assert spare_slots_within(8, 1000, 10**9) == 8  # plenty: as many spares as rows
    assert spare_slots_within(8, 1000, 11_000) == 3  # 8 rows + 3 spares = 11 slots
    assert spare_slots_within(8, 1000, 9_000) == 1


def test_a_budget_below_one_spare_episode_names_the_size_needed() -> None:
    with pytest.raises(ConfigError, match=r"episode buffers need .* MiB .*8 rows \+ 1 spare"):
        spare_slots_within(8, 2**20, 8 * 2**20)


def test_frame_nbytes_counts_every_field() -> None:
    feats = {**FEATURES, "cam": {"dtype": "uint8", "shape": [4, 5, 3]}}
    assert frame_nbytes(feats) == 2 * 4 + 1 + 4 + 60
    buf = EpisodeBuffers(feats, num_envs=2, max_steps=3, device=torch.device("cpu"), spare_slots=1)
    assert buf.nbytes == 3 * 3 * frame_nbytes(feats)


def test_a_tight_buffer_budget_commits_the_same_episodes(tmp_path) -> None:
    """With one spare slot, finished episodes are copied out early; the stored data is the same."""
    stores = {}
    for name, budget in (("roomy", 4 * 2**30), ("tight", None)):
        env = ToyVecEnv(4)
        if budget is None:
            budget = (4 + 1) * env.spec.max_episode_steps * frame_nbytes(_recorded(env))
        cfg = CollectConfig(
            mode="expert_demo",
            task="toy",
            store=tmp_path / name,
            durability="process",
            keep_failed=True,
            max_episodes=24,
            episode_buffer_bytes=budget,
        )
        collector = Collector(cfg, env=env, expert=ToyExpert())
        assert collector.buffers.num_slots == (8 if name == "roomy" else 5)
        collector.run()
        stores[name] = stored_episodes(tmp_path / name)
    assert len(stores["tight"]) == len(stores["roomy"]) == 24
    for (meta_a, frames_a), (meta_b, frames_b) in zip(
        sorted(stores["roomy"], key=lambda i: tuple(i[1]["observation.state"][0].tolist())),
        sorted(stores["tight"], key=lambda i: tuple(i[1]["observation.state"][0].tolist())),
        strict=True,
    ):
        assert meta_a.length == meta_b.length and meta_a.success == meta_b.success
        for field in ("observation.state", "action.behavior", "action.source", "reward"):
            np.testing.assert_array_equal(frames_a[field], frames_b[field])


def _recorded(env: ToyVecEnv) -> dict:
    return {k: v for k, v in frame_features(env.spec).items() if k not in DERIVED_FIELDS}


def test_the_writer_queue_is_bounded_in_bytes(tmp_path) -> None:
    env = ToyVecEnv(4)
    slot = env.spec.max_episode_steps * frame_nbytes(_recorded(env))
    cfg = CollectConfig(
        mode="expert_demo",
        task="toy",
        store=tmp_path / "s",
        durability="process",
        commit_queue_bytes=10 * 4 * slot,
    )
    assert Collector(cfg, env=env, expert=ToyExpert())._queue_size() == 10  # batches of 4 spare episodes
    cfg = cfg.model_copy(update={"commit_queue_bytes": 1})
    assert Collector(cfg, env=ToyVecEnv(4), expert=ToyExpert())._queue_size() == 1
