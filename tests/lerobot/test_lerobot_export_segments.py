"""export-lerobot --segment / --failed-segments: each matching segment clip is one LeRobot episode."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import typer
from lerobot_helpers import FEATURES, make_episode
from typer.testing import CliRunner

from odsd.cli.export import export_lerobot_cmd
from odsd.errors import ConfigError
from odsd.lerobot import OdsdLeRobotDataset, Selection, export_lerobot
from odsd.lerobot.export import read_provenance
from odsd.store import Episode, EpisodeStore, Snapshot

pytest.importorskip("lerobot.datasets.lerobot_dataset")
pytestmark = pytest.mark.lerobot

import pyarrow.parquet as pq  # noqa: E402
from lerobot.datasets.lerobot_dataset import LeRobotDataset  # noqa: E402


@dataclass(frozen=True)
class Expected:
    episode_id: int
    name: str
    start: int
    end: int
    success: bool | None


def expected_clips(snap: Snapshot, names: set[str] | None, failed: bool) -> list[Expected]:
    """The clip rule written out plainly over the store's segment tables."""
    out = []
    for e in snap.entries:
        if not e.meta.segments and failed and names is None and not e.meta.success:
            out.append(Expected(e.episode_id, "", 0, e.meta.length, False))
        for r in e.meta.segments:
            if (names is None or r.name in names) and (not failed or r.success is False):
                out.append(Expected(e.episode_id, r.name, r.start, r.end, r.success))
    return out


def source_frames(snap: Snapshot, clips: list[Expected]) -> np.ndarray:
    """Global store frame positions of the clips' frames, clip after clip."""
    return np.concatenate(
        [snap.frame_range(c.episode_id)[0] + np.arange(c.start, c.end, dtype=np.int64) for c in clips]
    )


def column(lds: LeRobotDataset, name: str) -> np.ndarray:
    values = lds.hf_dataset.with_format("numpy")[name]
    return np.stack(values) if isinstance(values, list) else np.asarray(values)


def assert_stats_of(stats: dict, values: np.ndarray, key: str) -> None:
    x = values.reshape(len(values), -1).astype(np.float64)
    np.testing.assert_allclose(stats["min"], x.min(0), err_msg=key)
    np.testing.assert_allclose(stats["max"], x.max(0), err_msg=key)
    np.testing.assert_allclose(stats["mean"], x.mean(0), rtol=1e-6, atol=1e-9, err_msg=key)
    np.testing.assert_allclose(stats["std"], x.std(0), rtol=1e-6, atol=1e-9, err_msg=key)
    np.testing.assert_allclose(stats["q50"], np.quantile(x, 0.5, axis=0), rtol=1e-6, err_msg=key)
    assert np.asarray(stats["count"]).tolist() == [len(x)], key


def assert_clips_exported(lds: LeRobotDataset, snap: Snapshot, clips: list[Expected]) -> None:
    """Episodes = clips, frames = the store's frames at the clips' offsets, renumbered per clip."""
    eps = lds.meta.episodes
    lengths = [c.end - c.start for c in clips]
    assert lds.meta.total_episodes == len(clips) and lds.num_frames == sum(lengths)
    assert list(eps["odsd/episode_id"]) == [c.episode_id for c in clips]
    assert list(eps["odsd/segment_name"]) == [c.name for c in clips]
    assert list(eps["odsd/segment_start"]) == [c.start for c in clips]
    assert list(eps["odsd/segment_success"]) == [-1 if c.success is None else int(c.success) for c in clips]
    assert list(eps["length"]) == lengths
    assert list(eps["odsd/segments"]) == [
        [f"{c.name}:0:{c.end - c.start}:{'' if c.success is None else int(c.success)}"] if c.name else []
        for c in clips
    ]
    src = source_frames(snap, clips)
    np.testing.assert_array_equal(column(lds, "observation.state"), snap.gather("observation.state", src))
    np.testing.assert_array_equal(column(lds, "segment_id"), snap.gather("segment_id", src))
    valid = snap.gather("action.expert_valid", src)
    np.testing.assert_array_equal(column(lds, "label_valid"), valid)
    np.testing.assert_array_equal(column(lds, "action")[valid], snap.gather("action.expert", src)[valid])
    assert (column(lds, "action")[~valid] == 0).all()
    starts = np.repeat(np.asarray(eps["dataset_from_index"]), lengths)
    frame_index = np.arange(len(src)) - starts
    np.testing.assert_array_equal(column(lds, "frame_index"), frame_index)
    np.testing.assert_array_equal(column(lds, "episode_index"), np.repeat(np.arange(len(clips)), lengths))
    np.testing.assert_array_equal(column(lds, "index"), np.arange(len(src)))
    np.testing.assert_allclose(column(lds, "timestamp"), frame_index / lds.meta.fps, rtol=1e-6)


def test_segment_export_matches_store(collected_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "clips"
    names = {"grasp", "place"}
    result = export_lerobot(
        collected_store, out, repo_id="odsd/clips", selection=Selection(segments=tuple(names)), durable=False
    )
    snap = EpisodeStore.open(collected_store).snapshot()
    clips = expected_clips(snap, names, failed=False)
    sources = len({c.episode_id for c in clips})
    assert sources > 1 and len(clips) > sources  # several clips per episode
    lds = LeRobotDataset("odsd/clips", root=out)
    assert_clips_exported(lds, snap, clips)
    assert (result.unit, result.episodes, result.source_episodes) == ("segments", len(clips), sources)

    # every exported frame belongs to a requested segment, and every such store frame is exported
    seg = snap.read("segment_id")
    ids_of = {r.name: set() for e in snap.entries for r in e.meta.segments}
    for e in snap.entries:
        lo = snap.frame_range(e.episode_id)[0]
        for r in e.meta.segments:
            ids_of[r.name] |= set(seg[lo + r.start : lo + r.end].tolist())
    assert all(len(v) == 1 for v in ids_of.values())  # one segment id per name
    wanted = {i for n in names for i in ids_of[n]}
    exported = column(lds, "segment_id")
    assert set(exported.tolist()) == wanted
    assert len(exported) == int(np.isin(seg, list(wanted)).sum())

    # task_index unchanged: the reader's value for the source episode
    reader = OdsdLeRobotDataset(collected_store)
    tasks = reader.view.columns["task_index"][reader.view.from_index]
    pos = [snap.position(c.episode_id) for c in clips]
    first_frames = np.asarray(lds.meta.episodes["dataset_from_index"])
    np.testing.assert_array_equal(column(lds, "task_index")[first_frames], tasks[pos])

    # dataset statistics: numpy over the exported frames only; per-episode stats over each clip
    for key in ("observation.state", "action", "next.reward", "frame_index", "segment_id"):
        assert_stats_of(lds.meta.stats[key], column(lds, key), key)
    ep_table = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pydict()
    state = column(lds, "observation.state")
    for i, (a, b) in enumerate(
        zip(ep_table["dataset_from_index"], ep_table["dataset_to_index"], strict=True)
    ):
        np.testing.assert_allclose(ep_table["stats/observation.state/mean"][i], state[a:b].mean(0), rtol=1e-5)
        assert ep_table["stats/frame_index/max"][i] == [b - a - 1]

    # provenance, totals and a stats version of its own
    info = json.loads((out / "meta/info.json").read_text())
    assert (info["total_episodes"], info["total_frames"]) == (len(clips), lds.num_frames)
    assert info["splits"] == {"train": f"0:{len(clips)}"}
    assert "odsd" not in info  # LeRobot 0.6's DatasetInfo would warn about and drop it
    provenance = read_provenance(out)
    unit = provenance["export_unit"]
    assert unit == {
        "unit": "segments",
        "segments": sorted(names),
        "failure_focused": False,
        "clips": len(clips),
        "source_episodes": sources,
    }
    assert provenance["stats_version"] == result.stats_version != provenance["reader_stats_version"]

    # windows are clamped at clip boundaries: the frame before a clip's start is padding
    lds = LeRobotDataset("odsd/clips", root=out, delta_timestamps={"action": [-1 / 20, 0.0, 1 / 20]})
    first = lds[int(lds.meta.episodes["dataset_from_index"][1])]
    assert first["action_is_pad"].tolist() == [True, False, False] and int(first["frame_index"]) == 0


def failure_store(path: Path) -> EpisodeStore:
    """Six episodes with segment tables (odd ones fail in their last segment), one failed and one
    successful episode without a segment table, invalid labels throughout."""
    rng = np.random.default_rng(7)
    store = EpisodeStore.create(path, features=FEATURES, fps=10, durability="process")
    eps = [
        make_episode(n, rng, iteration=i // 3, success=i % 2 == 0, invalid_rate=0.3)
        for i, n in enumerate([12, 7, 20, 5, 15, 9])
    ]
    for success in (False, True):
        ep = make_episode(11, rng, iteration=2, success=success, invalid_rate=0.3)
        eps.append(Episode(frames=ep.frames, meta=ep.meta.model_copy(update={"segments": []})))
    store.writer(run_id="t").commit(eps)
    return store


def test_failed_segment_export(tmp_path: Path) -> None:
    store = failure_store(tmp_path / "s")
    out = tmp_path / "failed"
    result = export_lerobot(store, out, selection=Selection(failure_focused=True), durable=False)
    snap = store.snapshot()
    clips = expected_clips(snap, None, failed=True)
    assert len(clips) == 4 and clips[-1] == Expected(6, "", 0, 11, False)  # 3 failed segments + 1 whole
    lds = LeRobotDataset("x/y", root=out)
    assert_clips_exported(lds, snap, clips)
    assert set(lds.meta.episodes["odsd/segment_success"]) == {0}
    assert not any(lds.meta.episodes["odsd/success"])
    valid = column(lds, "label_valid")
    assert result.invalid_labels == int((~valid).sum()) > 0
    # the label's statistics cover valid labels only (the reader's rule)
    assert_stats_of(lds.meta.stats["action"], column(lds, "action")[valid], "action")
    assert_stats_of(lds.meta.stats["observation.state"], column(lds, "observation.state"), "state")

    # failed segments of one name only; the no-table episode has no name, so it is not a clip
    last = {e.meta.segments[-1].name for e in snap.entries if e.meta.segments and not e.meta.success}
    name = sorted(last)[0]
    export_lerobot(
        store,
        out,
        selection=Selection(segments=(name,), failure_focused=True),
        overwrite=True,
        durable=False,
    )
    clips = expected_clips(snap, {name}, failed=True)
    assert clips and all(c.name == name for c in clips)
    assert_clips_exported(LeRobotDataset("x/y", root=out), snap, clips)


def test_segment_export_errors(tmp_path: Path) -> None:
    store = failure_store(tmp_path / "s")
    with pytest.raises(
        ConfigError, match=r"segment named nope, zzz \(segments present: reach, grasp, lift\)"
    ):
        export_lerobot(store, tmp_path / "a", selection=Selection(segments=("grasp", "nope", "zzz")))
    # "reach" exists but never fails (it is never the last of three segments)
    with pytest.raises(ConfigError, match="nothing to export: no failed segment named reach"):
        export_lerobot(store, tmp_path / "b", selection=Selection(segments=("reach",), failure_focused=True))
    # the name exists only in episodes the selection leaves out
    with pytest.raises(ConfigError, match="segments present: none"):
        export_lerobot(store, tmp_path / "c", selection=Selection(episodes=(6, 7), segments=("grasp",)))
    with pytest.raises(ConfigError, match="window modes choose training anchors and apply to readers only"):
        export_lerobot(store, tmp_path / "d", selection=Selection(window_mode="segment"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]  # nothing written, no partial left


def test_cli_export_segments(tmp_path: Path) -> None:
    store = failure_store(tmp_path / "s")
    snap = store.snapshot()
    app = typer.Typer()
    app.command("export-lerobot")(export_lerobot_cmd)
    app.command("noop")(lambda: None)
    runner = CliRunner()
    out = tmp_path / "ds"
    args = ["export-lerobot", str(store.root), str(out), "--no-fsync", "--overwrite"]

    res = runner.invoke(app, [*args, "--segment", "grasp", "--segment", "reach", "--iterations", "1"])
    assert res.exit_code == 0, res.output
    clips = [
        c for c in expected_clips(snap, {"grasp", "reach"}, False) if snap.meta(c.episode_id).iteration == 1
    ]
    assert len(clips) == 6
    assert "exported 6 segments (clips) from 3 episodes" in " ".join(res.output.split())
    assert_clips_exported(LeRobotDataset("odsd/s", root=out), snap, clips)

    res = runner.invoke(app, [*args, "--failed-segments"])
    assert res.exit_code == 0, res.output
    assert "exported 4 segments (clips) from 4 episodes" in " ".join(res.output.split())
    assert_clips_exported(LeRobotDataset("odsd/s", root=out), snap, expected_clips(snap, None, True))

    res = runner.invoke(app, [*args, "--segment", "nope"])
    assert isinstance(res.exception, ConfigError) and res.exception.exit_code == 2
    assert "nope (segments present: reach, grasp, lift)" in str(res.exception)
    res = runner.invoke(app, [*args, "--segment", "reach", "--failed-segments"])
    assert isinstance(res.exception, ConfigError) and "nothing to export" in str(res.exception)
    assert LeRobotDataset("odsd/s", root=out).meta.total_episodes == 4  # the previous export is kept

    res = runner.invoke(app, [*args])  # no segment flags: whole episodes, as before
    assert res.exit_code == 0 and "exported 8 episodes" in " ".join(res.output.split()), res.output
    assert "segment_name" not in " ".join(LeRobotDataset("odsd/s", root=out).meta.episodes.column_names)
