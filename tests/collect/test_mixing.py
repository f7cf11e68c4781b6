"""Per-row beta mixing: rates, per-step vs per-episode units, and exact resume from ``state()``."""

from __future__ import annotations

import json

import pytest
import torch

from odsd.collect import BetaMixer

CPU = torch.device("cpu")


def draws(mixer: BetaMixer, beta: float, steps: int, *, restart_every: int = 0) -> list[list[bool]]:
    out = []
    for t in range(steps):
        if restart_every and t % restart_every == 0:
            mixer.start_episodes(torch.tensor([0, 2]))
        out.append(mixer.use_expert(beta, CPU).tolist())
    return out


@pytest.mark.parametrize("unit", ["step", "episode"])
def test_same_seed_same_draws(unit: str) -> None:
    a, b = BetaMixer(5, seed=3, unit=unit), BetaMixer(5, seed=3, unit=unit)
    assert draws(a, 0.5, 20, restart_every=4) == draws(b, 0.5, 20, restart_every=4)


def test_different_seeds_differ() -> None:
    assert draws(BetaMixer(16, seed=1), 0.5, 5) != draws(BetaMixer(16, seed=2), 0.5, 5)


@pytest.mark.parametrize("unit", ["step", "episode"])
def test_resume_from_state_is_exact(unit: str) -> None:
    """Save state mid-run (through JSON), restore into a fresh mixer: identical continuation."""
    ref = BetaMixer(8, seed=11, unit=unit)
    draws(ref, 0.4, 7, restart_every=3)
    saved = json.loads(json.dumps(ref.state()))
    expected = draws(ref, 0.4, 15, restart_every=3)

    resumed = BetaMixer(8, seed=999, unit=unit)  # a different seed: state must override it
    resumed.restore(saved)
    assert draws(resumed, 0.4, 15, restart_every=3) == expected


def test_resume_preserves_pending_episode_draws() -> None:
    """Per-episode decisions drawn before the save hold after restore (rows mid-episode)."""
    ref = BetaMixer(6, seed=5, unit="episode")
    ref.start_episodes(torch.arange(6))
    before = ref.use_expert(0.5, CPU)
    resumed = BetaMixer(6, seed=0, unit="episode")
    resumed.restore(ref.state())
    assert torch.equal(resumed.use_expert(0.5, CPU), before)


def test_per_episode_constant_within_episode() -> None:
    m = BetaMixer(64, seed=0, unit="episode")
    m.start_episodes(torch.arange(64))
    first = m.use_expert(0.5, CPU)
    for _ in range(10):
        assert torch.equal(m.use_expert(0.5, CPU), first)
    m.start_episodes(torch.tensor([1, 2, 3]))
    after = m.use_expert(0.5, CPU)
    untouched = torch.ones(64, dtype=torch.bool)
    untouched[[1, 2, 3]] = False
    assert torch.equal(after[untouched], first[untouched])


def test_per_step_varies_between_steps() -> None:
    m = BetaMixer(64, seed=0, unit="step")
    assert not torch.equal(m.use_expert(0.5, CPU), m.use_expert(0.5, CPU))


@pytest.mark.parametrize("unit", ["step", "episode"])
@pytest.mark.parametrize("beta", [0.1, 0.5, 0.9])
def test_rate_matches_beta(unit: str, beta: float) -> None:
    m = BetaMixer(4096, seed=0, unit=unit)
    rates = []
    for _ in range(10):
        m.start_episodes(torch.arange(4096))
        rates.append(m.use_expert(beta, CPU).float().mean().item())
    assert sum(rates) / len(rates) == pytest.approx(beta, abs=0.02)


def test_extremes_are_exact_and_consume_no_draws() -> None:
    m, ref = BetaMixer(32, seed=4), BetaMixer(32, seed=4)
    assert m.use_expert(1.0, CPU).all() and not m.use_expert(0.0, CPU).any()
    assert torch.equal(m.use_expert(0.5, CPU), ref.use_expert(0.5, CPU))


def test_start_episodes_noop_for_step_unit() -> None:
    m, ref = BetaMixer(8, seed=9, unit="step"), BetaMixer(8, seed=9, unit="step")
    m.start_episodes(torch.arange(8))
    assert torch.equal(m.use_expert(0.5, CPU), ref.use_expert(0.5, CPU))
