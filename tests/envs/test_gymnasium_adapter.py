"""The gymnasium adapter on Gymnasium-Robotics FetchPickAndPlace-v4 (MuJoCo) and on vector envs."""

from __future__ import annotations

import pytest
import torch

gym = pytest.importorskip("gymnasium")
pytest.importorskip("gymnasium_robotics")
pytest.importorskip("mujoco")

from odsd.envs import EnvSpecError, SupportsState, check_env, make_env  # noqa: E402
from odsd.envs.gymnasium_adapter import GymnasiumVecEnv  # noqa: E402
from odsd.experts import evaluate_expert, make_expert, validate_query  # noqa: E402

pytestmark = pytest.mark.gym
FETCH = "gymnasium:FetchPickAndPlace-v4"


@pytest.fixture(scope="module")
def fetch() -> GymnasiumVecEnv:
    env = make_env(FETCH, num_envs=3, seed=0)
    yield env
    env.close()


def test_fetch_spec(fetch: GymnasiumVecEnv) -> None:
    spec = fetch.spec
    assert [k.name for k in spec.observation] == ["achieved_goal", "desired_goal", "observation"]
    assert spec.state_dim == 31 and spec.environment_state_keys == ("achieved_goal", "desired_goal")
    assert spec.observation_keys["observation"].names[0] == "grip_pos.x"
    assert spec.action.dim == 4 and spec.action.normalized and spec.action.kind == "ee_delta_pos+gripper"
    assert spec.step_dt == pytest.approx(0.04) and spec.max_episode_steps == 50
    assert isinstance(fetch, SupportsState) and "sim" in spec.state.shapes
    features = spec.features()
    assert features["observation.state"]["shape"] == (31,) and features["action"]["names"][3] == "gripper.cmd"


def test_fetch_check_env_passes() -> None:
    report = check_env(FETCH, num_envs=2, steps=5)
    assert report.ok, report.checks


def test_fetch_partial_reset_and_seeding(fetch: GymnasiumVecEnv) -> None:
    first, _ = fetch.reset(seed=4)
    for _ in range(3):
        moved, *_ = fetch.step(torch.tensor([[0.5, 0.0, 0.0, 1.0]] * 3))
    obs, _ = fetch.reset(env_ids=torch.tensor([1]), seed=4)
    for key in obs:
        assert torch.equal(obs[key][[0, 2]], moved[key][[0, 2]])
        assert torch.allclose(obs[key][1], first[key][1])


def test_fetch_state_round_trip_and_query_purity(fetch: GymnasiumVecEnv) -> None:
    expert = make_expert("planner", fetch.spec)
    obs, _ = fetch.reset(seed=1)
    for _ in range(5):
        obs, *_ = fetch.step(expert.act(obs, env_ids=torch.arange(3)).action)
    state = fetch.get_state()
    q = validate_query(expert.act(obs, env_ids=torch.arange(3)), fetch.spec, 3)
    assert q.valid.all() and set(q.metadata["phase"].tolist()) <= set(range(4))
    after = fetch.get_state()
    for key in state:
        assert torch.equal(state[key], after[key]), key
    actions = [expert.act(obs, env_ids=torch.arange(3)).action for _ in range(1)]
    a, *_ = fetch.step(actions[0])
    fetch.set_state(state)
    b, *_ = fetch.step(actions[0])
    for key in a:
        assert torch.allclose(a[key], b[key], atol=1e-6), key


def test_fetch_truncates_without_auto_reset(fetch: GymnasiumVecEnv) -> None:
    fetch.reset(seed=2)
    hold = fetch.safe_hold_action()
    for _ in range(50):
        obs, reward, terminated, truncated, _info = fetch.step(hold)
    assert truncated.all() and not terminated.any()
    again, reward, _, truncated, _ = fetch.step(hold)
    assert truncated.all() and torch.equal(reward, torch.zeros(3))
    for key in obs:
        assert torch.equal(again[key], obs[key])


def test_fetch_planner_success_quick() -> None:
    env = make_env(FETCH, num_envs=4, seed=0)
    result = evaluate_expert(env, make_expert("planner", env.spec), episodes=20, seed=0)
    assert result.success_rate >= 0.95


@pytest.mark.slow
def test_fetch_planner_success_200_episodes() -> None:
    env = make_env(FETCH, num_envs=8, seed=0)
    result = evaluate_expert(env, make_expert("planner", env.spec), episodes=200, seed=1)
    assert result.success_rate >= 0.98, result.success_rate


def test_vector_env_requires_disabled_autoreset() -> None:
    vec = gym.make_vec("Pendulum-v1", num_envs=2, vectorization_mode="sync")
    with pytest.raises(EnvSpecError, match="auto-resets"):
        GymnasiumVecEnv.from_vector_env(vec)
    vec = gym.make_vec(
        "Pendulum-v1",
        num_envs=3,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.DISABLED},
    )
    env = GymnasiumVecEnv.from_vector_env(vec, seed=0)
    assert env.spec.observation[0].name == "observation" and env.spec.max_episode_steps == 200
    _obs, _ = env.reset(seed=0)
    moved, *_ = env.step(torch.ones(3, 1))
    reset, _ = env.reset(env_ids=torch.tensor([0]))
    assert torch.equal(reset["observation"][1:], moved["observation"][1:])
    assert not torch.equal(reset["observation"][0], moved["observation"][0])
    env.close()
