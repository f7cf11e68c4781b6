"""`pick_place` with ``cube_obs_noise``: noisy cube sensing for the student, the true cube for the expert."""

from __future__ import annotations

import pytest
import torch

from odsd.envs import EnvSpecError, make_env
from odsd.envs.tasks.pick_place import TRUE_CUBE_KEY
from odsd.experts import make_expert

SIGMA = 0.004


def test_default_task_has_no_privileged_key_and_exact_cube_observation() -> None:
    env = make_env("pick_place", num_envs=4, seed=0)
    obs, _ = env.reset()
    assert TRUE_CUBE_KEY not in obs
    assert torch.equal(obs["cube_pos"], env.get_state()["cube_pos"])
    assert env.spec.environment_state_keys == ("cube_pos", "goal_pos")


def test_privileged_cube_is_environment_state_not_policy_input() -> None:
    plain = make_env("pick_place", num_envs=4, seed=0)
    env = make_env("pick_place", num_envs=4, seed=0, cube_obs_noise=SIGMA)
    assert TRUE_CUBE_KEY not in env.spec.state_keys
    assert env.spec.state_dim == plain.spec.state_dim
    assert env.spec.environment_state_keys == (TRUE_CUBE_KEY, "goal_pos")
    obs, _ = env.reset()
    flat = env.spec.flatten_observation(obs)
    assert flat["observation.state"].shape == (4, plain.spec.state_dim)
    assert torch.equal(flat["observation.environment_state"][:, :3], env.get_state()["cube_pos"])
    assert env.spec.layout_hash() != plain.spec.layout_hash()


def test_observed_cube_carries_fresh_gaussian_error_each_step() -> None:
    env = make_env("pick_place", num_envs=2000, seed=0, cube_obs_noise=SIGMA)
    obs, _ = env.reset()
    errors = [obs["cube_pos"] - obs[TRUE_CUBE_KEY]]
    obs, *_ = env.step(torch.zeros(2000, 4))
    errors.append(obs["cube_pos"] - obs[TRUE_CUBE_KEY])
    for err in errors:
        assert abs(err.mean().item()) < 3e-4
        assert err.std().item() == pytest.approx(SIGMA, rel=0.05)
    assert not torch.equal(errors[0], errors[1])
    corr = torch.corrcoef(torch.stack((errors[0].flatten(), errors[1].flatten())))[0, 1]
    assert abs(corr.item()) < 0.05
    assert torch.allclose(obs["cube_rel"], obs["cube_pos"] - obs["ee_pos"])
    assert torch.allclose(obs["goal_rel"], obs["goal_pos"] - obs["cube_pos"])


def test_sensor_error_is_part_of_the_state_and_replays_exactly() -> None:
    env = make_env("pick_place", num_envs=3, seed=0, cube_obs_noise=SIGMA)
    env.reset(seed=5)
    for _ in range(3):
        env.step(torch.full((3, 4), 0.2))
    state = env.get_state()
    obs_a = env.step(torch.full((3, 4), -0.4))[0]
    again = make_env("pick_place", num_envs=3, seed=1, cube_obs_noise=SIGMA)
    restored = again.set_state(state)
    assert torch.equal(restored["cube_pos"], env.set_state(state)["cube_pos"])
    obs_b = again.step(torch.full((3, 4), -0.4))[0]
    for key in obs_a:
        assert torch.equal(obs_a[key], obs_b[key]), key


def test_planner_acts_on_the_true_cube() -> None:
    env = make_env("pick_place", num_envs=256, seed=0, cube_obs_noise=SIGMA)
    expert = make_expert("planner", env.spec)
    obs, _ = env.reset(seed=2)
    true_view = {**obs, "cube_pos": obs[TRUE_CUBE_KEY]}
    rows = torch.arange(256)
    assert torch.equal(expert.act(obs, env_ids=rows).action, expert.act(true_view, env_ids=rows).action)


def test_planner_with_privileged_cube_solves_the_noisy_task() -> None:
    from odsd.experts import evaluate_expert

    env = make_env("pick_place", num_envs=128, seed=0, cube_obs_noise=SIGMA)
    result = evaluate_expert(env, make_expert("planner", env.spec), episodes=256, seed=0)
    assert result.success_rate >= 0.98, result


@pytest.mark.parametrize("sigma", [-0.1, float("nan"), float("inf")])
def test_bad_noise_is_a_one_line_error(sigma: float) -> None:
    with pytest.raises(EnvSpecError, match="cube_obs_noise must be"):
        make_env("pick_place", num_envs=1, cube_obs_noise=sigma)
