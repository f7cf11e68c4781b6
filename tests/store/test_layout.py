"""Segment layout checks: a chunk zarr never wrote (all fill values) is not damage; a deleted one is."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from odsd.schema import EpisodeMeta
from odsd.store import CorruptStoreError, Episode, EpisodeStore, fsck
from odsd.store.layout import check_segment
from odsd.store.log import LOG_DIR, record_name
from odsd.testing.damage import rewrite_record
from odsd.testing.store import TINY_FEATURES, make_frames


def _store_with_zero_field(root: Path, zero: bool) -> tuple[EpisodeStore, Path]:
    store = EpisodeStore.create(root, features=TINY_FEATURES, fps=10, durability="process")
    frames = make_frames(TINY_FEATURES, 8, seed=1)
    frames["episode_step"] = np.zeros(8, np.int64) if zero else np.arange(8, dtype=np.int64)
    store.writer(writer_id="w").commit([Episode(frames=frames, meta=EpisodeMeta(length=8))])
    body = json.loads((root / LOG_DIR / record_name(0)).read_bytes())
    chunk = root / body["adds"][0]["segment"]["path"] / "episode_step" / "c.0"
    return store, chunk


@pytest.mark.parametrize("zero", [True, False], ids=["all-fill", "data"])
def test_chunk_never_written_versus_deleted(tmp_path: Path, zero: bool) -> None:
    """Like a shard of an older odsd (zarr skipped all-fill chunks, the record's byte count too)."""
    store, chunk = _store_with_zero_field(tmp_path / "s", zero)
    size = chunk.stat().st_size
    chunk.unlink()

    def uncount(body: dict) -> None:
        body["adds"][0]["segment"]["nbytes"] -= size

    rewrite_record(store.root, 0, uncount)
    reopened = EpisodeStore.open(store.root)
    info = reopened.refresh().segments[reopened.snapshot().segments[0]]
    layouts, problems = check_segment(reopened.root, info, reopened.features)
    assert problems == [] and layouts["episode_step"].missing == {str(chunk)}
    snap = reopened.snapshot()
    if zero:
        np.testing.assert_array_equal(snap.read("episode_step"), np.zeros(8, np.int64))
        assert fsck(reopened).ok
    else:
        with pytest.raises(CorruptStoreError, match=f"{chunk}: chunk file is missing and its fill values"):
            snap.read("episode_step")
        assert [f.message for f in fsck(reopened).errors] == [
            f"{chunk}: chunk file is missing; its fill values are not the committed data"
        ]


def test_chunked_segments_have_every_chunk(tmp_path: Path) -> None:
    """Multi-chunk arrays (shards) are written with every chunk, all-fill ones included."""
    from odsd.store.segments import write_segment
    from odsd.testing.store import as_specs

    features = as_specs(TINY_FEATURES)
    frames = make_frames(TINY_FEATURES, 10, seed=2)
    frames["episode_step"] = np.zeros(10, np.int64)
    info = write_segment(tmp_path, "shards/x", frames, features, chunk_frames=4, durable=False)
    layouts, problems = check_segment(tmp_path, info, features)
    assert problems == []
    assert all(not lay.missing and len(lay.chunks) == 3 for lay in layouts.values())
