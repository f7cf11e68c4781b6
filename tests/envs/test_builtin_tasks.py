"""Built-in torch tasks: per-row reset isolation, seeding, terminal vs truncated, frozen rows, state."""

from __future__ import annotations

import pytest
import torch

from odsd.envs import EnvContractError, SupportsSafeHold, SupportsState, VecEnv, make_env

TASKS = ["reach", "pick_place"]


def zeros_action(env: VecEnv) -> torch.Tensor:
    return torch.zeros(env.spec.num_envs, env.spec.action.dim)


@pytest.mark.parametrize("task", TASKS)
def test_protocols_and_reset_observation(task: str) -> None:
    env = make_env(task, num_envs=5, seed=0)
    assert isinstance(env, VecEnv) and isinstance(env, SupportsState) and isinstance(env, SupportsSafeHold)
    obs, info = env.reset()
    env.spec.validate_observation(obs)
    assert info["success"].shape == (5,) and info["success"].dtype == torch.bool
    assert env.spec.task == task and env.spec.task_description


@pytest.mark.parametrize("task", TASKS)
def test_seeded_reset_is_deterministic_per_row(task: str) -> None:
    a = make_env(task, num_envs=6, seed=3)
    b = make_env(task, num_envs=6, seed=99)
    obs_a, _ = a.reset(seed=11)
    obs_b, _ = b.reset(seed=11)
    for key in obs_a:
        assert torch.equal(obs_a[key], obs_b[key])
    # Seeding a single row reproduces that row of the full seeded reset.
    b.reset(seed=5)
    obs_c, _ = b.reset(env_ids=torch.tensor([2]), seed=11)
    for key in obs_a:
        assert torch.equal(obs_c[key][2], obs_a[key][2])
    # Different seeds differ.
    obs_d, _ = a.reset(seed=12)
    assert not torch.equal(obs_d["goal_pos"], obs_a["goal_pos"])


@pytest.mark.parametrize("task", TASKS)
def test_partial_reset_leaves_other_rows_and_their_streams_alone(task: str) -> None:
    def run(reset_row_one: bool) -> dict[str, torch.Tensor]:
        env = make_env(task, num_envs=4, seed=0)
        obs, _ = env.reset(seed=1)
        for t in range(6):
            if reset_row_one and t == 2:
                before = {k: v.clone() for k, v in obs.items()}
                obs, _ = env.reset(env_ids=torch.tensor([1]))
                for key in obs:  # full batch returned, only row 1 changed
                    assert obs[key].shape[0] == 4
                    assert torch.equal(obs[key][[0, 2, 3]], before[key][[0, 2, 3]])
            obs, *_ = env.step(torch.full((4, env.spec.action.dim), 0.3))
        return obs

    plain, with_reset = run(False), run(True)
    for key in plain:
        assert torch.equal(plain[key][[0, 2, 3]], with_reset[key][[0, 2, 3]])
        assert torch.equal(plain[key][[0, 2, 3]], with_reset[key][[0, 2, 3]])


def test_env_ids_accept_masks_and_reject_out_of_range() -> None:
    env = make_env("reach", num_envs=3, seed=0)
    _obs, info = env.reset(env_ids=torch.tensor([True, False, True]))
    assert info["reset_ids"].tolist() == [0, 2]
    with pytest.raises(EnvContractError, match="out of range"):
        env.reset(env_ids=torch.tensor([3]))


def test_truncated_vs_terminated_and_frozen_rows() -> None:
    env = make_env("reach", num_envs=2, seed=0, max_episode_steps=3)
    obs, _ = env.reset(seed=0)
    # Row 0 heads straight to its goal (terminated with success); row 1 stands still (truncated).
    state = env.get_state()
    state["goal_pos"][0] = state["ee_pos"][0] + torch.tensor([0.01, 0.0, 0.0])
    env.set_state(state)
    flags = []
    for _ in range(3):
        action = torch.zeros(2, 3)
        action[0, 0] = 0.4
        obs, reward, terminated, truncated, info = env.step(action)
        flags.append((terminated.tolist(), truncated.tolist(), info["success"].tolist()))
    assert flags[0] == ([True, False], [False, False], [True, False])
    assert flags[2] == ([True, False], [False, True], [True, False])
    assert reward.dtype == torch.float32 and terminated.dtype == torch.bool
    # Stepping finished rows again: frozen, reward 0, flags kept, counters unchanged.
    frozen = env.get_state()
    obs2, reward2, terminated2, truncated2, _info2 = env.step(torch.ones(2, 3))
    assert torch.equal(reward2, torch.zeros(2))
    assert terminated2.tolist() == [True, False] and truncated2.tolist() == [False, True]
    for key, value in env.get_state().items():
        if not key.startswith("rng_"):
            assert torch.equal(value, frozen[key]), key
    assert torch.equal(obs2["ee_pos"], obs["ee_pos"])
    # Explicit reset revives only the given row.
    env.reset(env_ids=torch.tensor([1]))
    _, _, terminated3, truncated3, _ = env.step(torch.zeros(2, 3))
    assert terminated3.tolist() == [True, False] and truncated3.tolist() == [False, False]


@pytest.mark.parametrize("task", TASKS)
def test_state_round_trip_replays_exactly(task: str) -> None:
    env = make_env(task, num_envs=8, seed=0)
    env.reset(seed=4)
    actions = [torch.rand(8, env.spec.action.dim) * 2 - 1 for _ in range(10)]
    for a in actions[:3]:
        env.step(a)
    state = env.get_state()
    assert set(state) == {f.name for f in env.spec.state.fields}
    first = [env.step(a)[0] for a in actions[3:]]
    env.set_state(state)
    second = [env.step(a)[0] for a in actions[3:]]
    for o1, o2 in zip(first, second, strict=True):
        for key in o1:
            assert torch.equal(o1[key], o2[key])


def test_step_rejects_bad_actions() -> None:
    env = make_env("pick_place", num_envs=2, seed=0)
    with pytest.raises(EnvContractError, match="expected"):
        env.step(torch.zeros(2, 3))
    with pytest.raises(EnvContractError, match="non-finite"):
        env.step(torch.tensor([[0.0, 0.0, 0.0, 0.0], [float("nan"), 0.0, 0.0, 0.0]]))


def repeat(env: VecEnv, action: list[float], times: int) -> dict[str, torch.Tensor]:
    for _ in range(times):
        obs, *_ = env.step(torch.tensor([action]))
    return obs


def deterministic_pick_place_at_the_cube() -> VecEnv:
    """One ``pick_place`` row without perturbations, its open gripper at the cube."""
    env = make_env("pick_place", num_envs=1, seed=0, action_noise=0.0, push_prob=0.0, slip_prob=0.0)
    state = env.get_state()
    state["ee_pos"][0] = state["cube_pos"][0]
    env.set_state(state)
    return env


def test_pick_place_grasp_requires_closing_at_the_cube() -> None:
    env = deterministic_pick_place_at_the_cube()
    assert repeat(env, [0.0, 0.0, 0.0, -1.0], 3)["grasped"].item() == 1.0
    obs = repeat(env, [0.0, 0.0, 1.0, -1.0], 1)
    assert obs["cube_pos"][0, 2] > 0.02 + 1e-4  # lifted with the gripper
    # A gripper that is already closed does not grasp by touching the cube.
    env.reset(seed=1)
    repeat(env, [0.0, 0.0, 0.0, -1.0], 4)
    state = env.get_state()
    state["ee_pos"][0] = state["cube_pos"][0]
    env.set_state(state)
    assert repeat(env, [0.0, 0.0, 0.0, -1.0], 1)["grasped"].item() == 0.0


def test_pick_place_gripper_holding_the_cube_stops_at_the_table() -> None:
    env = deterministic_pick_place_at_the_cube()
    rest = env.spec.params["cube_rest_z"]
    assert repeat(env, [0.0, 0.0, 0.0, -1.0], 3)["grasped"].item() == 1.0
    obs = repeat(env, [0.0, 0.0, -1.0, -1.0], 3)  # pressing the held cube down into the table
    assert obs["ee_pos"][0, 2].item() == pytest.approx(rest)
    assert obs["cube_pos"][0, 2].item() == pytest.approx(rest)
    assert repeat(env, [0.0, 0.0, 0.0, 1.0], 3)["grasped"].item() == 0.0
    obs = repeat(env, [0.0, 0.0, -1.0, 1.0], 1)  # released: the open gripper may go lower again
    assert obs["ee_pos"][0, 2].item() < rest - 1e-3


def test_safe_hold_keeps_rows_still() -> None:
    env = make_env("pick_place", num_envs=3, seed=0, action_noise=0.0, push_prob=0.0)
    obs, _ = env.reset()
    obs2, *_ = env.step(env.safe_hold_action())
    assert torch.equal(obs["ee_pos"], obs2["ee_pos"]) and torch.equal(obs["gripper"], obs2["gripper"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu() -> None:  # pragma: no cover - exercised on GPU machines
    cpu = make_env("pick_place", num_envs=4, seed=0, device="cpu")
    gpu = make_env("pick_place", num_envs=4, seed=0, device="cuda")
    a, _ = cpu.reset(seed=2)
    b, _ = gpu.reset(seed=2)
    for key in a:
        assert torch.allclose(a[key], b[key].cpu(), atol=1e-6)
