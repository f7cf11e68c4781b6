"""Snapshots: pinned watermarks, the episode index, field reads, range and gather reads."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

import odsd.store.snapshot as snapshot_mod
from odsd.schema import SegmentInfo
from odsd.store import EpisodeStore
from odsd.store.layout import ArrayLayout
from odsd.store.leases import LEASE_DIR, active_leases
from odsd.testing.store import StoreModel, check_episode, check_snapshot, make_episode, make_frames

LENGTHS = [[5], [3, 7], [1], [4, 4, 2], [6]]


@pytest.fixture
def filled(tmp_store: EpisodeStore, features: dict[str, Any]) -> tuple[EpisodeStore, StoreModel]:
    """A store with 5 commits / 8 episodes of varying lengths and the model that describes it."""
    model = StoreModel()
    writer = tmp_store.writer(writer_id="w")
    seed = 0
    for wseq, lengths in enumerate(LENGTHS):
        batch = []
        for n in lengths:
            seed += 1
            batch.append((seed, n))
        res = writer.commit([make_episode(features, n, s) for s, n in batch])
        assert model.commit("w", wseq, batch) == (res.seq, res.episode_ids)
    return tmp_store, model


def _expected_column(features: dict[str, Any], model: StoreModel, name: str, watermark: int) -> np.ndarray:
    parts = [
        make_frames(features, model.episodes[i].length, model.episodes[i].seed)[name]
        for i in model.live(watermark)
    ]
    return np.concatenate(parts)


def test_index(filled: tuple[EpisodeStore, StoreModel]) -> None:
    store, model = filled
    snap = store.snapshot()
    model.check(snap)
    assert snap.watermark == 4 and snap.num_episodes == 8 and snap.num_frames == 32
    np.testing.assert_array_equal(snap.lengths, [5, 3, 7, 1, 4, 4, 2, 6])
    np.testing.assert_array_equal(snap.starts, [0, 5, 8, 15, 16, 20, 24, 26])
    assert snap.frame_range(2) == (8, 15)
    np.testing.assert_array_equal(snap.frame_episode(np.array([0, 4, 5, 15, 31])), [0, 0, 1, 3, 7])
    assert len(snap.segments) == 5
    assert snap.entry(5).offset == 4 and snap.entry(5).segment == snap.entry(4).segment
    with pytest.raises(KeyError, match="episode 99 is not visible at watermark 4"):
        snap.position(99)


def test_pinned_watermark_ignores_later_commits(filled: tuple[EpisodeStore, StoreModel], features) -> None:
    store, model = filled
    snap = store.snapshot()
    res = store.writer().commit([make_episode(features, 9, seed=77)])
    model.commit("other", 0, [(77, 9)])
    assert snap.watermark == 4 and snap.num_episodes == 8
    with pytest.raises(KeyError):
        snap.position(res.episode_ids[0])
    model.check(snap)
    model.check(store.snapshot())
    fresh = snap.refresh()
    assert fresh.watermark == 5
    model.check(fresh)
    check_snapshot(fresh)


@pytest.mark.parametrize("watermark", [-1, 0, 1, 2, 3, 4])
def test_snapshot_at_old_watermark(filled: tuple[EpisodeStore, StoreModel], features, watermark: int) -> None:
    store, model = filled
    reopened = EpisodeStore.open(store.root, durability="process")
    snap = reopened.snapshot(watermark)
    model.check(snap)
    if model.live(watermark):
        for name in features:
            np.testing.assert_array_equal(snap.read(name), _expected_column(features, model, name, watermark))


def test_snapshot_beyond_log_end(filled: tuple[EpisodeStore, StoreModel]) -> None:
    store, _ = filled
    with pytest.raises(Exception, match="beyond the log's end"):
        store.snapshot(5)


def test_reads_match_written_data(filled: tuple[EpisodeStore, StoreModel], features) -> None:
    store, model = filled
    snap = store.snapshot()
    rng = np.random.default_rng(3)
    for name in features:
        full = _expected_column(features, model, name, 4)
        np.testing.assert_array_equal(snap.read(name), full)
        np.testing.assert_array_equal(snap.read(name, 6, 17), full[6:17])
        np.testing.assert_array_equal(snap.read(name, 10, 10), full[10:10])
        idx = rng.integers(0, len(full), size=200)
        got = snap.gather(name, idx)
        assert got.dtype == full.dtype and got.shape == (200, *full.shape[1:])
        np.testing.assert_array_equal(got, full[idx])
        np.testing.assert_array_equal(snap.gather(name, [31, 0, 31]), full[[31, 0, 31]])
    for eid in model.live():
        check_episode(snap, eid)


def test_episode_reads_before_and_after_load(filled: tuple[EpisodeStore, StoreModel], features) -> None:
    store, model = filled
    snap = store.snapshot()
    cold = {eid: snap.episode(eid) for eid in model.live()}
    snap.load()
    for eid in model.live():
        m = model.episodes[eid]
        expected = make_frames(features, m.length, m.seed)
        warm = snap.episode(eid, fields=["action.expert"])
        assert list(warm) == ["action.expert"]
        np.testing.assert_array_equal(warm["action.expert"], expected["action.expert"])
        for name in features:
            np.testing.assert_array_equal(cold[eid][name], expected[name])


def test_read_errors(filled: tuple[EpisodeStore, StoreModel]) -> None:
    store, _ = filled
    snap = store.snapshot()
    with pytest.raises(KeyError, match="unknown field 'nope'"):
        snap.read("nope")
    with pytest.raises(IndexError, match=r"\[0, 32\)"):
        snap.gather("action.expert", [32])
    with pytest.raises(IndexError):
        snap.gather("action.expert", [-1])


def test_empty_store_snapshot(tmp_store: EpisodeStore, features) -> None:
    snap = tmp_store.snapshot()
    assert snap.watermark == -1 and snap.num_episodes == 0 and snap.num_frames == 0
    for name, spec in features.items():
        col = snap.read(name)
        assert col.shape == (0, *spec["shape"]) and col.dtype == np.dtype(spec["dtype"])
        assert snap.gather(name, np.array([], dtype=np.int64)).shape[0] == 0


def test_reads_open_files_per_segment_not_per_frame(
    filled: tuple[EpisodeStore, StoreModel], monkeypatch
) -> None:
    store, _ = filled
    calls: list[tuple[str, str]] = []
    real = snapshot_mod.read_verified

    def counting(layout: ArrayLayout, info: SegmentInfo) -> np.ndarray:
        calls.append((info.path, layout.field))
        return real(layout, info)

    monkeypatch.setattr(snapshot_mod, "read_verified", counting)
    snap = store.snapshot()
    idx = np.random.default_rng(0).integers(0, snap.num_frames, size=5000)
    snap.gather("action.expert", idx)
    assert len(calls) == len(snap.segments) == 5
    assert sorted(set(calls)) == sorted(calls), "each segment field is read once"
    snap.gather("action.expert", idx[::-1])
    snap.read("action.expert", 3, 30)
    assert len(calls) == 5, "warm reads touch no files"
    # refresh() reuses what is loaded and only reads the new segment.
    store.writer().commit([make_episode(snap.features, 4, seed=1000)])
    fresh = snap.refresh()
    assert len(calls) == 6 and calls[-1][0] == fresh.segments[-1]
    fresh.gather("action.expert", np.arange(fresh.num_frames))
    assert len(calls) == 6


def test_uncommitted_files_are_invisible(filled: tuple[EpisodeStore, StoreModel], features) -> None:
    """Leftovers of an interrupted commit (partial segment, orphan segment, partial record) are ignored."""
    store, model = filled
    root = store.root
    # an orphan segment: written and renamed into place, never published
    orphan_writer = EpisodeStore.open(root, durability="process")
    from odsd.store.segments import write_segment

    write_segment(
        root, "segments/w-crashed/000000000000-abcdef", make_frames(features, 4, 1), orphan_writer.features
    )
    (root / "segments" / "w-crashed" / "000000000001-123456.partial").mkdir()
    (root / "_log" / ".00000000000000000005.json.1234abcd.partial").write_bytes(b'{"seq": 5')
    (root / "_log" / ".00000000000000000006.json.deadbeef.partial").write_bytes(b"")
    reopened = EpisodeStore.open(root)
    assert reopened.watermark == 4
    snap = reopened.snapshot()
    model.check(snap)
    check_snapshot(snap)
    res = reopened.writer().commit([make_episode(features, 2, seed=5)])
    assert res.seq == 5


def test_lease_file_lifecycle(filled: tuple[EpisodeStore, StoreModel]) -> None:
    store, _ = filled
    with store.snapshot(2, lease=True) as snap:
        leases = active_leases(store.root)
        assert [(lease.watermark, lease.pid) for lease in leases] == [(2, os.getpid())]
        assert snap.watermark == 2
        fresh = snap.refresh()
        assert sorted(lease.watermark for lease in active_leases(store.root)) == [2, 4]
        fresh.close()
    assert active_leases(store.root) == []
    assert list((store.root / LEASE_DIR).iterdir()) == []
    plain = store.snapshot()
    plain.close()
    assert active_leases(store.root) == []
