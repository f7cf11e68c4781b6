"""PolicyExpert end to end (trained in seconds from planner data) and DemoExpert replay."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from odsd.envs import make_env
from odsd.experts import DemoExpert, Failure, PolicyExpert, evaluate_expert, make_expert, validate_query
from odsd.policies import LayoutMismatchError, fit_reference_mlp, publish_snapshot, reference_meta


@pytest.fixture(scope="module")
def trained_snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pick_place MLP behaviour-cloned from planner labels with odsd's own tools."""
    env = make_env("pick_place", num_envs=64, seed=0)
    demos = evaluate_expert(env, make_expert("planner", env.spec), episodes=128, seed=0, record=True)
    model = fit_reference_mlp(demos.obs_state, demos.actions, env.spec, hidden=(128, 128), epochs=15)
    root = tmp_path_factory.mktemp("policies")
    publish_snapshot(root, model, reference_meta(model, env.spec, parent_watermark=0))
    return root


def test_policy_expert_end_to_end(trained_snapshot: Path) -> None:
    env = make_env("pick_place", num_envs=64, seed=1)
    expert = make_expert(f"policy:{trained_snapshot}", env.spec)
    assert isinstance(expert, PolicyExpert)
    assert expert.spec.kind == "policy" and expert.spec.state_conditioned and expert.spec.version == "1"
    obs, _ = env.reset(seed=5)
    q = validate_query(expert.act(obs, env_ids=torch.arange(64)), env.spec, 64)
    assert q.valid.all() and q.metadata["policy_version"] == 1
    planner = make_expert("planner", env.spec)
    agreement = torch.nn.functional.cosine_similarity(
        q.action[:, :3], planner.act(obs, env_ids=torch.arange(64)).action[:, :3]
    )
    assert agreement.mean() > 0.8
    # A BC student from 128 expert episodes is weak on purpose (compounding error is what DAgger
    # fixes); it must still complete some episodes to show the checkpoint path works end to end.
    result = evaluate_expert(env, expert, episodes=64, seed=7)
    assert result.success_rate > 0.05, result.success_rate


def test_policy_expert_refuses_other_layouts(trained_snapshot: Path) -> None:
    reach = make_env("reach", num_envs=2).spec
    with pytest.raises(LayoutMismatchError):
        make_expert(f"policy:{trained_snapshot}", reach)


def test_demo_expert_replays_open_loop() -> None:
    env = make_env("reach", num_envs=2, seed=0)
    demos = [torch.full((3, 3), 0.1), torch.full((5, 3), -0.2)]
    expert = DemoExpert(demos, env.spec)
    assert expert.spec.kind == "demo" and not expert.spec.state_conditioned
    obs, info = env.reset()
    ids = torch.arange(2)
    actions = [expert.act(obs, env_ids=ids) for _ in range(4)]
    assert actions[0].action[0].tolist() == pytest.approx([0.1] * 3)
    assert actions[0].action[1].tolist() == pytest.approx([-0.2] * 3)
    assert actions[3].valid.tolist() == [False, True]
    assert actions[3].failure.tolist() == [Failure.DEMO_EXHAUSTED, 0]
    expert.reset(torch.tensor([0]), obs, info)  # row 0 takes the next demo (round robin: #0), from t = 0
    q = expert.act(obs, env_ids=torch.tensor([0]))
    assert q.valid.all() and q.metadata["demo_step"].tolist() == [0]
    assert q.action[0].tolist() == pytest.approx([0.1] * 3)
