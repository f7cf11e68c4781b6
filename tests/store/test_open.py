"""Creating and opening stores: manifest, format version, feature schema, open_or_create."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from odsd.schema import FORMAT_VERSION
from odsd.store import (
    MANIFEST,
    CorruptStoreError,
    EpisodeStore,
    FormatVersionError,
    SchemaMismatchError,
    StoreExistsError,
    StoreNotFoundError,
)
from odsd.testing.store import check_episode, make_episode


def test_manifest_records_version_schema_and_fps(tmp_path: Path, features: dict[str, Any]) -> None:
    store = EpisodeStore.create(tmp_path / "s", features=features, fps=12.5, robot_type="arm")
    body = json.loads((store.root / MANIFEST).read_text())
    assert body["format_version"] == FORMAT_VERSION == 1
    assert body["fps"] == 12.5 and body["robot_type"] == "arm" and len(body["store_id"]) == 32
    assert body["features"]["observation.state"] == {"dtype": "float32", "shape": [4], "names": None}
    assert body["features"]["action.expert_valid"]["dtype"] == "bool"
    reopened = EpisodeStore.open(store.root)
    assert reopened.manifest == store.manifest
    assert reopened.watermark == -1 and reopened.snapshot().num_episodes == 0


def test_open_missing(tmp_path: Path) -> None:
    with pytest.raises(StoreNotFoundError, match="no such store directory"):
        EpisodeStore.open(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreNotFoundError, match=r"not an odsd store \(no odsd.json\)"):
        EpisodeStore.open(tmp_path / "empty")


def test_create_twice_refused(tmp_store: EpisodeStore, features: dict[str, Any]) -> None:
    with pytest.raises(StoreExistsError, match="already exists"):
        EpisodeStore.create(tmp_store.root, features=features, fps=10)


@pytest.mark.parametrize("version", [0, 2, 99, None, "1"])
def test_unknown_format_version(tmp_store: EpisodeStore, version: object) -> None:
    path = tmp_store.root / MANIFEST
    body = json.loads(path.read_text())
    if version is None:
        del body["format_version"]
    else:
        body["format_version"] = version
    path.write_text(json.dumps(body))
    with pytest.raises(FormatVersionError, match=rf"{path}: store format version .* is not supported"):
        EpisodeStore.open(tmp_store.root)
    with pytest.raises(FormatVersionError):
        EpisodeStore.open_or_create(tmp_store.root, features=tmp_store.features, fps=10)


def test_damaged_manifest(tmp_store: EpisodeStore) -> None:
    path = tmp_store.root / MANIFEST
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(CorruptStoreError, match=rf"{path}: damaged store manifest"):
        EpisodeStore.open(tmp_store.root)
    path.write_text(json.dumps({"format_version": FORMAT_VERSION, "store_id": "x"}))
    with pytest.raises(CorruptStoreError, match=rf"{path}: invalid manifest"):
        EpisodeStore.open(tmp_store.root)


def test_open_or_create_creates_then_opens(tmp_path: Path, features: dict[str, Any]) -> None:
    path = tmp_path / "new" / "store"
    first = EpisodeStore.open_or_create(path, features=features, fps=10, durability="process")
    res = first.writer().commit([make_episode(features, 3, seed=1)])
    second = EpisodeStore.open_or_create(path, features=features, fps=10)
    assert second.manifest.store_id == first.manifest.store_id
    check_episode(second.snapshot(), res.episode_ids[0])


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda f: f.pop("episode_step"), r"store has \['episode_step'\] not requested"),
        (
            lambda f: f.update({"extra.field": {"dtype": "float32"}}),
            r"requested \['extra.field'\] not in store",
        ),
        (lambda f: f["observation.state"].update(shape=[5]), r"feature 'observation.state' is .*shape.*5"),
        (
            lambda f: f["observation.state"].update(dtype="float64"),
            r"feature 'observation.state' is .*float64",
        ),
        (lambda f: f["action.expert"].update(names=["x", "y"]), r"feature 'action.expert'"),
    ],
    ids=["field-missing", "field-extra", "shape", "dtype", "names"],
)
def test_open_or_create_schema_mismatch(
    tmp_store: EpisodeStore, features: dict[str, Any], mutate, message
) -> None:
    wanted = json.loads(json.dumps(features))
    mutate(wanted)
    with pytest.raises(SchemaMismatchError, match=message):
        EpisodeStore.open_or_create(tmp_store.root, features=wanted, fps=10)


def test_open_or_create_fps_mismatch(tmp_store: EpisodeStore, features: dict[str, Any]) -> None:
    with pytest.raises(SchemaMismatchError, match=r"fps 30.* differs from the store's 10"):
        EpisodeStore.open_or_create(tmp_store.root, features=features, fps=30)


@pytest.mark.parametrize(
    "spec",
    [{"dtype": "complex64"}, {"dtype": "nonsense"}, {"dtype": "float32", "shape": [0]}, {"dtype": "U8"}],
    ids=["complex", "unknown", "zero-dim", "string"],
)
def test_create_rejects_invalid_schema(tmp_path: Path, spec: dict[str, Any]) -> None:
    with pytest.raises(SchemaMismatchError, match="invalid store schema"):
        EpisodeStore.create(tmp_path / "s", features={"f": spec}, fps=10)
    assert not (tmp_path / "s" / MANIFEST).exists()
