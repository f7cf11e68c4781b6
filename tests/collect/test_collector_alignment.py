"""DAgger alignment on built-in tasks: every stored frame pairs the observation the env returned
before that frame's action with the expert's label for exactly that observation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from collect_helpers import LoggingEnv, stored_episodes

from odsd.collect import SOURCE_EXPERT, SOURCE_STUDENT, BetaSchedule, CollectConfig, Collector
from odsd.envs import ENVIRONMENT_STATE_KEY, STATE_KEY, make_env
from odsd.experts import make_expert, validate_query

CASES = {
    # task: (num_envs, episodes, task kwargs)
    "reach": (4, 10, {}),
    "pick_place": (4, 6, {"max_episode_steps": 60}),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def aligned_run(request, tmp_path_factory):
    task = request.param
    n, episodes, kwargs = CASES[task]
    tmp = tmp_path_factory.mktemp(task)
    env = LoggingEnv(make_env(task, num_envs=n, device="cpu", seed=3, **kwargs))
    cfg = CollectConfig(
        mode="dagger_sync",
        task=task,
        task_kwargs=kwargs,
        num_envs=n,
        seed=3,
        store=tmp / "s",
        durability="process",
        episodes_per_iteration=episodes,
        max_iterations=1,
        beta=BetaSchedule(kind="constant", init_beta=0.5),
    )
    Collector(cfg, env=env).run()
    return task, env, stored_episodes(tmp / "s"), tmp


def test_stored_frames_align_with_env_log(aligned_run) -> None:
    task, env, episodes, _ = aligned_run
    spec = env.spec
    logged = env.row_episodes()
    by_row: dict[int, list] = {}
    for meta, frames in episodes:
        by_row.setdefault(meta.env_row, []).append((meta, frames))
    assert sum(len(v) for v in by_row.values()) == len(episodes) > 0
    raw: dict[str, list[torch.Tensor]] = {}
    labels_stored, phases_stored = [], []
    for row, eps in by_row.items():
        assert len(eps) <= len(logged[row])
        for (meta, f), steps in zip(eps, logged[row], strict=False):
            assert meta.length == len(steps)
            for i, s in enumerate(steps):
                before, action, reward, term, trunc = env.steps[s]
                flat = spec.flatten_observation({k: v[row : row + 1] for k, v in before.items()})
                np.testing.assert_array_equal(
                    f[STATE_KEY][i], flat[STATE_KEY][0].numpy(), err_msg=f"{task} row {row} step {i}"
                )
                if ENVIRONMENT_STATE_KEY in flat:
                    np.testing.assert_array_equal(
                        f[ENVIRONMENT_STATE_KEY][i], flat[ENVIRONMENT_STATE_KEY][0].numpy()
                    )
                np.testing.assert_array_equal(f["action.behavior"][i], action[row].numpy())
                assert f["reward"][i] == reward[row].item()
                assert bool(f["terminated"][i]) == bool(term[row]) and bool(f["truncated"][i]) == bool(
                    trunc[row]
                )
                for k, v in before.items():
                    raw.setdefault(k, []).append(v[row])
            labels_stored.append(f)
            phases_stored.append(f["segment_id"])
    # Recompute the expert's label on the stored (= pre-action) observations, all frames at once.
    obs = {k: torch.stack(v) for k, v in raw.items()}
    m = next(iter(obs.values())).shape[0]
    query = validate_query(make_expert("planner", spec).act(obs, env_ids=torch.arange(m)), spec, m)
    stored = {
        k: np.concatenate([f[k] for f in labels_stored])
        for k in ("action.expert", "action.expert_valid", "action.expert_failure")
    }
    np.testing.assert_allclose(stored["action.expert"], query.action.numpy(), atol=1e-6, rtol=0)
    np.testing.assert_array_equal(stored["action.expert_valid"], query.valid.numpy())
    np.testing.assert_array_equal(stored["action.expert_failure"], query.failure.numpy())
    np.testing.assert_array_equal(np.concatenate(phases_stored), query.metadata["phase"].numpy())


def test_behavior_is_expert_or_student_output(aligned_run) -> None:
    task, _, episodes, _ = aligned_run
    sources = set()
    for _, f in episodes:
        src = f["action.source"]
        sources |= set(src.tolist())
        np.testing.assert_array_equal(
            f["action.behavior"][src == SOURCE_EXPERT], f["action.expert"][src == SOURCE_EXPERT]
        )
        np.testing.assert_array_equal(
            f["action.behavior"][src == SOURCE_STUDENT], f["action.student"][src == SOURCE_STUDENT]
        )
        assert (f["policy_version"] == 0).all() and np.allclose(f["beta"], 0.5)
    assert sources == {SOURCE_STUDENT, SOURCE_EXPERT}, f"{task}: beta=0.5 should execute both"


def test_student_label_is_the_student_on_the_stored_observation(aligned_run) -> None:
    """action.student is the v0 student's output on the stored observation."""
    from odsd.policies import load_snapshot

    _, env, episodes, tmp = aligned_run
    assert episodes[0][0].policy_version_first == 0
    policy = load_snapshot(tmp / "s" / "policies", env_spec=env.spec)
    state = np.concatenate([f[STATE_KEY] for _, f in episodes])
    student = np.concatenate([f["action.student"] for _, f in episodes])
    np.testing.assert_allclose(policy.policy(torch.from_numpy(state)).numpy(), student, atol=1e-5)
