"""Episode buffer slots: finished episodes wait in retired slots while their rows restart."""

from __future__ import annotations

import pytest
import torch

from odsd.collect.buffers import EpisodeBuffers

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
