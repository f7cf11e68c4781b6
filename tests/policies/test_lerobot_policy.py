"""LeRobot policies as the collector's student and expert (``lerobot:<pretrained dir>``).

A tiny ACT trained for a few steps on an odsd pick_place store (``conftest.act_dir``) is loaded as
``--student lerobot:<dir>`` and collects a dagger_sync iteration; stored frames hold the frozen
observation of every executed step inside chunks with the planner's exact label for it, chunk
queues restart with every episode, a checkpoint made for another layout is refused in one line,
and the same checkpoint as ``--expert`` labels states.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from lerobot_policy_helpers import ACT_ACTION_STEPS, CAMERA_TASK, PICK_PLACE, train_tiny_diffusion

from odsd.collect import SOURCE_EXPERT, SOURCE_STUDENT, BetaSchedule, CollectConfig, Collector
from odsd.collect.frames import CHUNK_POSITION, frame_features
from odsd.envs import STATE_KEY, make_env
from odsd.envs.spec import EnvSpec
from odsd.errors import ConfigError
from odsd.experts import make_expert, validate_query
from odsd.policies.action_chunks import ChunkedStudent
from odsd.policies.lerobot_policy import LeRobotPolicy
from odsd.store import EpisodeStore

pytest.importorskip("lerobot.policies.act.configuration_act")
pytestmark = pytest.mark.lerobot

ODSD = [sys.executable, "-c", "from odsd.cli import main; main()"]
NUM_ENVS = 3


def pick_place(num_envs: int = NUM_ENVS) -> Any:
    return make_env("pick_place", num_envs=num_envs, device="cpu", seed=5, **PICK_PLACE)


def stored(store: Path) -> list[tuple[Any, dict[str, np.ndarray]]]:
    snap = EpisodeStore.open(store, durability="process").snapshot()
    return [(e.meta, snap.episode(e.episode_id)) for e in snap.entries]


def unflatten(spec: EnvSpec, state: np.ndarray) -> dict[str, torch.Tensor]:
    """The raw observation dict behind stored ``observation.state`` rows (pick_place: every key)."""
    assert list(spec.state_keys) == [k.name for k in spec.observation]
    out, at = {}, 0
    for key in spec.observation:
        out[key.name] = torch.from_numpy(state[:, at : at + key.size].copy()).reshape(-1, *key.shape)
        at += key.size
    return out


def flat_rows(spec: EnvSpec, frames: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return spec.flatten_observation(unflatten(spec, frames[STATE_KEY]))


@pytest.fixture(scope="module")
def student_run(act_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, EnvSpec]:
    """One dagger_sync iteration with the ACT as student, beta 0.5 (both sources execute)."""
    store = tmp_path_factory.mktemp("student") / "store"
    env = pick_place()
    cfg = CollectConfig(
        mode="dagger_sync",
        task="pick_place",
        task_kwargs=PICK_PLACE,
        student=f"lerobot:{act_dir}",
        num_envs=NUM_ENVS,
        seed=5,
        store=store,
        episodes_per_iteration=6,
        max_iterations=1,
        beta=BetaSchedule(kind="constant", init_beta=0.5),
        durability="process",
        writer="thread",
    )
    summary = Collector(cfg, env=env).run()
    assert summary.iterations == 1 and summary.episodes_committed >= 6
    return store, env.spec


def test_student_collects_a_dagger_iteration(student_run: tuple[Path, EnvSpec]) -> None:
    store, _spec = student_run
    episodes = stored(store)
    assert len(episodes) >= 6
    sources: set[int] = set()
    for meta, f in episodes:
        assert meta.policy_version_first == 0
        assert f["action.student_valid"].all(), "ACT actions are finite and inside the bounds here"
        src = f["action.source"]
        sources |= set(src.tolist())
        np.testing.assert_array_equal(
            f["action.behavior"][src == SOURCE_STUDENT], f["action.student"][src == SOURCE_STUDENT]
        )
        np.testing.assert_array_equal(
            f["action.behavior"][src == SOURCE_EXPERT], f["action.expert"][src == SOURCE_EXPERT]
        )
    assert sources == {SOURCE_STUDENT, SOURCE_EXPERT}


def test_labels_align_with_the_frozen_observation_of_every_step(student_run: tuple[Path, EnvSpec]) -> None:
    """Re-running the (stateless) planner on every stored observation, chunk steps included,
    reproduces the stored labels exactly."""
    store, spec = student_run
    episodes = stored(store)
    frames = {
        k: np.concatenate([f[k] for _, f in episodes]) for k in (STATE_KEY, "action.expert", "segment_id")
    }
    obs = unflatten(spec, frames[STATE_KEY])
    m = frames[STATE_KEY].shape[0]
    query = validate_query(make_expert("planner", spec).act(obs, env_ids=torch.arange(m)), spec, m)
    assert np.abs(frames["action.expert"] - query.action.numpy()).max() == 0
    np.testing.assert_array_equal(frames["segment_id"], query.metadata["phase"].numpy())


def test_student_actions_are_chunks_predicted_from_the_chunk_start(
    act_dir: Path, student_run: tuple[Path, EnvSpec]
) -> None:
    """``action.student`` at chunk position p is action p of the chunk the policy predicts from
    the stored observation of the frame p steps earlier (position 0)."""
    store, spec = student_run
    policy = LeRobotPolicy.load(act_dir, spec)
    checked = 0
    for _, f in stored(store):
        pos = f[CHUNK_POSITION].astype(np.int64)
        starts = np.flatnonzero(pos == 0)
        chunks = policy.predict_chunk({k: v[starts] for k, v in flat_rows(spec, f).items()}).numpy()
        for j, start in enumerate(starts):
            stop = min(start + ACT_ACTION_STEPS, len(pos))
            np.testing.assert_allclose(f["action.student"][start:stop], chunks[j, : stop - start], atol=1e-5)
            checked += stop - start
    assert checked == sum(len(f[CHUNK_POSITION]) for _, f in stored(store))


def test_chunk_queues_restart_with_every_episode(student_run: tuple[Path, EnvSpec]) -> None:
    store, spec = student_run
    for meta, f in stored(store):
        expected = np.arange(meta.length) % ACT_ACTION_STEPS
        np.testing.assert_array_equal(f[CHUNK_POSITION], expected.astype(np.int16))
    assert ACT_ACTION_STEPS > 1 and spec.max_episode_steps % ACT_ACTION_STEPS != 0  # a carried queue shows


def test_chunk_position_is_only_in_chunking_stores(student_run: tuple[Path, EnvSpec]) -> None:
    store, spec = student_run
    manifest = EpisodeStore.open(store, durability="process").manifest
    assert manifest.features[CHUNK_POSITION].dtype == "int16"
    assert CHUNK_POSITION not in frame_features(spec)  # other stores' schemas (and hashes) are unchanged


class FakeChunkPolicy:
    """Chunk ``[k, S, A]`` whose values name the row and the call; records which rows were asked."""

    def __init__(self, spec: EnvSpec, steps: int) -> None:
        self.spec, self.n_action_steps, self.n_obs_steps, self.path = spec, steps, 1, Path("fake")
        self.calls: list[list[int]] = []

    def predict_chunk(
        self, flat: dict[str, torch.Tensor], rows: torch.Tensor | None = None, history: bool = False
    ) -> torch.Tensor:
        ids = torch.arange(self.spec.num_envs) if rows is None else rows
        self.calls.append(ids.tolist())
        k, a = ids.numel(), self.spec.action.dim
        step = torch.arange(self.n_action_steps, dtype=torch.float32).view(1, -1, 1)
        return (100 * len(self.calls) + 10 * ids.view(-1, 1, 1) + step).expand(k, -1, a).clone()


def test_chunked_student_keeps_independent_row_queues() -> None:
    env = pick_place(num_envs=3)
    fake = FakeChunkPolicy(env.spec, steps=3)
    student = ChunkedStudent(fake, num_rows=3)  # type: ignore[arg-type]
    flat: dict[str, torch.Tensor] = {}
    positions, actions = [], []
    for t in range(5):
        action, pos = student.act(flat)
        positions.append(pos.tolist())
        actions.append(action[:, 0].tolist())
        if t == 1:
            student.reset_rows(torch.tensor([1]))  # row 1's episode restarts mid-chunk
    assert positions == [[0, 0, 0], [1, 1, 1], [2, 0, 2], [0, 1, 0], [1, 2, 1]]
    assert fake.calls == [[0, 1, 2], [1], [0, 2]]  # only rows with an empty queue are run
    assert actions[2] == [102.0, 210.0, 122.0] and actions[4] == [301.0, 212.0, 321.0]
    student.clear()
    assert student.act(flat)[1].tolist() == [0, 0, 0] and fake.calls[-1] == [0, 1, 2]


def edited_checkpoint(act_dir: Path, tmp: Path, edit: Any) -> Path:
    out = tmp / "edited"
    shutil.copytree(act_dir, out)
    config = json.loads((out / "config.json").read_text())
    edit(config)
    (out / "config.json").write_text(json.dumps(config))
    return out


def test_mismatched_checkpoints_are_refused_in_one_line(act_dir: Path, tmp_path: Path) -> None:
    reach = make_env("reach", num_envs=2, device="cpu", seed=0).spec
    with pytest.raises(ConfigError, match=r"'observation\.") as info:
        LeRobotPolicy.load(act_dir, reach)
    assert "\n" not in str(info.value) and "reach" in str(info.value)

    def add_camera(config: dict[str, Any]) -> None:
        config["input_features"]["observation.images.top"] = {"type": "VISUAL", "shape": [3, 24, 32]}

    camera = edited_checkpoint(act_dir, tmp_path, add_camera)
    with pytest.raises(ConfigError, match=r"expects input 'observation\.images\.top' but env 'pick_place'"):
        LeRobotPolicy.load(camera, pick_place().spec)

    def bigger_action(config: dict[str, Any]) -> None:
        config["output_features"]["action"]["shape"] = [7]

    shutil.rmtree(camera)

    def history(config: dict[str, Any]) -> None:
        config["n_obs_steps"] = 2

    with pytest.raises(ConfigError, match="n_obs_steps=2: observation histories are supported for diffusion"):
        LeRobotPolicy.load(edited_checkpoint(act_dir, tmp_path, history), pick_place().spec, history=True)
    shutil.rmtree(tmp_path / "edited")
    with pytest.raises(
        ConfigError, match=r"outputs actions of shape \(7,\) but env 'pick_place' takes \(4,\)"
    ):
        LeRobotPolicy.load(edited_checkpoint(act_dir, tmp_path, bigger_action), pick_place().spec)


def test_cli_refuses_a_mismatched_student_with_exit_2(act_dir: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    args = [
        "collect",
        "--task",
        "reach",
        "--student",
        f"lerobot:{act_dir}",
        "--store",
        store,
        "--max-iterations",
        "1",
    ]
    proc = subprocess.run([*ODSD, *map(str, args)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("odsd: error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "observation.state" in errors[0] and "reach" in errors[0]
    assert not store.exists()  # refused before the store was created


def test_lerobot_expert_labels_states(act_dir: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    env = pick_place(num_envs=2)
    cfg = CollectConfig(
        mode="dagger_sync",
        task="pick_place",
        task_kwargs=PICK_PLACE,
        expert=f"lerobot:{act_dir}",
        num_envs=2,
        seed=1,
        store=store,
        episodes_per_iteration=2,
        max_iterations=1,
        durability="process",
        writer="thread",
    )
    collector = Collector(cfg, env=env)
    assert collector.expert is not None and collector.expert.spec.kind == "policy"
    assert collector.expert.spec.version.startswith("act-") and len(collector.expert.spec.version) == 16
    assert CHUNK_POSITION not in collector.features  # the reference MLP student does not chunk
    collector.run()
    episodes = stored(store)
    assert episodes
    policy = LeRobotPolicy.load(act_dir, env.spec)
    for _, f in episodes:
        expected = policy.first_actions(flat_rows(env.spec, f)).numpy()
        np.testing.assert_allclose(f["action.expert"], expected, atol=1e-5)
        assert f["action.expert_valid"].all()


def test_diffusion_student_chunks_per_row(diffusion_dir: Path, tmp_path: Path) -> None:
    """Diffusion takes observations with a time axis; per-row queues work the same way."""
    env = pick_place(num_envs=3)
    policy = LeRobotPolicy.load(diffusion_dir, env.spec)
    assert policy.type == "diffusion" and policy.n_action_steps == 4
    student = ChunkedStudent(policy, num_rows=3)
    obs, _info = env.reset(seed=0)
    positions = []
    for t in range(6):
        action, pos = student.act(env.spec.flatten_observation(obs))
        assert action.shape == (3, env.spec.action.dim) and torch.isfinite(action).all()
        positions.append(pos.tolist())
        obs = env.step(env.spec.action.clip(action))[0]
        if t == 0:
            student.reset_rows(torch.tensor([2]))
    assert positions == [[0, 0, 0], [1, 1, 0], [2, 2, 1], [3, 3, 2], [0, 0, 3], [1, 1, 0]]

    def history(config: dict[str, Any]) -> None:
        config["n_obs_steps"] = 2

    with pytest.raises(ConfigError, match="n_obs_steps=2"):
        LeRobotPolicy.load(edited_checkpoint(diffusion_dir, tmp_path, history), env.spec)


def test_cli_eval_runs_a_lerobot_student(act_dir: Path) -> None:
    args = ["eval", "--policy", f"lerobot:{act_dir}", "--task", "pick_place", "--episodes", "2"]
    args += ["--num-envs", "2", "--json"]
    proc = subprocess.run([*ODSD, *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["episodes"] == 2 and result["policy_version"] == 0


def test_camera_student_reads_the_stored_frames(camera_act_dir: Path, tmp_path: Path) -> None:
    """An ACT on camera + state collects; its chunks are what it predicts from the stored frames."""
    store = tmp_path / "store"
    cfg = CollectConfig(
        mode="dagger_sync",
        task="pick_place_cam",
        task_kwargs=CAMERA_TASK,
        student=f"lerobot:{camera_act_dir}",
        num_envs=2,
        seed=2,
        store=store,
        episodes_per_iteration=2,
        max_iterations=1,
        beta=BetaSchedule(kind="constant", init_beta=0.0),
        durability="process",
        writer="thread",
    )
    collector = Collector(cfg)
    spec = collector.spec
    policy = LeRobotPolicy.load(camera_act_dir, spec)
    assert policy.inputs["observation.images.top"] == "observation.images.top"
    collector.run()
    episodes = stored(store)
    assert episodes
    for meta, f in episodes:
        pos = f[CHUNK_POSITION].astype(np.int64)
        np.testing.assert_array_equal(pos, np.arange(meta.length) % ACT_ACTION_STEPS)
        starts = np.flatnonzero(pos == 0)
        flat = {k: torch.from_numpy(f[k][starts]) for k in policy.inputs.values()}
        assert flat["observation.images.top"].dtype == torch.uint8
        chunks = policy.predict_chunk(flat).numpy()
        np.testing.assert_allclose(f["action.student"][starts], chunks[:, 0], atol=1e-5)


def test_diffusion_student_keeps_per_row_observation_histories(demo_store: Path, tmp_path: Path) -> None:
    """n_obs_steps=2: each row predicts from its own last two observations; a reset row starts
    over with two copies of its first one."""
    out = train_tiny_diffusion(demo_store, tmp_path / "diffusion2", n_obs_steps=2)
    env = pick_place(num_envs=3)
    with pytest.raises(ConfigError, match="n_obs_steps=2: a label must be a function of one observation"):
        LeRobotPolicy.load(out, env.spec)
    policy = LeRobotPolicy.load(out, env.spec, history=True)
    student = ChunkedStudent(policy, num_rows=3)
    keys = list(policy.inputs.values())
    obs0 = env.spec.flatten_observation(env.reset(seed=0)[0])
    torch.manual_seed(0)
    action, _pos = student.act(obs0)
    torch.manual_seed(0)  # the same diffusion noise for the same batch
    twice = {k: torch.stack([obs0[k], obs0[k]], dim=1) for k in keys}
    torch.testing.assert_close(action, policy.predict_chunk(twice, history=True)[:, 0])
    obs1 = env.spec.flatten_observation(env.step(env.spec.action.clip(action))[0])
    student.reset_rows(torch.tensor([1]))
    student.act(obs1)
    history = student._history
    assert history is not None
    for k in keys:
        torch.testing.assert_close(history[k][0], torch.stack([obs0[k][0], obs1[k][0]]))
        torch.testing.assert_close(history[k][1], torch.stack([obs1[k][1], obs1[k][1]]))
        torch.testing.assert_close(history[k][2], torch.stack([obs0[k][2], obs1[k][2]]))
