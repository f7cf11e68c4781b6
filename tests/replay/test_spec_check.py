"""Replay refuses an episode whose recorded env spec does not match the env it would run in."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import snapshot

from odsd.envs import make_env
from odsd.replay import (
    Replayer,
    ReplayError,
    SpecMismatchError,
    check_compatible,
    recorded_env,
    replay_episodes,
)


def test_recorded_env_comes_from_the_run(pick_place_store):
    snap = snapshot(pick_place_store)
    rec = recorded_env(snap, 0)
    assert rec.task == rec.recorded_task == "pick_place"
    assert rec.task_kwargs["max_episode_steps"] == 45
    assert rec.action_names == ("ee_vel.x", "ee_vel.y", "ee_vel.z", "gripper.cmd")
    env = make_env("pick_place", num_envs=1, **rec.task_kwargs)
    assert rec.layout_hash == env.spec.layout_hash()
    check_compatible(rec, env.spec)


def test_wrong_task_is_refused(pick_place_store):
    snap = snapshot(pick_place_store)
    with pytest.raises(SpecMismatchError, match="4-dim action, env 'reach' takes 3"):
        replay_episodes(snap, [0], task="reach")
    with pytest.raises(SpecMismatchError):
        Replayer(snap, [0], env=make_env("reach", num_envs=1))


def test_joint_order_state_layout_and_hash_mismatches_are_refused(pick_place_store):
    snap = snapshot(pick_place_store)
    rec = recorded_env(snap, 0)
    spec = make_env("pick_place", num_envs=1).spec
    names = rec.action_names
    swapped = dataclasses.replace(rec, action_names=(names[1], names[0], *names[2:]))
    with pytest.raises(SpecMismatchError, match=r"joint order.*element 0 is 'ee_vel.y'"):
        check_compatible(swapped, spec)
    dropped = dataclasses.replace(rec, state_fields=tuple(f for f in rec.state_fields if f[0] != "rng_key"))
    with pytest.raises(SpecMismatchError, match=r"state layout.*rng_key"):
        check_compatible(dropped, spec)
    retyped = dataclasses.replace(
        rec, state_fields=tuple((n, "float64" if n == "ee_pos" else d, s) for n, d, s in rec.state_fields)
    )
    with pytest.raises(SpecMismatchError, match="state field 'ee_pos' is float64"):
        check_compatible(retyped, spec)
    obs = dataclasses.replace(rec, observation_names=tuple(reversed(rec.observation_names)))
    with pytest.raises(SpecMismatchError, match="observation layout"):
        check_compatible(obs, spec)
    hashed = dataclasses.replace(rec, layout_hash="0" * 64)
    with pytest.raises(SpecMismatchError, match="layout hash"):
        check_compatible(hashed, spec)
    assert SpecMismatchError.exit_code == 3


def test_store_without_state_is_refused(stateless_store):
    snap = snapshot(stateless_store)
    with pytest.raises(ReplayError, match="record_state"):
        replay_episodes(snap, [0])


def test_unknown_episode_and_mode(pick_place_store):
    snap = snapshot(pick_place_store)
    with pytest.raises(ReplayError, match="not visible"):
        replay_episodes(snap, [999])
    with pytest.raises(ReplayError, match="mode"):
        Replayer(snap, [0], mode="physics")  # type: ignore[arg-type]
