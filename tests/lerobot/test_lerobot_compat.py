"""odsd.lerobot.compat and what it guarantees on both LeRobot lines (0.4.4 and 0.5/0.6)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from lerobot_helpers import build_store

from odsd.lerobot import OdsdLeRobotDataset, compat, export_lerobot
from odsd.lerobot.export import OLD_MARK, PARTIAL_MARK, read_provenance
from odsd.store import EpisodeStore

pytest.importorskip("lerobot.datasets.lerobot_dataset")
pytestmark = pytest.mark.lerobot

from lerobot.datasets.lerobot_dataset import LeRobotDataset  # noqa: E402


def hidden_entries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


def test_version_names_the_installed_line() -> None:
    installed = compat.version()
    assert installed is not None
    major, minor = (int(x) for x in installed.split(".")[:2])
    assert (major, minor) >= (0, 4)
    assert compat.typed_info() == ((major, minor) >= (0, 5))


def test_export_loads_without_any_warning(small_store: EpisodeStore, tmp_path: Path, caplog) -> None:
    out = tmp_path / "ds"
    export_lerobot(small_store, out, repo_id="odsd/small", durable=False)
    caplog.set_level(logging.WARNING)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lds = LeRobotDataset("odsd/small", root=out)
        info = compat.info_dict(lds.meta.info)
    # LeRobot's own word about a machine without FFmpeg (its video decoder) is not about the export
    records = [r for r in caplog.records if "torchcodec" not in r.getMessage()]
    messages = [r.getMessage() for r in records] + [str(w.message) for w in caught]
    assert not [m for m in messages if "Unknown fields" in m or "DatasetInfo" in m], messages
    assert not [r for r in records if r.name.startswith("lerobot")], messages
    assert "odsd" not in info and info["total_episodes"] == small_store.snapshot().num_episodes
    # provenance survives where both lines keep it: meta/odsd.json and the per-episode columns
    ods = OdsdLeRobotDataset(small_store.root)
    assert read_provenance(out) == ods.meta.provenance
    assert list(lds.meta.episodes["odsd/episode_id"]) == ods.meta.episodes["odsd/episode_id"]


def test_reader_info_reads_like_both_lines(small_store: EpisodeStore) -> None:
    meta = OdsdLeRobotDataset(small_store.root).meta
    assert meta.info["fps"] == meta.info.fps == meta.fps
    assert meta.info.features is meta.features
    assert "odsd" not in meta.info and meta.provenance["store_id"] == small_store.manifest.store_id
    with pytest.raises(AttributeError):
        _ = meta.info.no_such_field


def test_write_info_refuses_fields_the_typed_line_would_drop(tmp_path: Path) -> None:
    if not compat.typed_info():
        pytest.skip("LeRobot 0.4.4 keeps unknown info.json fields; nothing is dropped")
    with pytest.raises(ValueError, match="would drop"):
        compat.write_info({"codebase_version": "v3.0", "fps": 10, "features": {}, "odsd": {}}, tmp_path)


def test_one_dimensional_action_exports_and_loads(tmp_path: Path) -> None:
    store = build_store(tmp_path / "s", seed=3, action_dim=1)
    out = tmp_path / "ds"
    export_lerobot(store, out, repo_id="odsd/one", durable=False)
    lds = LeRobotDataset("odsd/one", root=out)
    hf = lds.hf_dataset.with_format("numpy")
    served = OdsdLeRobotDataset(store.root).view.columns["action"]
    assert served.shape[1:] == (1,)
    np.testing.assert_array_equal(np.asarray(hf["action"]), served[:, 0])
    assert tuple(lds.meta.features["action"]["shape"]) == (1,)


STUCK_EXPORT = """
import sys, time
from odsd.lerobot import compat, export_lerobot
compat.write_stats = lambda *a, **k: time.sleep(600)  # stop inside the export, temporaries on disk
export_lerobot(sys.argv[1], sys.argv[2], overwrite=True, durable=False)
"""


def test_a_later_export_removes_what_killed_exports_left(small_store: EpisodeStore, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    export_lerobot(small_store, out, durable=False)
    for _ in range(2):
        proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(STUCK_EXPORT), str(small_store.root), str(out)],
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
        deadline = time.monotonic() + 120
        while not [n for n in hidden_entries(tmp_path) if n.endswith(PARTIAL_MARK) and str(proc.pid) in n]:
            assert proc.poll() is None and time.monotonic() < deadline, "the export never started"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        # each export starts by removing what the one killed before it left
        assert [n.split(".")[2] for n in hidden_entries(tmp_path)] == [str(proc.pid)]
    # a temporary of an export that is still running (here: this process) is left alone
    live = tmp_path / f".ds.{os.getpid()}.0123abcd{PARTIAL_MARK}"
    live.mkdir()
    # an aside copy of a dataset is kept while OUT does not exist
    other_out = tmp_path / "gone"
    aside = tmp_path / f".gone.999999999.0123abcd{OLD_MARK}"
    aside.mkdir()
    export_lerobot(small_store, out, overwrite=True, durable=False)
    assert hidden_entries(tmp_path) == sorted([live.name, aside.name])
    export_lerobot(small_store, other_out, durable=False)
    assert hidden_entries(tmp_path) == sorted([live.name, aside.name])
    LeRobotDataset("x/y", root=out)
