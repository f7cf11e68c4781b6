"""`pick_place` with ``ee_inertia``: a lagged end-effector velocity, observed, stopped by the workspace."""

from __future__ import annotations

import pytest
import torch

from odsd.envs import EnvSpecError, make_env
from odsd.experts import evaluate_expert, make_expert

CLEAN = {"action_noise": 0.0, "push_prob": 0.0, "slip_prob": 0.0}


def test_default_task_observes_no_velocity() -> None:
    env = make_env("pick_place", num_envs=2, seed=0)
    obs, _ = env.reset()
    assert "ee_vel" not in obs and env.spec.state_dim == 17


def test_velocity_follows_the_command_with_a_lag() -> None:
    env = make_env("pick_place", num_envs=1, seed=0, ee_inertia=0.6, **CLEAN)
    obs, _ = env.reset(seed=1)
    assert env.spec.state_dim == 20 and torch.equal(obs["ee_vel"], torch.zeros(1, 3))
    action = torch.tensor([[0.5, -0.25, 0.0, 1.0]])
    for step in range(1, 4):
        before = obs["ee_pos"].clone()
        obs, *_ = env.step(action)
        expected = (1 - 0.6**step) * action[:, :3]
        assert torch.allclose(obs["ee_vel"], expected, atol=1e-6)
        moved = (obs["ee_pos"] - before) / (env.spec.params["max_speed"] * env.spec.step_dt)
        assert torch.allclose(moved, expected, atol=1e-5)


def test_velocity_is_zero_on_an_axis_where_the_workspace_stops_the_end_effector() -> None:
    env = make_env("pick_place", num_envs=1, seed=0, ee_inertia=0.5, **CLEAN)
    env.reset(seed=0)
    for _ in range(40):
        obs, *_ = env.step(torch.tensor([[1.0, 0.0, 1.0, 1.0]]))
    assert obs["ee_pos"][0, 2].item() == pytest.approx(env.spec.params["workspace_high"][2])
    assert obs["ee_pos"][0, 0].item() == pytest.approx(env.spec.params["workspace_high"][0])
    assert obs["ee_vel"][0, 0].item() == 0.0 and obs["ee_vel"][0, 2].item() == 0.0
    obs, *_ = env.step(torch.tensor([[0.0, 0.0, -1.0, 1.0]]))
    assert obs["ee_vel"][0, 2].item() == pytest.approx(-0.5)  # leaves the ceiling at once


def test_velocity_is_state_and_replays_exactly() -> None:
    env = make_env("pick_place", num_envs=3, seed=0, ee_inertia=0.7)
    env.reset(seed=5)
    for _ in range(3):
        env.step(torch.full((3, 4), 0.3))
    state = env.get_state()
    assert state["ee_vel"].abs().sum() > 0
    obs_a = env.step(torch.full((3, 4), -0.4))[0]
    again = make_env("pick_place", num_envs=3, seed=1, ee_inertia=0.7)
    again.set_state(state)
    obs_b = again.step(torch.full((3, 4), -0.4))[0]
    for key in obs_a:
        assert torch.equal(obs_a[key], obs_b[key]), key


@pytest.mark.parametrize("inertia", [1.0, -0.1, float("nan")])
def test_inertia_outside_zero_one_is_a_one_line_error(inertia: float) -> None:
    with pytest.raises(EnvSpecError, match="ee_inertia") as info:
        make_env("pick_place", num_envs=1, ee_inertia=inertia)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("kwargs", "minimum"), [(CLEAN, 1.0), ({}, 0.95)])
def test_planner_brakes_in_time_on_the_inertial_task(kwargs: dict[str, float], minimum: float) -> None:
    env = make_env("pick_place", num_envs=128, seed=0, ee_inertia=0.7, **kwargs)
    result = evaluate_expert(env, make_expert("planner", env.spec), episodes=256, seed=0)
    assert result.success_rate >= minimum, result


def test_planner_commands_what_makes_the_lagged_velocity_match_the_one_it_wants() -> None:
    from odsd.experts.planners.pick_place import INERTIAL_SPEED

    env = make_env("pick_place", num_envs=512, seed=0, ee_inertia=0.7, **CLEAN)
    first_order = make_env("pick_place", num_envs=512, seed=0, **CLEAN)
    expert, reference = make_expert("planner", env.spec), make_expert("planner", first_order.spec)
    obs, _ = env.reset(seed=3)
    wanted = INERTIAL_SPEED * reference.act(obs, env_ids=torch.arange(512)).action[:, :3]
    state = env.get_state()
    g = torch.Generator().manual_seed(3)
    state["ee_vel"] = wanted + (torch.rand(512, 3, generator=g) - 0.5) * 0.2  # close to it, unsaturated
    obs = env.set_state(state)
    command = expert.act(obs, env_ids=torch.arange(512)).action
    after, *_ = env.step(command)
    free = (command[:, :3].abs() < 1).all(dim=1) & (after["grasped"][:, 0] == obs["grasped"][:, 0])
    assert free.sum() > 100
    assert torch.allclose(after["ee_vel"][free], wanted[free], atol=1e-5)
