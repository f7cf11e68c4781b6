"""A reader opened while a collector is committing sees only committed episodes and grows on refresh()."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from odsd.lerobot import OdsdLeRobotDataset
from odsd.store import EpisodeStore

COLLECT = """
import sys
from odsd.collect import CollectConfig, Collector
Collector(CollectConfig(mode="dagger_sync", task="reach", num_envs=4, store=sys.argv[1],
    episodes_per_iteration=4, max_iterations=5, commit_max_episodes=2, durability="process")).run()
"""


def check_against_snapshot(ds: OdsdLeRobotDataset) -> None:
    snap = ds.snapshot
    assert ds.meta.episodes["odsd/episode_id"] == snap.episode_ids.tolist()
    assert ds.num_frames == snap.num_frames
    batch = ds.get_batch(np.arange(len(ds)))
    np.testing.assert_array_equal(
        batch["observation.state"].numpy(), snap.read("observation.state")[ds.anchors]
    )
    np.testing.assert_array_equal(batch["action"][:, 0].numpy(), snap.read("action.expert")[ds.anchors])
    lengths = np.diff(np.r_[ds.meta.episodes["dataset_from_index"], ds.num_frames])
    assert lengths.tolist() == [e.meta.length for e in snap.entries]


def test_reader_during_collection(tmp_path: Path) -> None:
    path = tmp_path / "live"
    proc = subprocess.Popen([sys.executable, "-c", COLLECT, str(path)], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if (path / "odsd.json").exists() and EpisodeStore.open(path).watermark >= 0:
                break
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            time.sleep(0.05)
        ds = OdsdLeRobotDataset(path, delta_timestamps={"action": [i / 20 for i in range(4)]})
        first_wm, first_frames = ds.watermark, ds.num_frames
        check_against_snapshot(ds)
        seen = [first_wm]
        while proc.poll() is None:
            ds.refresh()
            check_against_snapshot(ds)
            seen.append(ds.watermark)
            time.sleep(0.1)
        assert proc.returncode == 0, proc.stderr.read().decode() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    final_wm = EpisodeStore.open(path).watermark
    assert first_wm < final_wm, "the reader should have been opened before collection ended"
    assert ds.refresh() >= 0
    assert ds.watermark == final_wm and ds.num_frames > first_frames
    assert seen == sorted(seen)
    check_against_snapshot(ds)
    fresh = OdsdLeRobotDataset(path, delta_timestamps={"action": [i / 20 for i in range(4)]})
    a, b = ds.get_batch(np.arange(len(ds))), fresh.get_batch(np.arange(len(fresh)))
    assert all(np.array_equal(a[k], b[k]) for k in a if k != "task")
