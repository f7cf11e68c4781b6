"""Compaction: small segments merged into shards by one add + remove commit, online."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import odsd.store.compaction as compaction_mod
from odsd.store import (
    CommitConflictError,
    EpisodeStore,
    RetentionPolicy,
    VacuumedDataError,
    apply_retention,
    compact,
    vacuum,
)
from odsd.testing.store import StoreModel, check_snapshot, make_episode


def _fill(
    store: EpisodeStore, features: dict[str, Any], model: StoreModel, n: int, start_seed: int = 0
) -> None:
    writer = store.writer(writer_id=f"w{start_seed}")
    for i in range(n):
        seeds = [(start_seed + 10 * i + k, 3 + (i + k) % 4) for k in range(1 + i % 2)]
        res = writer.commit([make_episode(features, length, seed) for seed, length in seeds])
        assert model.commit(writer.writer_id, i, seeds) == (res.seq, res.episode_ids)


def test_compaction_merges_into_one_shard(tmp_store: EpisodeStore, features) -> None:
    model = StoreModel()
    _fill(tmp_store, features, model, 6)
    before = tmp_store.snapshot().load()
    result = compact(tmp_store, small_frames=1000)
    model.compacted(len(result.seqs))
    assert result.merged_segments == 6 and result.episodes == 9 and len(result.shards) == 1
    assert result.seqs == [6] and tmp_store.watermark == 6
    (shard,) = result.shards
    assert shard.startswith("shards/") and (tmp_store.root / shard).is_dir()
    record = tmp_store.log.read(6)
    assert record.kind == "compact"
    assert [r.episode_ids for r in record.removes] == [list(range(9))]
    assert record.removes[0].reason == "compaction"
    assert [a.segment.path for a in record.adds] == [shard]
    after = tmp_store.snapshot()
    model.check(after)
    assert after.segments == [shard]
    assert [after.entry(i).commit_seq for i in range(9)] == [before.entry(i).commit_seq for i in range(9)]
    assert [after.entry(i).meta for i in range(9)] == [before.entry(i).meta for i in range(9)]
    for name in features:
        np.testing.assert_array_equal(after.read(name), before.read(name))
    check_snapshot(after)
    # Nothing left to do: no commit.
    again = compact(tmp_store, small_frames=1000)
    assert again.shards == [] and again.seqs == [] and tmp_store.watermark == 6


def test_compaction_respects_shard_size(tmp_store: EpisodeStore, features) -> None:
    model = StoreModel()
    _fill(tmp_store, features, model, 8)
    total = model.num_frames
    result = compact(tmp_store, small_frames=1000, shard_frames=20)
    model.compacted(len(result.seqs))
    # a trailing group of one segment is not worth a rewrite and is left as it is
    assert len(result.shards) >= 2 and result.merged_segments in (7, 8)
    snap = tmp_store.snapshot()
    model.check(snap)
    sizes = [snap._segment_frames[i] for i in range(len(snap.segments))]
    assert sum(sizes) == total and all(s <= 20 for s in sizes)
    check_snapshot(snap)
    limited = compact(tmp_store, small_frames=1000, shard_frames=10_000, max_shards=1)
    assert len(limited.shards) == 1


def test_large_segments_are_left_alone(tmp_store: EpisodeStore, features) -> None:
    writer = tmp_store.writer()
    writer.commit([make_episode(features, 50, seed=1)])
    writer.commit([make_episode(features, 2, seed=2)])
    writer.commit([make_episode(features, 2, seed=3)])
    result = compact(tmp_store, small_frames=10)
    assert result.merged_segments == 2 and result.episodes == 2
    snap = tmp_store.snapshot()
    assert snap.entry(0).segment.startswith("segments/") and snap.entry(1).segment == result.shards[0]
    check_snapshot(snap)


def test_compaction_drops_dead_frames(tmp_store: EpisodeStore, features) -> None:
    """A segment half removed by retention is rewritten with only its live episodes."""
    writer = tmp_store.writer()
    writer.commit([make_episode(features, 5, seed=s) for s in (1, 2, 3)])
    writer.commit([make_episode(features, 5, seed=4)])
    assert apply_retention(tmp_store, RetentionPolicy(max_episodes=3)) == [0]
    result = compact(tmp_store, small_frames=1000)
    snap = tmp_store.snapshot()
    assert list(snap.episode_ids) == [1, 2, 3] and snap.segments == result.shards
    state = tmp_store.refresh()
    assert state.segments[result.shards[0]].n_frames == 15
    check_snapshot(snap)


def test_old_snapshot_readable_after_compaction_until_vacuum(tmp_store: EpisodeStore, features) -> None:
    model = StoreModel()
    _fill(tmp_store, features, model, 4)
    old = tmp_store.snapshot()
    old_leased = tmp_store.snapshot(lease=True)
    compact(tmp_store, small_frames=1000)
    # Readers on the old watermark read the old segments, which still exist.
    check_snapshot(EpisodeStore.open(tmp_store.root).snapshot(old.watermark))
    # Vacuum keeps everything the lease can see...
    kept = vacuum(tmp_store, grace_s=0)
    assert kept.deleted == [] and len(kept.kept_for_lease) == 4
    check_snapshot(old_leased)
    old_leased.close()
    # ... and once nothing pins them, deletes the merged segments.
    gone = vacuum(tmp_store, grace_s=0)
    assert len(gone.deleted) == 4 and gone.freed_bytes > 0
    with pytest.raises(VacuumedDataError, match="deleted by vacuum; open a newer snapshot"):
        old.read("action.expert")
    check_snapshot(tmp_store.snapshot())


def test_compaction_loses_race_with_retention(tmp_store: EpisodeStore, features, monkeypatch) -> None:
    model = StoreModel()
    _fill(tmp_store, features, model, 4)
    other = EpisodeStore.open(tmp_store.root, durability="process")
    real_write = compaction_mod.write_segment
    shard_paths: list[str] = []

    def write_then_retain(root, rel_path, *args, **kwargs):
        shard_paths.append(rel_path)
        info = real_write(root, rel_path, *args, **kwargs)
        apply_retention(other, RetentionPolicy(max_episodes=2))  # concurrent commit removes episodes
        return info

    monkeypatch.setattr(compaction_mod, "write_segment", write_then_retain)
    with pytest.raises(CommitConflictError, match="changed during compaction; shard not published"):
        compact(tmp_store, small_frames=1000)
    assert not (tmp_store.root / shard_paths[0]).exists(), "the abandoned shard is deleted"
    assert tmp_store.watermark == 4 and tmp_store.log.read(4).kind == "retain"
    snap = tmp_store.snapshot()
    assert snap.num_episodes == 2
    check_snapshot(snap)


def test_compaction_online_with_concurrent_append(tmp_store: EpisodeStore, features, monkeypatch) -> None:
    """An append that lands while the shard is written keeps its episode live; the shard still commits."""
    model = StoreModel()
    _fill(tmp_store, features, model, 3)
    other = EpisodeStore.open(tmp_store.root, durability="process").writer(writer_id="late")
    real_write = compaction_mod.write_segment

    def write_then_append(root, rel_path, *args, **kwargs):
        info = real_write(root, rel_path, *args, **kwargs)
        other.commit([make_episode(features, 4, seed=999)])
        return info

    monkeypatch.setattr(compaction_mod, "write_segment", write_then_append)
    result = compact(tmp_store, small_frames=1000)
    assert result.seqs == [4], "published after the concurrent append (seq 3)"
    snap = tmp_store.snapshot()
    assert snap.num_episodes == 5
    late = snap.episode_ids[-1]
    assert snap.entry(int(late)).segment.startswith("segments/late/")
    assert {snap.entry(i).segment for i in range(4)} == set(result.shards)
    check_snapshot(snap)
