"""The ManiSkill3 PickCube-v1 planner: found by `--expert planner`, closed loop on the state (its
labels follow the state row by row), per-row failure reasons, never mutating the env, and
successful acting alone. The pure-function tests run without ManiSkill; the env tests need a
Vulkan device (see tests/envs/test_maniskill_adapter.py) and skip, saying so, without one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from odsd.envs.errors import ManiSkillUnavailableError
from odsd.envs.registry import make_env
from odsd.envs.spec import ActionSpec, EnvSpec, ObservationKey
from odsd.experts.errors import ExpertNotFoundError
from odsd.experts.failures import Failure
from odsd.experts.planners.maniskill_pick_cube import PickCubePlanner
from odsd.experts.registry import make_expert

TASK = "maniskill:PickCube-v1"
KEYS = (("is_grasped", 1), ("tcp_pose", 7), ("goal_pos", 3), ("obj_pose", 7))


def spec(kind: str = "ee_delta_pos+gripper", keys: tuple[tuple[str, int], ...] = KEYS) -> EnvSpec:
    return EnvSpec(
        task=TASK,
        observation=tuple(ObservationKey(name, (size,)) for name, size in keys),
        action=ActionSpec(dim=4, low=(-1.0,) * 4, high=(1.0,) * 4, kind=kind, normalized=True),
        step_dt=0.05,
        max_episode_steps=50,
        num_envs=4,
    )


def rows(tcp: list[list[float]], cube: list[list[float]], goal: list[list[float]], grasped: list[float]):
    n = len(tcp)
    quat = torch.tensor([[1.0, 0.0, 0.0, 0.0]]).repeat(n, 1)
    return {
        "tcp_pose": torch.cat((torch.tensor(tcp), quat), dim=1),
        "obj_pose": torch.cat((torch.tensor(cube), quat), dim=1),
        "goal_pos": torch.tensor(goal),
        "is_grasped": torch.tensor(grasped).unsqueeze(1),
    }


def test_planner_expert_is_found_for_the_task_and_refuses_other_modes() -> None:
    expert = make_expert("planner", spec())
    assert isinstance(expert, PickCubePlanner)
    assert expert.spec.state_conditioned and expert.spec.kind == "planner"
    with pytest.raises(ExpertNotFoundError, match="control_mode=pd_ee_delta_pos"):
        make_expert("planner", spec(kind="pd_joint_delta_pos"))
    with pytest.raises(ExpertNotFoundError, match="obs_mode=state"):
        make_expert("planner", spec(keys=KEYS[:2]))


def test_labels_follow_the_state_row_by_row() -> None:
    expert = PickCubePlanner(spec())
    cube, goal = [0.02, -0.03, 0.02], [0.05, 0.05, 0.2]
    obs = rows(
        tcp=[[0.0, 0.0, 0.2], [0.02, -0.03, 0.021], [0.02, -0.03, 0.021], [0.05, 0.05, 0.2], [0.0, 0.0, 0.2]],
        cube=[cube, cube, cube, [0.05, 0.05, 0.2], [0.3, 0.0, -0.3]],
        goal=[goal] * 5,
        grasped=[0.0, 0.0, 1.0, 1.0, 0.0],
    )
    query = expert.act(obs, env_ids=torch.arange(5))
    a = query.action
    assert a.shape == (5, 4) and bool((a.abs() <= 1).all())
    assert a[0, 3] == 1.0 and a[0, 2] < 0 and a[0, 0] > 0, "far: fingers open, move toward the cube"
    assert a[1, 3] == -1.0 and a[1, :3].abs().max() < 0.05, "at the cube: close, stay"
    assert a[2, 3] == -1.0 and a[2, 2] > 0.5, "holding: carry toward the goal above"
    assert a[3, :3].abs().max() < 1e-4 and a[3, 3] == -1.0, "at the goal: rest, keep holding"
    names = [expert.phase_names[i] for i in query.metadata["phase"].tolist()]
    assert names[:4] == ["reach", "grasp", "transport", "place"]
    assert query.valid.tolist() == [True, True, True, True, False]
    assert int(query.failure[4]) == Failure.UNREACHABLE, "a cube off the table is a per-row failure"
    alone = expert.act({k: v[2:3] for k, v in obs.items()}, env_ids=torch.tensor([0]))
    assert torch.equal(alone.action[0], a[2]), "a row's label depends on its own state only"


def test_non_finite_rows_are_invalid_alone() -> None:
    expert = PickCubePlanner(spec())
    obs = rows([[0.0, 0.0, 0.2]] * 2, [[0.0, 0.0, 0.02]] * 2, [[0.0, 0.0, 0.1]] * 2, [0.0, 0.0])
    obs["goal_pos"][1, 0] = float("nan")
    query = expert.act(obs, env_ids=torch.arange(2))
    assert query.valid.tolist() == [True, False]
    assert int(query.failure[1]) == Failure.INVALID_OBSERVATION


@pytest.fixture(scope="module")
def env() -> Iterator:
    try:
        built = make_env(TASK, num_envs=2, seed=0)
    except ManiSkillUnavailableError as exc:
        pytest.skip(f"no Vulkan device for SAPIEN here: {exc}")
    yield built
    built.close()


def test_the_expert_never_steps_or_mutates_the_env(env) -> None:
    expert = make_expert("planner", env.spec)
    obs, info = env.reset(seed=4)
    for _ in range(5):
        obs, *_ = env.step(expert.act(obs, env_ids=torch.arange(2)).action)
    before = env.get_state()
    frozen = {k: v.clone() for k, v in obs.items()}
    expert.reset(torch.arange(2), obs, info)
    for _ in range(3):
        expert.act(obs, env_ids=torch.arange(2))
        expert.act(obs, env_ids=torch.tensor([1]))
    after = env.get_state()
    assert before.keys() == after.keys()
    for key in before:
        assert torch.equal(before[key], after[key]), f"act() changed the env's {key}"
    assert all(torch.equal(frozen[k], obs[k]) for k in obs), "act() changed the observation it was given"


def test_the_planner_alone_succeeds_on_at_least_95_percent(env) -> None:
    expert = make_expert("planner", env.spec)
    obs, _ = env.reset(seed=2026)
    outcomes: list[bool] = []
    while len(outcomes) < 20:
        query = expert.act(obs, env_ids=torch.arange(2))
        assert bool(query.valid.all()), query.failure
        obs, _, terminated, truncated, info = env.step(query.action)
        done = (terminated | truncated).nonzero().flatten()
        if done.numel():
            outcomes += info["success"][done].tolist()
            obs, _ = env.reset(env_ids=done)
    assert sum(outcomes) >= 0.95 * len(outcomes), outcomes
