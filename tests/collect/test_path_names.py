"""Names a user supplies that become paths (run ids, writer ids) cannot leave the store."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from odsd.collect.config import load_config
from odsd.errors import ConfigError
from odsd.schema import SegmentInfo
from odsd.schema.names import check_data_path, name_problem
from odsd.store import EpisodeStore
from odsd.testing.damage import assert_refused, run_odsd
from odsd.testing.store import TINY_FEATURES

BAD_NAMES = [
    "../../escaped",
    "a/b",
    "..",
    ".",
    "",
    ".hidden",
    "-flag",
    "x.partial",
    "a\x00b",
    "é" * 3,
    "x" * 129,
]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_names(name: str) -> None:
    assert name_problem(name)


@pytest.mark.parametrize("name", ["r1", "20240101-120000-ab12cd", "run_2.b", "w-0123456789ab"])
def test_good_names(name: str) -> None:
    assert name_problem(name) is None


@pytest.mark.parametrize(
    "path", ["segments/../../x/000-1", "/abs/segments/w/1", "segments//1", "segments/w/..", "shards/."]
)
def test_record_paths_must_stay_inside(path: str) -> None:
    with pytest.raises(ValueError):
        check_data_path(path)
    with pytest.raises(ValidationError):
        SegmentInfo(path=path, n_frames=1, nbytes=1, checksums={})


@pytest.mark.parametrize("name", ["../../escaped", "a/b", ""])
def test_config_rejects_run_ids_that_are_not_names(name: str) -> None:
    with pytest.raises(ConfigError, match="run_id"):
        load_config(overrides={"run_id": name})
    with pytest.raises(ConfigError, match="run_id"):
        load_config(sets=[f"run_id={name}"])


def test_writer_rejects_writer_ids_that_are_not_names(tmp_path: Path) -> None:
    store = EpisodeStore.create(tmp_path / "s", features=TINY_FEATURES, fps=10, durability="process")
    with pytest.raises(ConfigError, match="writer id"):
        store.writer(writer_id="../../escaped")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]


def test_collect_with_escaping_run_id_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "deep" / "store"
    proc = run_odsd(
        "collect", "--mode", "expert_demo", "--task", "reach", "--num-envs", "2", "--max-episodes", "1",
        "--durability", "process", "--store", store, "--run-id", "../../escaped",
    )  # fmt: skip
    assert_refused(proc, 2, "run_id")
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == [], "nothing written anywhere"


def test_resume_with_escaping_run_is_refused(tmp_path: Path) -> None:
    store = EpisodeStore.create(tmp_path / "s", features=TINY_FEATURES, fps=10, durability="process")
    (store.root / "runs" / "r1").mkdir(parents=True)
    (tmp_path / "x").mkdir()  # what runs/../../x names
    proc = run_odsd("resume", store.root, "--run", "../../x")
    assert_refused(proc, 2, "run id '../../x'")
