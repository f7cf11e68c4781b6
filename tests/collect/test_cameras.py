"""Camera frames through the collector: every stored frame is the one the env showed at that step."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from collect_helpers import CameraToyEnv, ToyExpert, toy_frame

from odsd.collect import CollectConfig, Collector
from odsd.errors import ConfigError
from odsd.store import EpisodeStore
from odsd.store.codecs import DEFAULT_IMAGE_ENCODING
from odsd.store.errors import SchemaMismatchError

CAM = "observation.images.cam"


def collect(tmp_path, *, expert: ToyExpert | None = None, **kw) -> EpisodeStore:
    cfg = CollectConfig(
        mode="expert_demo",
        task="toy",
        store=tmp_path / "s",
        durability="process",
        keep_failed=True,
        max_episodes=20,
        **kw,
    )
    Collector(cfg, env=CameraToyEnv(4), expert=expert or ToyExpert()).run()
    return EpisodeStore.open(tmp_path / "s")


def assert_frames_are_the_envs(store: EpisodeStore) -> int:
    snap = store.snapshot()
    state = snap.column("observation.state")  # [row, episode, step, global_t] per frame
    images = snap.column(CAM)
    assert images.dtype == np.uint8 and images.shape == (snap.num_frames, 6, 10, 3)
    for i in range(snap.num_frames):
        row, episode, step = (int(v) for v in state[i, :3])
        np.testing.assert_array_equal(images[i], toy_frame(row, episode, step), err_msg=f"frame {i}")
    return snap.num_frames


@pytest.mark.parametrize("encoding", [None, "png", "qoi", "webp", "zstd"])
def test_lossless_frames_round_trip_bit_exactly(tmp_path, encoding) -> None:
    store = collect(tmp_path, image_encoding={"cam": encoding} if encoding else {})
    feature = store.manifest.features[CAM]
    assert feature.kind == "image" and feature.dtype == "uint8" and list(feature.shape) == [6, 10, 3]
    assert feature.encoding is not None and feature.encoding.codec == (
        encoding or DEFAULT_IMAGE_ENCODING.codec
    )
    assert store.snapshot().num_episodes == 20
    assert assert_frames_are_the_envs(store) > 20


def test_frames_with_invalid_labels_are_still_stored(tmp_path) -> None:
    store = collect(tmp_path, expert=ToyExpert(invalid_rows=[1]))
    snap = store.snapshot()
    valid = snap.column("action.expert_valid")
    rows = snap.column("observation.state")[:, 0]
    assert not valid[rows == 1].any() and (rows == 1).any()
    assert assert_frames_are_the_envs(store) == snap.num_frames


def test_a_lossy_encoding_is_recorded_in_the_schema(tmp_path) -> None:
    store = collect(tmp_path, image_encoding={"*": "jpeg:90"})
    encoding = store.manifest.features[CAM].encoding
    assert encoding is not None and (encoding.codec, encoding.quality) == ("jpeg", 90)
    images = store.snapshot().column(CAM)
    assert images.shape[1:] == (6, 10, 3)


def test_an_unknown_camera_or_codec_is_one_clear_error(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"unknown cameras \['side'\].*has: cam"):
        collect(tmp_path, image_encoding={"side": "png"})
    with pytest.raises(ConfigError, match="gif"):
        collect(tmp_path, image_encoding={"cam": "gif"})


def test_resuming_with_another_encoding_is_refused(tmp_path) -> None:
    collect(tmp_path, image_encoding={"cam": "png"})
    with pytest.raises(SchemaMismatchError, match=r"observation\.images\.cam.*qoi"):
        collect(tmp_path, image_encoding={"cam": "qoi"})


def test_collected_frames_reach_the_lerobot_reader_bit_exactly(tmp_path) -> None:
    """collector → store → ``OdsdLeRobotDataset``: every item's image is the env's frame, as LeRobot scales it."""
    from odsd.lerobot import OdsdLeRobotDataset

    store = collect(tmp_path)
    raw = OdsdLeRobotDataset(store, label="expert", camera_format="uint8_hwc")
    scaled = OdsdLeRobotDataset(store, label="expert")
    assert len(raw) == len(scaled) > 0
    for i in range(len(raw)):
        item = raw[i]
        row, episode, step = (int(v) for v in item["observation.state"][:3])
        expected = toy_frame(row, episode, step)
        np.testing.assert_array_equal(item[CAM].numpy(), expected, err_msg=f"item {i}")
        chw = torch.from_numpy(expected).permute(2, 0, 1).float() / 255
        torch.testing.assert_close(scaled[i][CAM], chw, rtol=0, atol=0)
