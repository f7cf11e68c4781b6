"""Damage to a camera field's shard files is detected: fsck and inspect exit 4 naming the file, readers refuse."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from odsd.store import CorruptStoreError, EpisodeStore
from odsd.store.frame_reads import clear_cache, read_frames
from odsd.testing.damage import (
    DAMAGED_COMMIT,
    IMAGE_DAMAGES,
    IMAGE_FIELD,
    Damage,
    assert_refused,
    build_image_store,
    run_odsd,
)
from odsd.testing.store import check_snapshot


@pytest.fixture(params=sorted(IMAGE_DAMAGES))
def damaged(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, Damage]:
    store = build_image_store(tmp_path / "store")
    check_snapshot(store.snapshot())  # undamaged, the store reads back exactly
    return store.root, IMAGE_DAMAGES[request.param](store.root)


def test_fsck_names_the_file(damaged: tuple[Path, Damage]) -> None:
    root, damage = damaged
    proc = run_odsd("store", "fsck", root, "--json")
    assert proc.returncode == 4, f"{damage.kind}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    errors = [f for f in json.loads(proc.stdout)["findings"] if f["severity"] == "error"]
    assert any(str(damage.path) in f["path"] + f["message"] for f in errors), (damage, errors)


def test_inspect(damaged: tuple[Path, Damage]) -> None:
    root, damage = damaged
    proc = run_odsd("store", "inspect", root, "--json")
    if damage.inspect_detects:
        assert_refused(proc, 4, damage.path)
    else:
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr


def test_snapshot_refuses_naming_the_file(damaged: tuple[Path, Damage]) -> None:
    root, damage = damaged
    with pytest.raises(CorruptStoreError) as exc:
        EpisodeStore.open(root).snapshot().load()
    assert str(damage.path) in str(exc.value) and "\n" not in str(exc.value), exc.value


def test_read_frames_refuses(damaged: tuple[Path, Damage]) -> None:
    """Frame reads check each frame's crc32c and the index: all damage but a reordering is caught."""
    root, damage = damaged
    store = EpisodeStore.open(root)
    state = store.refresh()
    record = store.log.read(DAMAGED_COMMIT)
    info = state.segments[record.adds[0].segment.path]
    clear_cache()
    frames = np.arange(info.n_frames)
    if damage.kind == "swapped_frames":  # every frame is intact: only the whole-field checksum tells
        got = read_frames(root, info, IMAGE_FIELD, store.features[IMAGE_FIELD], frames)
        assert got.shape == (info.n_frames, 6, 8, 3)
        return
    with pytest.raises(CorruptStoreError) as exc:
        read_frames(root, info, IMAGE_FIELD, store.features[IMAGE_FIELD], frames)
    assert str(damage.path) in str(exc.value), exc.value
