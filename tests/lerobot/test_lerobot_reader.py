"""OdsdLeRobotDataset without lerobot: items, windows, invalid labels, selection, stats, refresh, workers."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lerobot_helpers import build_store, make_episode, reference_window
from torch.utils.data import DataLoader, default_collate

from odsd.errors import ConfigError
from odsd.lerobot import OdsdLeRobotDataset, Selection, batch_loader
from odsd.lerobot.view import DEFAULT_KEYS

DT = {"action": [i / 10 for i in range(-2, 6)], "observation.state": [-0.1, 0.0]}


def assert_items_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], (str, list)):
            assert a[k] == b[k], k
        else:
            assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
            assert torch.equal(a[k], b[k]), k


def test_import_without_lerobot() -> None:
    code = (
        "import sys; sys.modules['lerobot'] = None\n"
        "import odsd.lerobot, odsd.lerobot.dataset, odsd.lerobot.export, odsd.cli.export\n"
        "assert 'lerobot' not in [m.split('.')[0] for m in sys.modules if sys.modules[m] is not None]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_item_keys_dtypes_shapes(small_store) -> None:
    ds = OdsdLeRobotDataset(small_store.root, delta_timestamps=DT)
    item = ds[0]
    for key in DEFAULT_KEYS:
        assert item[key].shape == ()
    assert item["timestamp"].dtype == torch.float32
    assert item["index"].dtype == torch.int64
    assert item["observation.state"].shape == (2, 3) and item["observation.state"].dtype == torch.float32
    assert item["observation.environment_state"].shape == (3,)  # synthesized for state-only data
    assert item["action"].shape == (8, 2) and item["action_is_pad"].shape == (8,)
    assert item["observation.state_is_pad"].dtype == torch.bool
    assert item["policy_version"].dtype == torch.int64  # int32 on disk, int64 like LeRobot items
    assert item["next.done"].shape == () and item["next.done"].dtype == torch.bool
    assert isinstance(item["task"], str)
    # meta mirrors the items
    assert set(ds.meta.features) == {k for k in item if not k.endswith("_is_pad") and k != "task"}
    assert ds.meta.features["next.reward"]["shape"] == (1,)
    assert ds.meta.camera_keys == [] and ds.meta.fps == 10
    ep = ds.meta.episodes[1]
    assert ep["dataset_to_index"] - ep["dataset_from_index"] == ep["length"]
    assert ds.meta.episodes["dataset_from_index"][0] == 0
    assert ds.meta.total_frames == int(small_store.snapshot().num_frames)


def test_values_match_the_store(small_store) -> None:
    ds = OdsdLeRobotDataset(small_store.root)
    snap = small_store.snapshot()
    valid = snap.read("action.expert_valid")
    assert len(ds) == int(valid.sum())  # invalid labels are never anchors
    batch = ds.get_batch(np.arange(len(ds)))
    pos = ds.anchors
    np.testing.assert_array_equal(batch["observation.state"].numpy(), snap.read("observation.state")[pos])
    np.testing.assert_array_equal(batch["action"].numpy(), snap.read("action.expert")[pos])
    np.testing.assert_array_equal(batch["next.reward"].numpy(), snap.read("reward")[pos])
    np.testing.assert_array_equal(batch["frame_index"].numpy(), snap.read("episode_step")[pos])
    np.testing.assert_array_equal(batch["index"].numpy(), pos)
    assert batch["label_valid"].all()


def test_invalid_labels_never_appear_unpadded(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", seed=3, invalid_rate=0.5, lengths=[9, 14, 3, 30, 11, 6])
    snap = store.snapshot()
    valid = snap.read("action.expert_valid")
    raw = snap.read("action.expert")
    assert (~valid).sum() > 10 and np.isnan(raw[~valid]).all()
    dt = {"action": [i / 10 for i in range(-3, 12)]}
    ds = OdsdLeRobotDataset(store.root, delta_timestamps=dt)
    assert valid[ds.anchors].all()
    batch = ds.get_batch(np.arange(len(ds)))
    act, pad = batch["action"], batch["action_is_pad"]
    assert torch.isfinite(act).all()  # padded invalid labels hold zeros, never NaN
    # every unpadded action value is a valid label from the same episode at the right offset
    anchors = ds.anchors
    for row in range(len(ds)):
        for j, d in enumerate(range(-3, 12)):
            if not pad[row, j]:
                q = anchors[row] + d
                assert valid[q]
                np.testing.assert_array_equal(act[row, j].numpy(), raw[q])
    # the item path agrees with the batch path
    for i in range(0, len(ds), 7):
        assert_items_equal(ds[i], {k: v[i] for k, v in batch.items()})


def test_get_batch_equals_collated_items(small_store) -> None:
    ds = OdsdLeRobotDataset(small_store.root, delta_timestamps=DT)
    idx = np.random.default_rng(0).integers(0, len(ds), 33)
    assert_items_equal(ds.get_batch(idx), default_collate([ds[int(i)] for i in idx]))
    assert_items_equal(ds[torch.as_tensor(idx)], ds.get_batch(idx))


def test_delta_timestamps_are_validated(small_store) -> None:
    with pytest.raises(ConfigError, match="multiples"):
        OdsdLeRobotDataset(small_store.root, delta_timestamps={"action": [0.05]})
    with pytest.raises(ConfigError, match="not features"):
        OdsdLeRobotDataset(small_store.root, delta_timestamps={"nope": [0.0]})
    with pytest.raises(ConfigError, match="label"):
        OdsdLeRobotDataset(small_store.root, label="teacher")


def test_label_mapping(small_store) -> None:
    ds = OdsdLeRobotDataset(small_store.root, label="behavior")
    snap = small_store.snapshot()
    assert len(ds) == snap.num_frames  # behavior labels are always valid
    np.testing.assert_array_equal(
        ds.get_batch(np.arange(len(ds)))["action"].numpy(), snap.read("action.behavior")
    )
    assert ds.meta.stats_version != OdsdLeRobotDataset(small_store.root).meta.stats_version


def test_stats_layout_and_freezing(small_store) -> None:
    ds = OdsdLeRobotDataset(small_store.root)
    stats = ds.meta.stats
    for key in ("observation.state", "action", "next.reward", "timestamp"):
        assert set(stats[key]) == {"min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99"}
        assert stats[key]["count"].shape == (1,)
    assert stats["action"]["mean"].shape == (2,) and stats["next.reward"]["mean"].shape == (1,)
    snap = small_store.snapshot()
    good = snap.read("action.expert")[snap.read("action.expert_valid")]
    np.testing.assert_allclose(stats["action"]["mean"], good.mean(0), rtol=1e-6)
    np.testing.assert_allclose(stats["action"]["q50"], np.quantile(good, 0.5, axis=0), rtol=1e-6)
    assert int(stats["action"]["count"][0]) == len(good)
    # frozen across refresh, recomputed on request with a new version id
    version = ds.meta.stats_version
    rng = np.random.default_rng(9)
    small_store.writer(run_id="t2").commit([make_episode(10, rng, iteration=5)])
    assert ds.refresh() == 10
    assert ds.meta.stats_version == version and ds.meta.stats is stats
    ds.refresh(recompute_stats=True)
    assert ds.meta.stats_version != version
    assert int(ds.meta.stats["action"]["count"][0]) > len(good)


def test_refresh_appends_and_keeps_old_items(small_store) -> None:
    ds = OdsdLeRobotDataset(small_store.root, delta_timestamps=DT)
    wm, n_items = ds.watermark, len(ds)
    before = [ds[i] for i in range(n_items)]
    assert ds.refresh() == 0 and ds.watermark == wm
    rng = np.random.default_rng(1)
    small_store.writer(run_id="t2").commit(
        [make_episode(8, rng, iteration=7), make_episode(4, rng, iteration=7)]
    )
    assert ds.refresh() == 12
    assert ds.watermark == wm + 1 and ds.num_episodes == 8 and len(ds) > n_items
    for i in range(n_items):
        assert_items_equal(ds[i], before[i])
    fresh = OdsdLeRobotDataset(small_store.root, delta_timestamps=DT, stats=ds.meta.stats)
    assert_items_equal(ds.get_batch(np.arange(len(ds))), fresh.get_batch(np.arange(len(fresh))))
    # a pinned watermark stays put
    old = OdsdLeRobotDataset(small_store.root, watermark=wm)
    assert old.num_episodes == 6


def test_selection_episode_level(small_store) -> None:
    snap = small_store.snapshot()
    metas = {e.episode_id: e.meta for e in snap.entries}
    ok = OdsdLeRobotDataset(small_store.root, selection=Selection(outcome="success"))
    assert all(metas[i].success for i in ok.meta.episodes["odsd/episode_id"])
    bad = OdsdLeRobotDataset(small_store.root, selection=Selection(outcome="failure"))
    assert not any(metas[i].success for i in bad.meta.episodes["odsd/episode_id"])
    assert ok.num_episodes + bad.num_episodes == snap.num_episodes
    recent = OdsdLeRobotDataset(small_store.root, selection=Selection(recent=2))
    assert recent.meta.episodes["odsd/episode_id"] == snap.episode_ids[-2:].tolist()
    assert recent.meta.episodes["dataset_from_index"][0] == 0  # renumbered over the view
    its = OdsdLeRobotDataset(small_store.root, selection=Selection(iterations=[1]))
    assert set(its.meta.episodes["odsd/iteration"]) == {1}
    chosen = OdsdLeRobotDataset(small_store.root, selection=Selection(episodes=[4, 1]))
    assert chosen.meta.episodes["odsd/episode_id"] == [1, 4]
    assert len({ok.meta.stats_version, bad.meta.stats_version, recent.meta.stats_version}) == 3


def test_selection_frame_level(small_store) -> None:
    dt = {"action": [i / 10 for i in range(0, 3)]}
    seg_ds = OdsdLeRobotDataset(
        small_store.root, delta_timestamps=dt, selection=Selection(window_mode="segment")
    )
    bnd_ds = OdsdLeRobotDataset(
        small_store.root, delta_timestamps=dt, selection=Selection(window_mode="boundary")
    )
    seg = seg_ds.view.segment_id.astype(int)
    fe = seg_ds.view.frame_episode
    for p in seg_ds.anchors:
        assert len(set(seg[p : p + 3])) == 1 and len(set(fe[p : p + 3])) == 1
    for p in bnd_ds.anchors:
        assert len(set(seg[p : p + 3])) > 1 and len(set(fe[p : p + 3])) == 1
    assert len(seg_ds) and len(bnd_ds)
    grasp = OdsdLeRobotDataset(small_store.root, selection=Selection(segments=["grasp"]))
    snap = small_store.snapshot()
    assert (snap.read("segment_id")[grasp.anchors] == 1).all()
    fail = OdsdLeRobotDataset(small_store.root, selection=Selection(failure_focused=True))
    ep_success = np.array(fail.meta.episodes["odsd/success"])[fail.view.frame_episode[fail.anchors]]
    assert len(fail) and not ep_success.any()
    # only the failed (last) segment of failed episodes
    seg_f, fe_f = fail.view.segment_id, fail.view.frame_episode
    for p in fail.anchors:
        assert seg_f[p] == seg_f[fe_f == fe_f[p]].max()
    with pytest.raises(ConfigError):
        Selection(outcome="maybe")


def test_pickle_and_dataloader_workers(small_store) -> None:
    ds = OdsdLeRobotDataset(small_store.root, delta_timestamps=DT)
    clone = pickle.loads(pickle.dumps(ds))
    assert clone.meta.stats_version == ds.meta.stats_version
    assert_items_equal(clone.get_batch(np.arange(len(ds))), ds.get_batch(np.arange(len(ds))))
    assert len(pickle.dumps(ds)) < 200_000  # no frame data travels to spawned workers
    loader = DataLoader(ds, batch_size=16, shuffle=False, num_workers=2)
    got = [b for b in loader]
    want = [ds.get_batch(np.arange(i, min(i + 16, len(ds)))) for i in range(0, len(ds), 16)]
    for a, b in zip(got, want, strict=True):
        assert_items_equal(a, b)
    fast = batch_loader(ds, 16, shuffle=True, num_workers=2, seed=3)
    seen = np.concatenate([b["index"].numpy() for b in fast])
    assert sorted(seen.tolist()) == sorted(ds.anchors.tolist())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lengths=st.lists(st.integers(1, 12), min_size=1, max_size=5),
    deltas=st.lists(st.integers(-6, 6), min_size=1, max_size=6),
    invalid_rate=st.sampled_from([0.0, 0.3, 0.8]),
    seed=st.integers(0, 2**16),
)
def test_window_semantics_property(tmp_path_factory, lengths, deltas, invalid_rate, seed) -> None:
    path = tmp_path_factory.mktemp("prop") / "s"
    store = build_store(path, seed=seed, lengths=lengths, invalid_rate=invalid_rate)
    dt = {"action": [d / 10 for d in deltas], "observation.state": [d / 10 for d in deltas]}
    ds = OdsdLeRobotDataset(store.root, delta_timestamps=dt)
    snap = store.snapshot()
    valid = snap.read("action.expert_valid")
    state = snap.read("observation.state")
    expert = np.nan_to_num(snap.read("action.expert"), nan=0.0)
    starts, lens = snap.starts, snap.lengths
    want_anchors = [p for p in range(snap.num_frames) if valid[p]]
    assert ds.anchors.tolist() == want_anchors
    if not want_anchors:
        assert len(ds) == 0
        return
    batch = ds.get_batch(np.arange(len(ds)))
    for row, p in enumerate(want_anchors):
        e = int(np.searchsorted(starts, p, side="right") - 1)
        lo, hi = int(starts[e]), int(starts[e] + lens[e])
        idx, pad = reference_window(p, lo, hi, deltas, valid)
        assert batch["action_is_pad"][row].tolist() == pad
        np.testing.assert_array_equal(
            batch["action"][row].numpy(), np.where(valid[idx][:, None], expert[idx], 0)
        )
        sidx, spad = reference_window(p, lo, hi, deltas, None)
        assert batch["observation.state_is_pad"][row].tolist() == spad
        np.testing.assert_array_equal(batch["observation.state"][row].numpy(), state[sidx])
        assert int(batch["frame_index"][row]) == p - lo and int(batch["episode_index"][row]) == e
    k = int(np.random.default_rng(seed).integers(len(ds)))
    assert_items_equal(ds[k], {key: v[k] for key, v in batch.items()})
