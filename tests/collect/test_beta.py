"""Beta schedules: exponential / linear / constant, the beta_min clamp and init_beta at k = 0."""

from __future__ import annotations

import pytest
from collect_helpers import ToyExpert, ToyVecEnv, publish_toy_student
from pydantic import ValidationError

from odsd.collect import BetaSchedule, CollectConfig, Collector


def test_exponential_values() -> None:
    s = BetaSchedule(kind="exponential", init_beta=0.8, decay=0.5, beta_min=0.0)
    assert [s.value(k) for k in range(4)] == pytest.approx([0.8, 0.4, 0.2, 0.1])


def test_exponential_clamps_at_beta_min() -> None:
    s = BetaSchedule(kind="exponential", init_beta=1.0, decay=0.5, beta_min=0.2)
    assert [s.value(k) for k in range(5)] == pytest.approx([1.0, 0.5, 0.25, 0.2, 0.2])
    assert s.value(1000) == pytest.approx(0.2)


def test_linear_values_and_clamp() -> None:
    s = BetaSchedule(kind="linear", init_beta=0.9, decay=0.3, beta_min=0.1)
    assert [s.value(k) for k in range(5)] == pytest.approx([0.9, 0.6, 0.3, 0.1, 0.1])
    assert BetaSchedule(kind="linear", init_beta=0.5, decay=0.5).value(3) == 0.0


def test_constant_ignores_k() -> None:
    s = BetaSchedule(kind="constant", init_beta=0.3, decay=0.9)
    assert {s.value(k) for k in range(10)} == {0.3}


@pytest.mark.parametrize("kind", ["exponential", "linear", "constant"])
def test_init_beta_is_used_at_k0(kind: str) -> None:
    assert BetaSchedule(kind=kind, init_beta=0.37, decay=0.5).value(0) == pytest.approx(0.37)


def test_default_schedule_matches_design() -> None:
    s = BetaSchedule()
    assert (s.kind, s.value(0), s.value(1)) == ("exponential", 1.0, 0.5)


def test_pure_function_of_k() -> None:
    s = BetaSchedule(init_beta=0.9, decay=0.7, beta_min=0.05)
    assert [s.value(k) for k in (3, 0, 3, 7, 3)] == [
        s.value(3),
        s.value(0),
        s.value(3),
        s.value(7),
        s.value(3),
    ]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"init_beta": 1.5},
        {"init_beta": -0.1},
        {"decay": -1.0},
        {"kind": "exponential", "decay": 1.5},
        {"beta_min": 0.6, "init_beta": 0.5},
        {"kind": "cosine"},
        {"bogus": 1},
    ],
)
def test_invalid_schedules_rejected(kwargs: dict) -> None:
    with pytest.raises(ValidationError):
        BetaSchedule(**kwargs)


def test_negative_iteration_rejected() -> None:
    with pytest.raises(ValueError):
        BetaSchedule().value(-1)


def test_collector_records_schedule_per_iteration(tmp_path) -> None:
    """Frames and episode metas carry beta_k of the iteration they were collected in."""
    env = ToyVecEnv(3)
    publish_toy_student(tmp_path / "pol", env.spec, version=0)
    cfg = CollectConfig(
        mode="dagger_sync",
        task="toy",
        store=tmp_path / "s",
        student=str(tmp_path / "pol"),
        durability="process",
        episodes_per_iteration=3,
        max_iterations=3,
        beta=BetaSchedule(kind="exponential", init_beta=0.8, decay=0.5, beta_min=0.3),
    )
    summary = Collector(cfg, env=env, expert=ToyExpert()).run()
    assert [it["beta"] for it in summary.per_iteration] == pytest.approx([0.8, 0.4, 0.3])
    assert [it["iteration"] for it in summary.per_iteration] == [0, 1, 2]
