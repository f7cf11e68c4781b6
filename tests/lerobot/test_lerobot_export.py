"""export-lerobot: a LeRobot v3.0 directory that LeRobot's own LeRobotDataset loads with identical values."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import typer
from lerobot_helpers import build_store
from typer.testing import CliRunner

from odsd.cli.export import export_lerobot_cmd
from odsd.lerobot import OdsdLeRobotDataset, Selection, compat, export_lerobot
from odsd.lerobot.export import ExportExistsError, read_provenance
from odsd.store import EpisodeStore

pytest.importorskip("lerobot.datasets.lerobot_dataset")
pytestmark = pytest.mark.lerobot

from lerobot.datasets.lerobot_dataset import LeRobotDataset  # noqa: E402

CHUNK = {"action": [i / 20 for i in range(16)], "observation.state": [-0.1, -0.05, 0.0]}


def assert_items_equal(a: dict, b: dict, skip: tuple[str, ...] = ()) -> None:
    assert a.keys() == b.keys(), a.keys() ^ b.keys()
    for k in a:
        if k in skip:
            continue
        if isinstance(a[k], str):
            assert a[k] == b[k], k
        else:
            assert (a[k].dtype, a[k].shape) == (b[k].dtype, b[k].shape), k
            assert torch.equal(a[k], b[k]), k


def test_export_roundtrip_with_lerobot_dataset(collected_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    result = export_lerobot(collected_store, out, repo_id="odsd/test", durable=False)
    snap = EpisodeStore.open(collected_store).snapshot()
    assert (result.episodes, result.frames) == (snap.num_episodes, snap.num_frames)
    lds = LeRobotDataset("odsd/test", root=out)
    # every frame's values equal the store's
    hf = lds.hf_dataset.with_format("numpy")
    np.testing.assert_array_equal(np.stack(hf["observation.state"]), snap.read("observation.state"))
    np.testing.assert_array_equal(
        np.stack(hf["observation.environment_state"]), snap.read("observation.environment_state")
    )
    np.testing.assert_array_equal(np.stack(hf["action"]), snap.read("action.expert"))
    np.testing.assert_array_equal(np.asarray(hf["next.reward"]), snap.read("reward"))
    np.testing.assert_array_equal(np.asarray(hf["policy_version"]), snap.read("policy_version"))
    np.testing.assert_array_equal(np.asarray(hf["segment_id"]), snap.read("segment_id"))
    np.testing.assert_array_equal(np.asarray(hf["expert_valid"]), snap.read("action.expert_valid"))
    np.testing.assert_array_equal(np.asarray(hf["frame_index"]), snap.read("episode_step"))
    assert lds.meta.total_episodes == snap.num_episodes and lds.meta.fps == 20
    # the same delta_timestamps give identical items and padding from both readers
    lds = LeRobotDataset("odsd/test", root=out, delta_timestamps=CHUNK)
    ods = OdsdLeRobotDataset(collected_store, delta_timestamps=CHUNK)
    assert len(ods) == len(lds)
    for i in range(len(ods)):
        a = ods[i]
        assert_items_equal(a, lds[int(a["index"])])
    # metadata and statistics agree
    assert lds.meta.features.keys() == ods.meta.features.keys()
    for key, stats in ods.meta.stats.items():
        for name, value in stats.items():
            np.testing.assert_allclose(lds.meta.stats[key][name], value, err_msg=f"{key}/{name}")
    assert list(lds.meta.episodes["dataset_to_index"]) == ods.meta.episodes["dataset_to_index"]
    assert lds.meta.tasks.index.tolist() == ods.meta.task_names
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["codebase_version"] == "v3.0" and compat.info_dict(lds.meta.info) == info
    assert read_provenance(out) == {**ods.meta.provenance, "store": str(collected_store)}


def test_export_invalid_labels_file_rolling_and_selection(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", seed=5, invalid_rate=0.3, lengths=[30, 25, 40, 12, 33, 28])
    out = tmp_path / "ds"
    sel = Selection(episodes=[0, 2, 3, 4, 5])
    res = export_lerobot(store, out, selection=sel, data_files_size_in_mb=0.001, chunks_size=2, durable=False)
    assert res.data_files > 2 and res.invalid_labels > 0
    assert len(list((out / "data").glob("chunk-*/file-*.parquet"))) == res.data_files
    assert (out / "data" / "chunk-001").is_dir()  # chunk rolling after 2 files
    dt = {"action": [i / 10 for i in range(-2, 6)]}
    lds = LeRobotDataset("x/y", root=out, delta_timestamps=dt)
    ods = OdsdLeRobotDataset(store, selection=sel, delta_timestamps=dt)
    assert lds.num_frames == ods.num_frames
    valid = np.asarray(lds.hf_dataset.with_format("numpy")["label_valid"])
    for i in range(len(ods)):
        a = ods[i]
        b = lds[int(a["index"])]
        assert_items_equal(a, b, skip=("action_is_pad",))
        # odsd additionally pads exactly the invalid labels inside the window
        ep = ods.meta.episodes[int(a["episode_index"])]
        q = np.clip(int(a["index"]) + np.arange(-2, 6), ep["dataset_from_index"], ep["dataset_to_index"] - 1)
        extra = a["action_is_pad"] & ~b["action_is_pad"]
        assert (a["action_is_pad"] | ~b["action_is_pad"]).all()
        assert extra.tolist() == [(not b["action_is_pad"][j]) and not valid[q[j]] for j in range(len(q))]
    assert valid.sum() == int(np.asarray(lds.hf_dataset.with_format("numpy")["expert_valid"]).sum())


def test_export_is_atomic_and_refuses_existing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = build_store(tmp_path / "s", seed=1)
    out = tmp_path / "ds"
    export_lerobot(store, out, durable=False)
    with pytest.raises(ExportExistsError):
        export_lerobot(store, out, durable=False)
    before = sorted(p.relative_to(out) for p in out.rglob("*"))

    def boom(*a, **k):
        raise RuntimeError("interrupted")

    monkeypatch.setattr(compat, "write_stats", boom)
    with pytest.raises(RuntimeError):
        export_lerobot(store, out, overwrite=True, durable=False)
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before  # old export untouched
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no partial left
    with pytest.raises(RuntimeError):
        export_lerobot(store, tmp_path / "new", durable=False)
    assert not (tmp_path / "new").exists()
    monkeypatch.undo()
    export_lerobot(store, out, overwrite=True, label="behavior", durable=False)
    LeRobotDataset("x/y", root=out)
    assert read_provenance(out)["label"] == "behavior"


def test_cli_export(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", seed=2)
    app = typer.Typer()
    app.command("export-lerobot")(export_lerobot_cmd)
    app.command("noop")(lambda: None)
    out = tmp_path / "ds"
    runner = CliRunner()
    res = runner.invoke(app, ["export-lerobot", str(store.root), str(out), "--success-only", "--no-fsync"])
    assert res.exit_code == 0, res.output
    lds = LeRobotDataset("odsd/s", root=out)
    assert all(lds.meta.episodes["odsd/success"])
    res = runner.invoke(app, ["export-lerobot", str(store.root), str(out)])
    assert isinstance(res.exception, ExportExistsError) and res.exception.exit_code == 2
    res = runner.invoke(
        app, ["export-lerobot", str(store.root), str(out), "--overwrite", "--episodes", "1,3-4", "--no-fsync"]
    )
    assert res.exit_code == 0, res.output
    assert list(LeRobotDataset("odsd/s", root=out).meta.episodes["odsd/episode_id"]) == [1, 3, 4]
