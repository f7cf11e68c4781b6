"""`maniskill:<EnvId>` (ManiSkill3 PickCube-v1 on CPU): the spec from ManiSkill's spaces, the
VecEnv contract with CPU rows in worker processes (partial reset, frozen finished rows), state
round trips, and real `odsd` runs: check-env, a dagger_sync run of two iterations with recorded
state replayed by `store verify --replay`, and a SIGKILLed collector.

SAPIEN needs a Vulkan device; on CPU-only machines `make vulkan` provides Mesa's lavapipe and
tests/conftest.py points VK_ICD_FILENAMES at it. Without one these tests skip, saying so.
Everything is small (2-3 rows, short runs): importing ManiSkill takes 15-40 s per process here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from odsd.envs.errors import EnvNotFoundError, EnvSpecError, ManiSkillUnavailableError
from odsd.envs.maniskill_adapter import ManiSkillVecEnv
from odsd.envs.protocol import SupportsState, VecEnv
from odsd.envs.registry import make_env
from odsd.store import EpisodeStore
from odsd.testing.processes import kill_session, session_members, wait_session_gone

TASK = "maniskill:PickCube-v1"
ROWS = 3


def build(num_envs: int, **kwargs: Any) -> ManiSkillVecEnv:
    try:
        env = make_env(TASK, num_envs=num_envs, seed=0, **kwargs)
    except ManiSkillUnavailableError as exc:
        pytest.skip(f"no Vulkan device for SAPIEN here: {exc}")
    assert isinstance(env, ManiSkillVecEnv)
    return env


@pytest.fixture(scope="module")
def env() -> Iterator[ManiSkillVecEnv]:
    """PickCube-v1 with 3 CPU rows (3 worker processes)."""
    built = build(ROWS)
    yield built
    built.close()


def odsd(*args: object, timeout: float = 900) -> subprocess.CompletedProcess:
    child = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "odsd", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=child,
    )


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc


def collect_args(store: Path, *more: object) -> list[object]:
    return [
        "collect", "--mode", "dagger_sync", "--task", TASK, "--expert", "planner", "--num-envs", 2,
        "--store", store, "--durability", "process", "--seed", 1, "--torch-threads", 1, *more,
    ]  # fmt: skip


# -- spec --------------------------------------------------------------------------------------


def test_spec_comes_from_maniskill_spaces(env: ManiSkillVecEnv) -> None:
    spec = env.spec
    assert isinstance(env, VecEnv) and isinstance(env, SupportsState)
    assert [k.name for k in spec.observation] == [
        "qpos", "qvel", "is_grasped", "tcp_pose", "goal_pos", "obj_pose", "tcp_to_obj_pos", "obj_to_goal_pos",
    ]  # fmt: skip
    names = spec.features()["observation.state"]["names"]
    assert spec.state_dim == 42 and len(names) == 42
    assert names[0] == "qpos.panda_joint1" and names[18] == "is_grasped" and names[22] == "tcp_pose.qw"
    assert spec.action.names == ("ee_delta_pos.x", "ee_delta_pos.y", "ee_delta_pos.z", "gripper")
    assert spec.action.low == (-1.0,) * 4 and spec.action.high == (1.0,) * 4 and spec.action.normalized
    assert spec.action.kind == "ee_delta_pos+gripper"
    assert spec.control_hz == 20.0 and spec.max_episode_steps == 50
    assert spec.params["sim_backend"] == "physx_cpu" and spec.cameras == ()
    assert spec.state is not None
    fields = spec.state.shapes
    assert fields["sim.actors.cube"] == (13,) and fields["sim.articulations.panda"] == (31,)
    assert {"obs.tcp_pose", "episode_step", "terminated", "truncated", "success"} <= set(fields)
    assert len(env.worker_pids) == ROWS


def test_task_kwargs_mistakes_are_one_line_errors() -> None:
    with pytest.raises(EnvSpecError, match="obs_mode must be one of"):
        make_env(TASK, num_envs=1, obs_mode="pointcloud")
    with pytest.raises(EnvSpecError, match="sim_backend must be"):
        make_env(TASK, num_envs=1, sim_backend="warp")
    with pytest.raises(EnvSpecError, match="bad task arguments"):
        make_env(TASK, num_envs=1, obs_modes="state")
    with pytest.raises(EnvNotFoundError, match="needs an env id"):
        make_env("maniskill:", num_envs=1)
    if not torch.cuda.is_available():
        with pytest.raises(EnvSpecError, match="physx_cuda needs a CUDA device"):
            make_env(TASK, num_envs=4, sim_backend="physx_cuda")


# -- reset / step ------------------------------------------------------------------------------


def test_reset_and_step_follow_the_contract(env: ManiSkillVecEnv) -> None:
    spec = env.spec
    obs, info = env.reset(seed=5)
    spec.validate_observation(obs)
    assert torch.equal(info["reset_ids"], torch.arange(ROWS))
    again, _ = env.reset(seed=5)
    assert all(torch.equal(obs[k], again[k]) for k in obs), "a seeded reset is reproducible"
    assert not torch.equal(obs["obj_pose"][0], obs["obj_pose"][1]), "rows draw their own episodes"
    one, _ = env.reset(env_ids=torch.tensor([2]), seed=5)
    assert torch.equal(one["obj_pose"][2], obs["obj_pose"][2]), (
        "row i of a partial reset = row i of a full one"
    )
    out, reward, terminated, truncated, info = env.step(env.safe_hold_action())
    spec.validate_observation(out)
    for value, dtype in ((reward, torch.float32), (terminated, torch.bool), (truncated, torch.bool)):
        assert value.shape == (ROWS,) and value.dtype == dtype
    assert info["success"].shape == (ROWS,) and info["episode_step"].tolist() == [1] * ROWS


def test_partial_reset_of_one_row_leaves_the_other_processes_alone(env: ManiSkillVecEnv) -> None:
    env.reset(seed=11)
    push = torch.tensor([[0.5, -0.5, -0.5, 1.0]]).repeat(ROWS, 1)
    for _ in range(3):
        before, *_ = env.step(push)
    after, info = env.reset(env_ids=torch.tensor([1]))
    for key in before:
        assert torch.equal(after[key][[0, 2]], before[key][[0, 2]]), key
    assert not torch.equal(after["tcp_pose"][1], before["tcp_pose"][1])
    assert info["episode_step"].tolist() == [3, 0, 3]
    moved, *_ = env.step(push)
    assert not torch.equal(moved["tcp_pose"][0], before["tcp_pose"][0]), "row 0 still steps"


def test_a_finished_row_stays_frozen_until_it_is_reset(env: ManiSkillVecEnv) -> None:
    env.reset(seed=2)
    hold = env.safe_hold_action()
    for _ in range(env.spec.max_episode_steps):
        obs, _, terminated, truncated, _ = env.step(hold)
    assert truncated.all() and not terminated.any()
    frozen, reward, _, truncated2, info2 = env.step(torch.ones(ROWS, 4))
    assert all(torch.equal(frozen[k], obs[k]) for k in obs), "the terminal observation is kept"
    assert torch.equal(reward, torch.zeros(ROWS)) and torch.equal(truncated2, truncated)
    assert info2["episode_step"].tolist() == [env.spec.max_episode_steps] * ROWS


def test_state_round_trip_repeats_the_steps_within_a_bound(env: ManiSkillVecEnv) -> None:
    env.reset(seed=3)
    state = env.get_state()
    actions = [torch.rand(ROWS, 4, generator=torch.Generator().manual_seed(i)) * 2 - 1 for i in range(8)]
    first = [env.step(a)[0] for a in actions]
    restored = env.set_state(state)
    assert torch.equal(restored["tcp_pose"], state["obs.tcp_pose"])
    second = [env.step(a)[0] for a in actions]
    deviation = max(float((a[k] - b[k]).abs().max()) for a, b in zip(first, second, strict=True) for k in a)
    assert deviation < 1e-3, f"re-simulation from a restored state deviates by {deviation:g}"
    rows = torch.tensor([0, 2])
    part = env.get_state(rows)
    assert part["sim.actors.cube"].shape == (2, 13) and part["episode_step"].tolist() == [8, 8]


def test_camera_obs_modes_map_sensors_to_image_keys() -> None:
    env = build(1, obs_mode="rgbd")
    try:
        (camera,) = env.spec.cameras
        assert (camera.name, camera.height, camera.width, camera.depth) == ("base_camera", 128, 128, True)
        obs, _ = env.reset(seed=0)
        image, depth = obs["observation.images.base_camera"], obs["observation.depth.base_camera"]
        assert image.shape == (1, 128, 128, 3) and image.dtype == torch.uint8 and int(image.max()) > 0
        assert depth.shape == (1, 128, 128, 1) and depth.dtype == torch.uint16
        features = env.spec.features()
        assert features["observation.images.base_camera"]["kind"] == "image"
        assert "obj_pose" not in env.spec.observation_keys, "rgb modes carry no privileged object state"
        flat = env.spec.flatten_observation(obs)
        assert flat["observation.state"].shape[1] == env.spec.state_dim
    finally:
        env.close()


# -- the real CLI ------------------------------------------------------------------------------


def test_check_env_passes(env: ManiSkillVecEnv) -> None:
    report = json.loads(ok(odsd("check-env", TASK, "--json")).stdout)
    assert report["ok"], report["checks"]
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert statuses["state round trip"] == "ok" and statuses["partial reset"] == "ok", statuses
    assert report["spec"]["features"]["observation.state"]["shape"] == [42]


def test_no_vulkan_device_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "no_icd.json"
    child = {**os.environ, "VK_ICD_FILENAMES": str(missing)}
    proc = subprocess.run(
        [sys.executable, "-m", "odsd", "check-env", TASK, "--num-envs", "1", "--json"],
        capture_output=True, text=True, timeout=600, env=child,
    )  # fmt: skip
    checks = json.loads(proc.stdout)["checks"]
    assert checks[0]["name"] == "construct" and checks[0]["status"] == "fail"
    assert "no usable Vulkan device" in checks[0]["detail"] and "tools/vulkan-cpu" in checks[0]["detail"]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr


@dataclass
class KilledRun:
    store: Path
    committed: list[int]
    members: dict[int, str]
    survivors: dict[int, str]
    returncode: int


@pytest.fixture(scope="module")
def killed_run(env: ManiSkillVecEnv, tmp_path_factory: pytest.TempPathFactory) -> KilledRun:
    """`odsd collect --mode dagger_sync --record-state` (2 CPU rows, 2 episodes per iteration),
    SIGKILLed once episodes of two iterations are committed."""
    work = tmp_path_factory.mktemp("maniskill")
    store, log_path = work / "dagger", work / "collect.log"
    child = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    args = collect_args(store, "--episodes-per-iteration", 2, "--max-iterations", 1000, "--record-state")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "odsd", *map(str, args)], stdout=log, stderr=subprocess.STDOUT, env=child,
            start_new_session=True,
        )  # fmt: skip
        try:
            committed: list[int] = []
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.5)
                if (store / "_log").is_dir():
                    snap = EpisodeStore.open(store).snapshot()
                    if any(snap.meta(e).iteration >= 1 for e in snap.episode_ids):
                        committed = [int(e) for e in snap.episode_ids]
                        break
            assert committed, log_path.read_text()[-3000:]
            members = session_members(proc.pid)
            proc.send_signal(signal.SIGKILL)
            returncode = proc.wait(timeout=60)
            survivors = wait_session_gone(proc.pid)
        finally:
            kill_session(proc.pid)
    return KilledRun(store, committed, members, survivors, returncode)


def test_dagger_sync_commits_episodes_of_two_iterations(killed_run: KilledRun) -> None:
    snap = EpisodeStore.open(killed_run.store).snapshot()
    iterations = sorted({int(snap.meta(e).iteration) for e in snap.episode_ids})
    assert iterations[:2] == [0, 1], iterations
    assert snap.features["observation.state"].shape == (42,)
    assert "state.sim.actors.cube" in snap.features
    first = [snap.meta(e).success for e in snap.episode_ids if snap.meta(e).iteration == 0]
    assert all(first), "iteration 0 runs the planner (beta = 1), which succeeds"


def test_sigkill_of_a_collector_loses_no_committed_episode_and_leaves_no_worker(
    killed_run: KilledRun,
) -> None:
    assert killed_run.returncode == -signal.SIGKILL
    children = [cmd for pid, cmd in killed_run.members.items() if "multiprocessing" in cmd]
    assert len(children) >= 3, killed_run.members  # two ManiSkill rows and the writer
    assert killed_run.survivors == {}, (
        f"processes of the killed collector survived it: {killed_run.survivors}"
    )
    snap = EpisodeStore.open(killed_run.store).snapshot()
    assert set(killed_run.committed) <= {int(e) for e in snap.episode_ids}
    for eid in killed_run.committed:
        episode = snap.episode(eid, ["observation.state", "episode_step"])
        np.testing.assert_array_equal(episode["episode_step"], np.arange(snap.meta(eid).length))
        assert np.isfinite(episode["observation.state"]).all()


def test_store_verify_replay_reports_a_bounded_deviation(killed_run: KilledRun) -> None:
    """Re-simulation is approximate: verify --replay measures and explains the deviation; the
    kinematic check (set each recorded state, compare the observation) is exact."""
    proc = odsd("store", "verify", killed_run.store, "--replay", "--sample", 2, "--json")
    assert proc.returncode in (0, 4), proc.stdout[-3000:] + proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert not report["skipped"] and len(report["episodes"]) == 2
    for episode in report["episodes"]:
        assert episode["frames_compared"] > 0
        assert 0 <= episode["max_obs_dev"] < 0.05, episode
        if not episode["reproduced"]:
            assert "re-simulates a restored state approximately" in episode["explanation"], episode
    kinematic = json.loads(ok(odsd("store", "verify", killed_run.store, "--sample", 2, "--json")).stdout)
    assert kinematic["ok"] and kinematic["max_obs_dev"] < 1e-6, kinematic
