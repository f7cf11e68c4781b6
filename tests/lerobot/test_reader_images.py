"""Camera keys in OdsdLeRobotDataset: LeRobot's item layout, windows, lazy bounded reads, workers, stats."""

from __future__ import annotations

import multiprocessing
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from lerobot_helpers import build_camera_store, camera_frame, reference_window, train_act_with_camera

from odsd.errors import ConfigError
from odsd.lerobot import OdsdLeRobotDataset, batch_loader, compat
from odsd.lerobot import frames as frames_mod
from odsd.lerobot.stats import image_stats, sample_frames
from odsd.store import EpisodeStore

TOP, WRIST = "observation.images.top", "observation.images.wrist"
H, W = 24, 32


def expected_frames(ds: OdsdLeRobotDataset, positions: np.ndarray, camera: int) -> np.ndarray:
    """uint8 [*positions.shape, H, W, 3] from the generating function, via each position's episode id."""
    view = ds.view
    flat = positions.reshape(-1)
    ep = view.frame_episode[flat]
    ids = view.episode_ids[ep]
    offs = flat - view.from_index[ep]
    out = np.stack([camera_frame(int(i), int(f), H, W, camera) for i, f in zip(ids, offs, strict=True)])
    return out.reshape(*positions.shape, H, W, 3)


def as_float_chw(frames: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(frames).movedim(-1, -3).to(torch.float32) / 255


def test_items_carry_float_chw_frames_of_their_frame(camera_store: EpisodeStore) -> None:
    ds = OdsdLeRobotDataset(camera_store)
    for i in range(len(ds)):
        item = ds[i]
        p = np.array(int(ds.anchors[i]))
        for c, key in enumerate((TOP, WRIST)):
            assert item[key].dtype == torch.float32 and item[key].shape == (3, H, W)
            assert torch.equal(item[key], as_float_chw(expected_frames(ds, p, c))), (i, key)
            assert float(item[key].min()) >= 0.0 and float(item[key].max()) <= 1.0


@pytest.mark.parametrize(("fmt", "shape"), [("uint8", (3, H, W)), ("uint8_hwc", (H, W, 3))])
def test_uint8_formats(camera_store: EpisodeStore, fmt: str, shape: tuple[int, ...]) -> None:
    ds = OdsdLeRobotDataset(camera_store, camera_format=fmt)
    item = ds[5]
    raw = expected_frames(ds, np.array(int(ds.anchors[5])), 0)
    want = torch.from_numpy(raw) if fmt == "uint8_hwc" else torch.from_numpy(raw).permute(2, 0, 1)
    assert item[TOP].dtype == torch.uint8 and item[TOP].shape == shape
    assert torch.equal(item[TOP], want)
    with pytest.raises(ConfigError, match="camera_format"):
        OdsdLeRobotDataset(camera_store, camera_format="uint16")


def test_camera_windows_pad_like_lerobot_and_invalid_labels_keep_their_images(
    camera_store: EpisodeStore,
) -> None:
    deltas = {TOP: [-0.3, -0.1, 0.0, 0.2], "action": [0.0, 0.1, 0.2, 0.3, 0.4]}
    ds = OdsdLeRobotDataset(camera_store, delta_timestamps=deltas)
    valid = ds.view.label_valid
    seen_invalid = 0
    for i in range(len(ds)):
        item = ds[i]
        p = int(ds.anchors[i])
        e = int(ds.view.frame_episode[p])
        lo, hi = int(ds.view.from_index[e]), int(ds.view.to_index[e])
        idx, pad = reference_window(p, lo, hi, [-3, -1, 0, 2], None)
        assert item[TOP].shape == (4, 3, H, W)
        assert item[f"{TOP}_is_pad"].tolist() == pad
        assert torch.equal(item[TOP], as_float_chw(expected_frames(ds, np.array(idx), 0)))
        assert item[WRIST].shape == (3, H, W)  # no window: the anchor frame
        _, a_pad = reference_window(p, lo, hi, [0, 1, 2, 3, 4], valid)
        assert item["action_is_pad"].tolist() == a_pad
        seen_invalid += sum(not valid[q] for q in idx)
    assert seen_invalid > 0  # windows over frames with invalid labels: their images are still real
    # a frame with an invalid label: its camera frame is delivered as the observation of a window
    bad = int(np.flatnonzero(~valid)[0])
    dsw = OdsdLeRobotDataset(camera_store, delta_timestamps={TOP: [0.0], "action": [0.0]})
    dsw_batch = dsw.get_batch(np.arange(len(dsw)))
    ep = int(dsw.view.frame_episode[bad])
    # the anchor nearest after it (within its episode) sees it through a -k window
    k = next(k for k in range(1, 20) if bad + k < dsw.view.to_index[ep] and valid[bad + k])
    dsk = OdsdLeRobotDataset(camera_store, delta_timestamps={TOP: [-k / 10], "action": [-k / 10]})
    i = int(np.flatnonzero(dsk.anchors == bad + k)[0])
    item = dsk[i]
    assert item["action_is_pad"].tolist() == [True]  # the label is masked ...
    assert item[f"{TOP}_is_pad"].tolist() == [False]  # ... the observation is not
    assert torch.equal(item[TOP], as_float_chw(expected_frames(dsk, np.array(bad), 0)))
    assert float(item[TOP].std()) > 0
    # a one-element window of a video feature has no time axis (LeRobot squeezes it); images keep it
    assert dsw_batch[TOP].shape == (len(dsw), 3, H, W)
    dsi = OdsdLeRobotDataset(camera_store, cameras="image", delta_timestamps={TOP: [0.0]})
    assert dsi[0][TOP].shape == (1, 3, H, W)


def test_get_batch_equals_collated_items(camera_store: EpisodeStore) -> None:
    deltas = {TOP: [-0.2, 0.0], WRIST: [0.0], "action": [0.0, 0.1, 0.2]}
    for cameras in ("video", "image"):
        ds = OdsdLeRobotDataset(camera_store, delta_timestamps=deltas, cameras=cameras)
        idx = np.random.default_rng(0).permutation(len(ds))[:17]
        batch = ds.get_batch(idx)
        ref = torch.utils.data.default_collate([ds[int(i)] for i in idx])
        assert batch.keys() == ref.keys()
        for k in batch:
            if k == "task":
                assert batch[k] == ref[k]
            else:
                assert batch[k].dtype == ref[k].dtype and torch.equal(batch[k], ref[k]), k


def test_frames_are_read_lazily_one_call_per_segment(
    camera_store: EpisodeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, str, int]] = []
    real = frames_mod.read_frames

    def counting(root, info, field, spec, frames):
        calls.append((info.path, field, len(frames)))
        return real(root, info, field, spec, frames)

    monkeypatch.setattr(frames_mod, "read_frames", counting)
    ds = OdsdLeRobotDataset(camera_store, delta_timestamps={TOP: [-0.1, 0.0]}, decode_cache_bytes=0)
    assert TOP not in ds.view.columns and WRIST not in ds.view.columns
    assert not {TOP, WRIST} & set(ds.snapshot._columns)  # the store never materialized a camera column
    calls.clear()
    batch = ds.get_batch(np.arange(len(ds)))
    segments = {c[0] for c in calls}
    assert len(calls) == 2 * len(segments) == 2 * len(ds.view.segments)  # per camera and segment
    assert batch[TOP].shape[0] == len(ds)


def test_decode_cache_is_bounded_and_serves_repeats(
    camera_store: EpisodeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    frame_bytes = H * W * 3
    ds = OdsdLeRobotDataset(camera_store, decode_cache_bytes=10 * frame_bytes)
    for i in range(len(ds)):
        ds[i]
        assert ds._frames.cache.nbytes <= 10 * frame_bytes
    assert len(ds._frames.cache) == 10
    monkeypatch.setattr(frames_mod, "read_frames", lambda *a: pytest.fail("read despite cache"))
    last = ds[len(ds) - 1]
    assert last[TOP].shape == (3, H, W)
    with pytest.raises(ConfigError):
        OdsdLeRobotDataset(camera_store, decode_cache_bytes=-1)


def test_pickles_without_frames_and_workers_decode(camera_store: EpisodeStore) -> None:
    ds = OdsdLeRobotDataset(camera_store, delta_timestamps={TOP: [-0.1, 0.0], "action": [0.0, 0.1]})
    empty = len(pickle.dumps(ds))
    ds.get_batch(np.arange(len(ds)))  # fills the cache
    assert ds._frames.cache.nbytes > 0
    state = pickle.dumps(ds)
    assert len(state) == empty and len(state) < 64 * 1024
    clone = pickle.loads(state)
    assert clone._frames.cache.nbytes == 0
    want = ds.get_batch(np.arange(len(ds)))
    for method in ("spawn", "fork"):
        loader = batch_loader(
            ds,
            batch_size=8,
            shuffle=False,
            num_workers=2,
            multiprocessing_context=multiprocessing.get_context(method),
        )
        got = list(loader)
        for key in (TOP, WRIST, f"{TOP}_is_pad", "action"):
            assert torch.equal(torch.cat([b[key] for b in got]), want[key]), (method, key)


def test_camera_stats_follow_lerobot(camera_store: EpisodeStore) -> None:
    from lerobot.datasets.compute_stats import get_feature_stats

    ds = OdsdLeRobotDataset(camera_store, image_stats_frames=50)
    pos = sample_frames(ds.view.from_index, ds.view.lengths, 50)
    assert len(pos) == 50
    for c, key in enumerate((TOP, WRIST)):
        stats = ds.meta.stats[key]
        assert all(v.shape == (3, 1, 1) for k, v in stats.items() if k != "count")
        assert stats["count"].tolist() == [50]
        assert stats["min"].min() >= 0 and stats["max"].max() <= 1
        raw = expected_frames(ds, pos, c)
        want = image_stats(raw)
        for k in stats:
            np.testing.assert_allclose(stats[k], want[k], err_msg=k)
        # LeRobot's own per-channel stats of the same frames (CHW, axis (0, 2, 3)), scaled to [0, 1]
        ref = get_feature_stats(raw.transpose(0, 3, 1, 2).astype(np.float64), axis=(0, 2, 3), keepdims=True)
        for k in ("min", "max", "mean"):
            np.testing.assert_allclose(stats[k], ref[k][0] / 255, rtol=1e-6, err_msg=k)
        np.testing.assert_allclose(stats["std"], ref["std"][0] / 255, rtol=1e-3)  # LeRobot: running
        for k in ("q01", "q50", "q99"):  # LeRobot's quantiles come from histograms: close, not equal
            np.testing.assert_allclose(stats[k], ref[k][0] / 255, atol=0.02, err_msg=k)
    assert ds.meta.stats_version != OdsdLeRobotDataset(camera_store).meta.stats_version


def test_meta_maps_cameras_to_visual_and_leaves_depth_out(tmp_path: Path) -> None:
    from lerobot.configs.types import FeatureType

    store = build_camera_store(tmp_path / "s", lengths=[6, 4], depth=True)
    for cameras in ("video", "image"):
        ds = OdsdLeRobotDataset(store, cameras=cameras)
        assert ds.meta.camera_keys == [TOP, WRIST]
        assert "observation.depth.top" not in ds.meta.features and "observation.depth.top" not in ds[0]
        ft = ds.meta.features[TOP]
        assert ft["dtype"] == cameras and tuple(ft["shape"]) == (H, W, 3)
        assert ft["names"] == ["height", "width", "channels"]
        policy = compat.policy_features(ds.meta.features)
        assert policy[TOP].type is FeatureType.VISUAL and policy[TOP].shape == (3, H, W)
    assert ds.meta.video_path is None
    assert OdsdLeRobotDataset(store).meta.video_path.startswith("videos/{video_key}/")


def test_act_with_a_camera_trains_from_the_reader_through_workers(tmp_path: Path) -> None:
    store = build_camera_store(tmp_path / "s", lengths=[20, 16, 24], cameras=("top",), height=32, width=32)
    ds = OdsdLeRobotDataset(store, delta_timestamps={"action": [i / 10 for i in range(4)]})
    loader = torch.utils.data.DataLoader(ds, batch_size=8, shuffle=True, num_workers=2)
    losses = train_act_with_camera(ds.meta, loader, steps=4)
    assert len(losses) == 4


def test_a_camera_reader_holds_one_reader_lease_while_it_lives(tmp_path) -> None:
    """Frames are read lazily, so the reader pins its snapshot with a lease (one, also after refresh)."""
    from odsd.store.leases import active_leases

    store = build_camera_store(tmp_path / "cams", seed=1)
    ds = OdsdLeRobotDataset(store)
    leases = active_leases(store.root)
    assert [lease.watermark for lease in leases] == [ds.watermark]
    ds.refresh()
    assert len(active_leases(store.root)) == 1
    ds.snapshot.close()
    assert active_leases(store.root) == []


def test_a_reader_without_cameras_takes_no_lease(small_store) -> None:
    from odsd.store.leases import active_leases

    OdsdLeRobotDataset(small_store)
    assert active_leases(small_store.root) == []


def test_image_transforms_run_per_item_in_batches_too(camera_store: EpisodeStore) -> None:
    calls: list[tuple[int, ...]] = []

    def invert(frames: torch.Tensor) -> torch.Tensor:
        calls.append(tuple(frames.shape))
        return 1 - frames

    deltas = {TOP: [-0.1, 0.0], "action": [0.0, 0.1]}
    ds = OdsdLeRobotDataset(camera_store, delta_timestamps=deltas, image_transforms=invert)
    plain = OdsdLeRobotDataset(camera_store, delta_timestamps=deltas)
    idx = [0, 5, 9]
    batch = ds.get_batch(idx)
    assert calls == [(2, 3, H, W)] * 3 + [(3, H, W)] * 3  # per item: the TOP window, then WRIST
    ref = plain.get_batch(idx)
    assert torch.equal(batch[TOP], 1 - ref[TOP]) and torch.equal(batch[WRIST], 1 - ref[WRIST])
    assert torch.equal(batch["action"], ref["action"])
    ds.clear_image_transforms()
    assert torch.equal(ds[5][WRIST], plain[5][WRIST])
