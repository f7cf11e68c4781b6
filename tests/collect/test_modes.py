"""What each mode commits and which experts it accepts."""

from __future__ import annotations

import pytest
import torch
from collect_helpers import ToyExpert, ToyVecEnv, publish_toy_student, stored_episodes

from odsd.collect import CollectConfig, Collector
from odsd.errors import ConfigError
from odsd.experts import DemoExpert


def run(tmp_path, mode: str, **kw):
    env = ToyVecEnv(4)
    if mode != "expert_demo":
        publish_toy_student(tmp_path / "pol", env.spec, version=0)
    cfg = CollectConfig(
        mode=mode,
        task="toy",
        store=tmp_path / "s",
        student=str(tmp_path / "pol"),
        durability="process",
        episodes_per_iteration=8,
        max_iterations=1,
        **kw,
    )
    summary = Collector(cfg, env=env, expert=kw.pop("expert", None) or ToyExpert()).run()
    return summary, [m for m, _ in stored_episodes(tmp_path / "s")]


def test_expert_demo_is_success_only_by_default(tmp_path) -> None:
    summary, metas = run(tmp_path, "expert_demo")
    assert len(metas) == 8 and all(m.success for m in metas)
    assert summary.episodes_finished > summary.episodes_committed == 8, "failures were finished but dropped"


def test_expert_demo_keep_failed(tmp_path) -> None:
    _, metas = run(tmp_path, "expert_demo", keep_failed=True)
    assert len(metas) == 8 and {m.success for m in metas} == {True, False}


def test_dagger_sync_keeps_failed_episodes(tmp_path) -> None:
    _, metas = run(tmp_path, "dagger_sync")
    assert len(metas) == 8 and {m.success for m in metas} == {True, False}
    assert all(m.policy_version_first == 0 for m in metas)
    assert all(m.expert_name == "toy" and m.expert_version == "7" for m in metas)


def test_dagger_sync_success_only(tmp_path) -> None:
    _, metas = run(tmp_path, "dagger_sync", success_only=True)
    assert len(metas) == 8 and all(m.success for m in metas)


@pytest.mark.parametrize(
    "expert",
    [
        ToyExpert(kind="demo", state_conditioned=False),
        ToyExpert(kind="planner", state_conditioned=False),
        ToyExpert(kind="demo", state_conditioned=True),
    ],
    ids=["demo", "not-state-conditioned", "demo-kind"],
)
def test_dagger_sync_refuses_non_state_conditioned_experts(tmp_path, expert) -> None:
    env = ToyVecEnv(2)
    cfg = CollectConfig(mode="dagger_sync", task="toy", store=tmp_path / "s", durability="process")
    with pytest.raises(ConfigError, match="state-conditioned"):
        Collector(cfg, env=env, expert=expert)
    assert not (tmp_path / "s").exists(), "a refused config must not create a store"


def test_dagger_sync_refuses_demo_expert_class(tmp_path) -> None:
    env = ToyVecEnv(2)
    demo = DemoExpert([torch.zeros(5, 2)], env.spec)
    cfg = CollectConfig(mode="dagger_sync", task="toy", store=tmp_path / "s", durability="process")
    with pytest.raises(ConfigError) as info:
        Collector(cfg, env=env, expert=demo)
    assert "\n" not in str(info.value)


def test_expert_demo_accepts_demo_expert(tmp_path) -> None:
    env = ToyVecEnv(2)
    demo = DemoExpert([torch.full((20, 2), 0.1)], env.spec)
    cfg = CollectConfig(
        mode="expert_demo",
        task="toy",
        store=tmp_path / "s",
        durability="process",
        episodes_per_iteration=2,
        max_iterations=1,
        keep_failed=True,
    )
    summary = Collector(cfg, env=env, expert=demo).run()
    assert summary.episodes_committed == 2


def test_record_state_without_state_layout_is_refused_early(tmp_path) -> None:
    env = ToyVecEnv(2)
    cfg = CollectConfig(
        mode="expert_demo", task="toy", store=tmp_path / "s", durability="process", record_state=True
    )
    with pytest.raises(ConfigError, match="record_state"):
        Collector(cfg, env=env, expert=ToyExpert())
    assert not (tmp_path / "s").exists()
