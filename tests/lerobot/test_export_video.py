"""export-lerobot with cameras: mp4 video features (LeRobot's encoder defaults) or PNG image features,
loaded by the real LeRobotDataset (its own video decoder) and equal to the reader's items."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
import typer
from lerobot_helpers import build_camera_store, camera_frame, train_act_with_camera
from typer.testing import CliRunner

from odsd.cli.export import export_lerobot_cmd
from odsd.errors import ConfigError
from odsd.lerobot import OdsdLeRobotDataset, Selection, compat, export_lerobot
from odsd.lerobot import export_cameras as export_cameras_mod
from odsd.lerobot.export_cameras import shards
from odsd.lerobot.video import VideoEncoder
from odsd.store import EpisodeStore

pytest.importorskip("lerobot.datasets.lerobot_dataset")
pytestmark = pytest.mark.lerobot

from lerobot.datasets.lerobot_dataset import LeRobotDataset  # noqa: E402

TOP, WRIST = "observation.images.top", "observation.images.wrist"
CAMS = (TOP, WRIST)
H, W = 32, 48
MAE, MAX = 0.02, 0.2
"""Video tolerance in [0, 1] units (SVT-AV1, crf 30, yuv420p, these smooth frames): mean abs error
and max abs error per frame; measured 0.008 and 0.098."""
WINDOWS = {TOP: [-0.2, -0.1, 0.0], WRIST: [0.0], "action": [0.0, 0.1, 0.2, 0.3]}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> EpisodeStore:
    return build_camera_store(tmp_path_factory.mktemp("cams") / "s", height=H, width=W)


def lerobot(out: Path, **kw: object) -> LeRobotDataset:
    return LeRobotDataset("odsd/cams", root=out, video_backend=compat.video_backend(), **kw)


def truth(ds: OdsdLeRobotDataset, index: int, camera: int) -> torch.Tensor:
    """The store's frame at LeRobot index ``index``, float CHW, from the generating function."""
    view = ds.view
    e = int(view.frame_episode[index])
    raw = camera_frame(int(view.episode_ids[e]), index - int(view.from_index[e]), H, W, camera)
    return torch.from_numpy(raw).permute(2, 0, 1).float() / 255


def close(a: torch.Tensor, b: torch.Tensor) -> None:
    err = (a - b).abs()
    assert float(err.mean()) <= MAE and float(err.max()) <= MAX, (float(err.mean()), float(err.max()))


def compare(ods: OdsdLeRobotDataset, lds: LeRobotDataset, *, exact: bool) -> None:
    assert len(ods) <= len(lds)
    for i in range(len(ods)):
        a = ods[i]
        b = lds[int(a["index"])]
        assert a.keys() == b.keys(), a.keys() ^ b.keys()
        for k in a:
            if isinstance(a[k], str):
                assert a[k] == b[k]
                continue
            assert (a[k].dtype, a[k].shape) == (b[k].dtype, b[k].shape), k
            if k == "action_is_pad":  # the reader also pads invalid labels (docs/lerobot.md)
                assert not (b[k] & ~a[k]).any()
            elif k in CAMS and not exact:
                close(a[k], b[k])
            else:
                assert torch.equal(a[k], b[k]), k


def test_video_export_loads_in_lerobot_with_its_decoder(store: EpisodeStore, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    result = export_lerobot(store, out, repo_id="odsd/cams", durable=False)
    assert result.cameras == CAMS and result.camera_dtype == "video" and result.video_files >= 2
    for key in CAMS:
        assert (out / f"videos/{key}/chunk-000/file-000.mp4").is_file()
    info = json.loads((out / "meta/info.json").read_text())
    assert info["video_path"] == "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    ft = info["features"][TOP]
    assert ft["dtype"] == "video" and ft["shape"] == [H, W, 3]
    assert ft["info"]["video.codec"] == "av1" and ft["info"]["video.pix_fmt"] == "yuv420p"
    assert (ft["info"]["video.g"], ft["info"]["video.crf"], ft["info"]["video.preset"]) == (2, 30, 12)

    lds = lerobot(out)
    ods = OdsdLeRobotDataset(store)
    assert lds.meta.video_keys == list(CAMS) and len(lds) == ods.num_frames
    # every stored frame, decoded by LeRobot, within the codec's tolerance
    for index in range(len(lds)):
        item = lds[index]
        for c, key in enumerate(CAMS):
            close(item[key], truth(ods, index, c))
    eps = lds.meta.episodes
    assert [eps[i][f"videos/{TOP}/from_timestamp"] for i in range(2)] == [0.0, 12 / 10]
    # reader items == LeRobotDataset items, windows and padding included
    compare(
        OdsdLeRobotDataset(store, delta_timestamps=WINDOWS),
        lerobot(out, delta_timestamps=WINDOWS),
        exact=False,
    )
    # statistics: the reader's, in LeRobot's image layout
    for key in CAMS:
        for stat, value in ods.meta.stats[key].items():
            np.testing.assert_allclose(lds.meta.stats[key][stat], value, err_msg=f"{key}/{stat}")
        assert lds.meta.stats[key]["mean"].shape == (3, 1, 1)


def test_image_export_is_exact(store: EpisodeStore, tmp_path: Path) -> None:
    out = tmp_path / "img"
    result = export_lerobot(store, out, repo_id="odsd/cams", durable=False, images=True, workers=2)
    assert result.camera_dtype == "image" and result.video_files == 0 and not (out / "videos").exists()
    lds = lerobot(out)
    assert lds.meta.image_keys == list(CAMS) and lds.meta.video_keys == []
    ods = OdsdLeRobotDataset(store, cameras="image")
    for index in range(len(lds)):
        for c, key in enumerate(CAMS):
            assert torch.equal(lds[index][key], truth(ods, index, c))
    compare(
        OdsdLeRobotDataset(store, cameras="image", delta_timestamps=WINDOWS),
        lerobot(out, delta_timestamps=WINDOWS),
        exact=True,
    )


def test_many_files_and_shards_keep_every_frame_in_place(store: EpisodeStore, tmp_path: Path) -> None:
    assert shards(np.array([12, 7, 20, 5, 15, 9]), 3) == [(0, 3), (3, 5), (5, 6)]
    assert shards(np.array([5]), 4) == [(0, 1)]
    out = tmp_path / "many"
    result = export_lerobot(
        store,
        out,
        repo_id="odsd/cams",
        durable=False,
        workers=3,
        video_files_size_in_mb=1e-4,  # a new file after every episode
        chunks_size=4,
        video_encoder=VideoEncoder(codec="h264", crf=18, preset=None),
    )
    assert result.video_files == 2 * 6
    assert (out / f"videos/{TOP}/chunk-001/file-001.mp4").is_file()
    lds = lerobot(out)
    assert lds.meta.features[TOP]["info"]["video.codec"] == "h264"
    ods = OdsdLeRobotDataset(store)
    for index in range(len(lds)):
        close(lds[index][WRIST], truth(ods, index, 1))
    assert not list(out.rglob(".shard-*"))


def test_segment_clips_carry_their_own_frames(store: EpisodeStore, tmp_path: Path) -> None:
    out = tmp_path / "clips"
    sel = Selection(segments=("grasp",))
    export_lerobot(store, out, repo_id="odsd/cams", durable=False, selection=sel, images=True)
    lds = lerobot(out)
    ods = OdsdLeRobotDataset(store, cameras="image")
    table = lds.meta.episodes
    for e in range(lds.meta.total_episodes):
        eid, start = table[e]["odsd/episode_id"], table[e]["odsd/segment_start"]
        first = table[e]["dataset_from_index"]
        for f in range(table[e]["length"]):
            want = camera_frame(eid, start + f, H, W, 0)
            assert torch.equal(lds[first + f][TOP], torch.from_numpy(want).permute(2, 0, 1).float() / 255)
    assert ods.meta.stats[TOP]["mean"].shape == (3, 1, 1)


def test_depth_is_skipped_with_one_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = build_camera_store(tmp_path / "s", lengths=[5, 4], height=16, width=16, depth=True)
    with caplog.at_level(logging.WARNING, logger="odsd.lerobot"):
        result = export_lerobot(store, tmp_path / "ds", repo_id="odsd/cams", durable=False)
    assert result.skipped == ("observation.depth.top",)
    lines = [r.getMessage() for r in caplog.records if "depth" in r.getMessage()]
    assert len(lines) == 1 and "observation.depth.top" in lines[0]
    assert "observation.depth.top" not in lerobot(tmp_path / "ds").meta.features


def test_failed_encoding_leaves_nothing(
    store: EpisodeStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(self: object, frames: np.ndarray) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(export_cameras_mod.Mp4Writer, "write", boom)
    with pytest.raises(OSError, match="No space"):
        export_lerobot(store, tmp_path / "ds", repo_id="odsd/cams", durable=False)
    assert list(tmp_path.iterdir()) == []


def test_cli_flags(store: EpisodeStore, tmp_path: Path) -> None:
    app = typer.Typer()
    app.command()(export_lerobot_cmd)
    runner = CliRunner()
    out = tmp_path / "cli"
    res = runner.invoke(
        app,
        [
            str(store.root),
            str(out),
            "--video-codec",
            "h264",
            "--video-crf",
            "20",
            "--workers",
            "2",
            "--no-fsync",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "cameras: observation.images.top, observation.images.wrist as 2 mp4 files" in res.output
    info = json.loads((out / "meta/info.json").read_text())
    assert info["features"][TOP]["info"]["video.codec"] == "h264"
    assert info["features"][TOP]["info"]["video.crf"] == 20
    res = runner.invoke(app, [str(store.root), str(tmp_path / "bad"), "--video-codec", "vp9"])
    assert isinstance(res.exception, ConfigError) and res.exception.exit_code == 2
    assert "--video-codec must be one of" in str(res.exception)
    res = runner.invoke(app, [str(store.root), str(tmp_path / "img"), "--images", "--no-fsync"])
    assert res.exit_code == 0 and "as PNG image features" in res.output


def test_act_with_a_camera_trains_on_the_video_export(tmp_path: Path) -> None:
    store = build_camera_store(tmp_path / "s", lengths=[20, 16, 24], cameras=("top",), height=32, width=32)
    out = tmp_path / "ds"
    export_lerobot(store, out, repo_id="odsd/cams", durable=False)
    lds = lerobot(out, delta_timestamps={"action": [i / 10 for i in range(4)]})
    loader = torch.utils.data.DataLoader(lds, batch_size=8, shuffle=True, num_workers=2)
    losses = train_act_with_camera(lds.meta, loader, steps=4)
    assert len(losses) == 4


def _darken_and_flip(frames: torch.Tensor) -> torch.Tensor:
    return frames.flip(-1) * 0.5


def test_image_transforms_apply_like_lerobot(store: EpisodeStore, tmp_path: Path) -> None:
    """The same transform given to both readers gives the same items (image export: exactly)."""
    out = tmp_path / "img"
    export_lerobot(store, out, repo_id="odsd/cams", durable=False, images=True, workers=2)
    ods = OdsdLeRobotDataset(
        store, cameras="image", delta_timestamps=WINDOWS, image_transforms=_darken_and_flip
    )
    compare(ods, lerobot(out, delta_timestamps=WINDOWS, image_transforms=_darken_and_flip), exact=True)
    plain = OdsdLeRobotDataset(store, cameras="image", delta_timestamps=WINDOWS)
    assert torch.equal(ods[3][TOP], _darken_and_flip(plain[3][TOP]))
    with pytest.raises(TypeError, match="callable"):
        plain.set_image_transforms("flip")  # type: ignore[arg-type]
