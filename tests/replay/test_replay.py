"""Kinematic and dynamic replay: exact reproduction, determinism, per-row lengths, scrubbing."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from conftest import snapshot

from odsd.envs import STATE_KEY
from odsd.replay import Replayer, ReplayError, replay_episodes, verify_store
from odsd.store import EpisodeStore


@pytest.mark.parametrize("mode", ["kinematic", "dynamic"])
def test_builtin_replay_reproduces_exactly(pick_place_store, reach_store, mode):
    for store in (pick_place_store, reach_store):
        snap = snapshot(store)
        report = replay_episodes(snap, snap.episode_ids.tolist(), mode=mode)
        assert report.ok, [e.explanation for e in report.failed]
        assert report.max_obs_dev == 0.0
        for e in report.episodes:
            assert e.frames_compared == e.length
            if mode == "dynamic":
                assert e.outcome_reproduced and e.replayed_success == e.recorded_success
                assert e.max_state_dev == 0.0 and not e.state_mismatch


def test_dynamic_replay_is_deterministic_on_cpu(pick_place_store):
    snap = snapshot(pick_place_store)
    ids = snap.episode_ids.tolist()
    with Replayer(snap, ids, mode="dynamic") as rp:
        rp.run()
        first = rp.replayed_obs[STATE_KEY].clone()
        rp.run()
        torch.testing.assert_close(first, rp.replayed_obs[STATE_KEY], rtol=0, atol=0, equal_nan=True)
    # the perturbations (noise, pushes, slips) came from the recorded per-row random streams
    assert any(len(set(snap.episode(i)["state.rng_counter"].tolist())) > 1 for i in ids)


def test_parallel_rows_with_per_row_lengths_match_single_replays(pick_place_store):
    snap = snapshot(pick_place_store)
    ids = snap.episode_ids.tolist()
    assert len({snap.meta(i).length for i in ids}) > 1
    together = replay_episodes(snap, ids, mode="dynamic")
    waves = replay_episodes(snap, ids, mode="dynamic", env_rows=2)
    for i in ids[:3]:
        alone = replay_episodes(snap, [i], mode="dynamic")
        (a,) = alone.episodes
        b = next(e for e in together.episodes if e.episode_id == i)
        np.testing.assert_array_equal(a.replayed_observation, b.replayed_observation)
    assert [e.episode_id for e in waves.episodes] == ids and waves.ok
    with Replayer(snap, ids[:3], mode="kinematic", env_rows=5) as rp:  # idle extra rows
        assert rp.run().ok


def test_go_to_step_scrubs_forward_backward_and_clamps(pick_place_store):
    snap = snapshot(pick_place_store)
    ids = snap.episode_ids.tolist()[:3]
    lengths = [snap.meta(i).length for i in ids]
    recorded = [snap.episode(i, [STATE_KEY])[STATE_KEY] for i in ids]
    with Replayer(snap, ids, mode="kinematic") as rp:
        for step in (10, 3, max(lengths) + 5, 0):
            obs = rp.go_to_step(step)[STATE_KEY].numpy()
            for r, rec in enumerate(recorded):
                assert np.array_equal(obs[r], rec[min(step, len(rec) - 1)])
        with pytest.raises(ReplayError):
            rp.go_to_step(-1)
    with Replayer(snap, ids, mode="dynamic") as rp:  # dynamic continues from the scrubbed state
        rp.go_to_step(7)
        obs = rp.step()[STATE_KEY].numpy()
        for r, rec in enumerate(recorded):
            assert np.array_equal(obs[r], rec[8])


def test_dynamic_replay_detects_random_stream_divergence(pick_place_store):
    snap = snapshot(pick_place_store)
    ids = snap.episode_ids.tolist()[:2]
    with Replayer(snap, ids, mode="dynamic") as rp:
        rp.states["rng_counter"][0, 0] += 1  # row 0 restarts from a shifted stream
        report = rp.run()
    bad, good = report.episodes
    assert good.reproduced
    assert not bad.reproduced and "rng_counter" in bad.state_mismatch
    assert "random stream diverged at frame 1" in bad.explanation


def test_dynamic_replay_detects_action_tampering(pick_place_store):
    snap = snapshot(pick_place_store)
    ids = snap.episode_ids.tolist()[:2]
    with Replayer(snap, ids, mode="dynamic") as rp:
        rp.actions[1, 5:, :3] = 0.0
        report = rp.run()
    assert report.episodes[0].reproduced and not report.episodes[1].reproduced
    assert report.episodes[1].first_divergence == 6
    assert report.episodes[1].max_obs_dev > 1e-3


def test_verify_flags_episodes_when_the_env_dynamics_changed(pick_place_store, tmp_path):
    """The layout hash does not cover task parameters: a changed speed passes the spec check but
    ``verify --replay`` catches that the recorded outcomes do not reproduce."""
    store = EpisodeStore.open(pick_place_store)
    ok = verify_store(store, sample=4, seed=1)
    assert ok.ok and len(ok.sampled) == 4 and ok.replay.mode == "kinematic"
    ok = verify_store(store, sample=4, seed=1, replay=True)
    assert ok.ok and ok.replay.max_obs_dev == 0.0

    copy = tmp_path / "changed"
    shutil.copytree(pick_place_store, copy)
    for run_file in (copy / "runs").glob("*/run.json"):
        info = json.loads(run_file.read_text())
        info["config"]["task_kwargs"]["max_speed"] = 0.25
        run_file.write_text(json.dumps(info))
    changed = verify_store(EpisodeStore.open(copy), replay=True)
    assert not changed.ok and len(changed.replay.failed) == changed.episodes_total
    assert all("first deviation" in e.explanation for e in changed.replay.failed)


def test_fetch_replay_reproduces(fetch_store):
    snap = snapshot(fetch_store)
    ids = snap.episode_ids.tolist()
    kin = replay_episodes(snap, ids, mode="kinematic")
    assert kin.ok and kin.max_obs_dev == 0.0
    dyn = replay_episodes(snap, ids, mode="dynamic", atol=1e-6)
    assert dyn.ok, [e.explanation for e in dyn.failed]
    assert all(e.outcome_reproduced for e in dyn.episodes)


def test_fetch_kinematic_state_reproduces_the_simulators_own_observation(fetch_store):
    """Not only the adapter's cached observation: the observation Fetch recomputes from the restored
    MuJoCo state matches the recording, exactly after reset and within one physics substep later
    (Fetch reads site poses that ``mj_step`` leaves at the pre-integration kinematics; measured
    max 1.4e-3 on grip velocities/positions)."""
    snap = snapshot(fetch_store)
    eid = int(snap.episode_ids[0])
    rec = snap.episode(eid, [STATE_KEY])[STATE_KEY]
    with Replayer(snap, [eid], mode="kinematic") as rp:
        base = rp.env._envs[0].unwrapped
        for step in (0, 10, 25, rec.shape[0] - 1):
            rp.go_to_step(step)
            own = base._get_obs()
            tensors = {k: torch.as_tensor(np.asarray(v, dtype=np.float32))[None] for k, v in own.items()}
            flat = rp.spec.flatten_observation(tensors)[STATE_KEY][0].numpy()
            np.testing.assert_allclose(flat, rec[step], atol=0 if step == 0 else 5e-3)
