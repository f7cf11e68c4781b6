"""Planner experts: success rates acting alone, state-conditioned labels, phases, query purity."""

from __future__ import annotations

import pytest
import torch

from odsd.envs import make_env
from odsd.experts import Expert, ExpertNotFoundError, evaluate_expert, make_expert, validate_query


@pytest.mark.parametrize(("task", "phases"), [("reach", 1), ("pick_place", 6)])
def test_planner_success_rate_over_256_episodes(task: str, phases: int) -> None:
    env = make_env(task, num_envs=128, seed=0)
    expert = make_expert("planner", env.spec)
    assert isinstance(expert, Expert)
    assert expert.spec.kind == "planner" and expert.spec.state_conditioned
    assert len(expert.phase_names) == phases
    result = evaluate_expert(env, expert, episodes=256, seed=0)
    assert result.episodes == 256
    assert result.success_rate >= 0.98, result
    assert not result.failures


def test_pick_place_phases_follow_the_task_order() -> None:
    env = make_env("pick_place", num_envs=1, seed=0, action_noise=0.0, push_prob=0.0, slip_prob=0.0)
    expert = make_expert("planner", env.spec)
    obs, _ = env.reset(seed=3)
    seen: list[str] = []
    for _ in range(env.spec.max_episode_steps):
        q = expert.act(obs, env_ids=torch.tensor([0]))
        name = expert.phase_names[int(q.metadata["phase"][0])]
        if not seen or seen[-1] != name:
            seen.append(name)
        obs, _, terminated, truncated, info = env.step(q.action)
        if terminated[0] or truncated[0]:
            break
    assert bool(info["success"][0])
    assert seen == ["reach", "grasp", "lift", "transport", "place", "release"]


def test_planner_labels_arbitrary_states() -> None:
    env = make_env("pick_place", num_envs=512, seed=0)
    expert = make_expert("planner", env.spec)
    obs, _ = env.reset(seed=0)
    g = torch.Generator().manual_seed(0)
    state = env.get_state()
    state["ee_pos"] = torch.rand(512, 3, generator=g) * torch.tensor([0.6, 0.6, 0.29]) + torch.tensor(
        [-0.3, -0.3, 0.01]
    )
    state["gripper"] = torch.rand(512, 1, generator=g)
    obs = env.set_state(state)
    q = validate_query(expert.act(obs, env_ids=torch.arange(512)), env.spec, 512)
    assert q.valid.all() and torch.isfinite(q.action).all()
    assert set(q.metadata["phase"].tolist()) <= set(range(6))


def test_planner_recovers_from_a_missed_grasp() -> None:
    env = make_env("pick_place", num_envs=1, seed=0, action_noise=0.0, push_prob=0.0, slip_prob=0.0)
    expert = make_expert("planner", env.spec)
    env.reset(seed=0)
    for _ in range(4):  # close the gripper on nothing, then put it at the cube
        env.step(torch.tensor([[0.0, 0.0, 0.0, -1.0]]))
    state = env.get_state()
    state["ee_pos"][0] = state["cube_pos"][0]
    obs = env.set_state(state)
    q = expert.act(obs, env_ids=torch.tensor([0]))
    assert q.action[0, 3] > 0  # open first
    for _ in range(env.spec.max_episode_steps):
        obs, _, terminated, truncated, info = env.step(expert.act(obs, env_ids=torch.tensor([0])).action)
        if terminated[0] or truncated[0]:
            break
    assert bool(info["success"][0])


def test_non_finite_observation_rows_are_invalid_without_touching_others() -> None:
    env = make_env("reach", num_envs=3, seed=0)
    expert = make_expert("planner", env.spec)
    obs, _ = env.reset()
    obs["goal_pos"][1, 0] = float("nan")
    q = validate_query(expert.act(obs, env_ids=torch.arange(3)), env.spec, 3)
    assert q.valid.tolist() == [True, False, True]
    assert q.failure[1].item() == 8  # invalid_observation


def test_planner_reports_unreachable_rows() -> None:
    env = make_env("reach", num_envs=2, seed=0)
    expert = make_expert("planner", env.spec)
    obs, _ = env.reset()
    obs["goal_pos"][0, 2] = 5.0
    q = expert.act(obs, env_ids=torch.arange(2))
    assert q.valid.tolist() == [False, True] and q.failure.tolist() == [4, 0]


@pytest.mark.parametrize("task", ["reach", "pick_place"])
def test_expert_queries_do_not_mutate_env_state(task: str) -> None:
    env = make_env(task, num_envs=16, seed=0)
    expert = make_expert("planner", env.spec)
    obs, _ = env.reset(seed=1)
    for _ in range(5):
        obs, *_ = env.step(expert.act(obs, env_ids=torch.arange(16)).action)
    before = env.get_state()
    obs_copy = {k: v.clone() for k, v in obs.items()}
    for _ in range(3):
        expert.act(obs, env_ids=torch.arange(16))
        expert.act(obs, env_ids=torch.tensor([3, 7]))
    after = env.get_state()
    for key in before:
        assert torch.equal(before[key], after[key]), key
    for key in obs:
        assert torch.equal(obs[key], obs_copy[key]), key


def test_subset_queries_match_full_queries() -> None:
    env = make_env("pick_place", num_envs=8, seed=0)
    expert = make_expert("planner", env.spec)
    obs, _ = env.reset()
    full = expert.act(obs, env_ids=torch.arange(8))
    part = expert.act(obs, env_ids=torch.tensor([5, 1]))
    assert torch.equal(part.action, full.action[[5, 1]])


def test_unknown_planner_and_expert_names() -> None:
    spec = make_env("reach", num_envs=1).spec
    with pytest.raises(ExpertNotFoundError, match="unknown expert"):
        make_expert("oracle", spec)
    from dataclasses import replace

    with pytest.raises(ExpertNotFoundError, match="no planner registered"):
        make_expert("planner", replace(spec, task="other"))


def test_pick_place_labels_are_continuous_away_from_the_gripper_latch() -> None:
    env = make_env("pick_place", num_envs=4096, seed=0)
    expert = make_expert("planner", env.spec)
    g = torch.Generator().manual_seed(1)
    state = env.get_state()
    near = state["cube_pos"] + (torch.rand(4096, 3, generator=g) - 0.5) * torch.tensor([0.04, 0.04, 0.08])
    state["ee_pos"] = near.clamp(torch.tensor([-0.3, -0.3, 0.01]), torch.tensor([0.3, 0.3, 0.3]))
    state["gripper"] = torch.rand(4096, 1, generator=g)
    state["grasped"] = torch.rand(4096, 1, generator=g) < 0.3
    obs = env.set_state(state)
    nudged = {k: v.clone() for k, v in obs.items()}
    nudged["ee_pos"] = obs["ee_pos"] + 1e-5
    nudged["cube_rel"] = obs["cube_rel"] - 1e-5
    jump = (
        expert.act(nudged, env_ids=torch.arange(4096)).action
        - expert.act(obs, env_ids=torch.arange(4096)).action
    )
    off_latch = (obs["gripper"][:, 0] - env.spec.params["grasp_threshold"]).abs() > 1e-3
    assert jump[off_latch].abs().max() < 0.02  # a phase machine jumps by up to 2 here


def test_pick_place_planner_rises_before_it_comes_near_the_cube() -> None:
    env = make_env("pick_place", num_envs=256, seed=0, action_noise=0.0, push_prob=0.0, slip_prob=0.0)
    expert = make_expert("planner", env.spec)
    env.reset(seed=2)
    p = env.spec.params
    g = torch.Generator().manual_seed(2)
    state = env.get_state()
    angle = torch.rand(256, generator=g) * 2 * torch.pi
    radius = p["knock_radius"] + 0.005 + torch.rand(256, generator=g) * 0.025  # just outside knocking
    offset = torch.stack((torch.cos(angle), torch.sin(angle)), dim=1) * radius.unsqueeze(1)
    height = 0.005 + torch.rand(256, generator=g) * (p["knock_height"] - 0.005)  # low
    state["ee_pos"] = torch.cat(
        (state["cube_pos"][:, :2] + offset, (state["cube_pos"][:, 2] + height)[:, None]), 1
    )
    obs = env.set_state(state)
    start = state["cube_pos"].clone()
    knocked = torch.zeros(256, dtype=torch.bool)
    succeeded = torch.zeros(256, dtype=torch.bool)
    done = torch.zeros(256, dtype=torch.bool)
    for _ in range(env.spec.max_episode_steps):
        obs, _, terminated, truncated, info = env.step(expert.act(obs, env_ids=torch.arange(256)).action)
        free = ~done & (obs["grasped"][:, 0] < 0.5) & ~info["success"]
        knocked |= free & ((env.get_state()["cube_pos"] - start).norm(dim=1) > 1e-6)
        succeeded |= ~done & info["success"]
        done |= terminated | truncated
        if bool(done.all()):
            break
    assert not knocked.any(), int(knocked.sum())
    assert succeeded.all()
