"""Retention: FIFO removal by episodes, frames and bytes, as remove commits (files stay)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odsd.store import EpisodeStore, RetentionPolicy, apply_retention, select_expired
from odsd.store.retention import episode_nbytes
from odsd.store.state import StoreState
from odsd.testing.store import StoreModel, check_snapshot, make_episode

LENGTHS = [4, 6, 2, 8, 5, 3]


@pytest.fixture
def filled(tmp_store: EpisodeStore, features: dict[str, Any]) -> tuple[EpisodeStore, StoreModel]:
    model = StoreModel()
    writer = tmp_store.writer(writer_id="w")
    for i, n in enumerate(LENGTHS):
        res = writer.commit([make_episode(features, n, seed=i)])
        assert model.commit("w", i, [(i, n)]) == (res.seq, res.episode_ids)
    return tmp_store, model


def test_max_episodes(filled: tuple[EpisodeStore, StoreModel]) -> None:
    store, model = filled
    segments = {store.snapshot().entry(i).segment for i in (0, 1)}
    removed = apply_retention(store, RetentionPolicy(max_episodes=4))
    assert removed == [0, 1] == model.expire(max_episodes=4)
    model.remove(removed)
    record = store.log.read(store.watermark)
    assert record.kind == "retain" and record.removes[0].reason == "retention"
    assert record.removes[0].episode_ids == [0, 1] and record.adds == []
    snap = store.snapshot()
    model.check(snap)
    check_snapshot(snap)
    assert all((store.root / s).is_dir() for s in segments), "files stay until vacuum"
    assert set(store.refresh().dead_segments) == segments


def test_max_frames(filled: tuple[EpisodeStore, StoreModel]) -> None:
    store, model = filled
    removed = apply_retention(store, RetentionPolicy(max_frames=16))
    # 28 frames: dropping 4, 6 leaves 18 > 16, dropping 2 more leaves 16.
    assert removed == [0, 1, 2] == model.expire(max_frames=16)
    model.remove(removed)
    assert store.snapshot().num_frames == 16
    model.check(store.snapshot())


def test_max_bytes(filled: tuple[EpisodeStore, StoreModel]) -> None:
    store, model = filled
    state = store.refresh()
    sizes = [episode_nbytes(state, i) for i in range(len(LENGTHS))]
    assert all(s > 0 for s in sizes)
    budget = sum(sizes[3:])
    removed = apply_retention(store, RetentionPolicy(max_bytes=budget))
    assert removed == [0, 1, 2]
    model.remove(removed)
    model.check(store.snapshot())


def test_combined_capacities_take_the_strictest(filled: tuple[EpisodeStore, StoreModel]) -> None:
    store, model = filled
    removed = apply_retention(store, RetentionPolicy(max_episodes=5, max_frames=20))
    assert removed == model.expire(max_episodes=5, max_frames=20) == [0, 1]


def test_nothing_to_remove_publishes_nothing(filled: tuple[EpisodeStore, StoreModel]) -> None:
    store, _ = filled
    assert apply_retention(store, RetentionPolicy(max_episodes=100, max_frames=1000, max_bytes=10**9)) == []
    assert apply_retention(store, RetentionPolicy()) == []
    assert store.watermark == len(LENGTHS) - 1


def test_retain_to_zero_and_continue(filled: tuple[EpisodeStore, StoreModel], features) -> None:
    store, _ = filled
    assert apply_retention(store, RetentionPolicy(max_episodes=0)) == list(range(6))
    assert store.snapshot().num_episodes == 0
    res = store.writer().commit([make_episode(features, 3, seed=50)])
    assert res.episode_ids == [6], "episode ids are never reused"
    snap = store.snapshot()
    assert list(snap.episode_ids) == [6]
    check_snapshot(snap)


def test_old_snapshot_still_sees_removed(filled: tuple[EpisodeStore, StoreModel]) -> None:
    store, model = filled
    old = store.snapshot()
    apply_retention(store, RetentionPolicy(max_episodes=1))
    model.check(old)
    check_snapshot(old)
    check_snapshot(EpisodeStore.open(store.root).snapshot(old.watermark))


def test_negative_capacity_rejected() -> None:
    with pytest.raises(ValueError, match="max_frames must be >= 0"):
        RetentionPolicy(max_frames=-1)


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 20), max_size=12),
    max_episodes=st.none() | st.integers(0, 14),
    max_frames=st.none() | st.integers(0, 200),
)
def test_select_expired_matches_model(
    lengths: list[int], max_episodes: int | None, max_frames: int | None
) -> None:
    """Pure selection logic against the reference model (no files involved)."""
    from odsd.schema import EpisodeEntry, EpisodeMeta, SegmentInfo

    state = StoreState()
    model = StoreModel()
    for i, n in enumerate(lengths):
        seg = f"segments/w/{i}"
        state.segments[seg] = SegmentInfo(path=seg, n_frames=n, nbytes=10 * n, checksums={})
        state.episodes[i] = EpisodeEntry(
            episode_id=i, segment=seg, offset=0, commit_seq=i, meta=EpisodeMeta(length=n)
        )
        model.commit("w", i, [(i, n)])
    got = select_expired(state, RetentionPolicy(max_episodes=max_episodes, max_frames=max_frames))
    assert got == model.expire(max_episodes=max_episodes, max_frames=max_frames)
    left = [n for i, n in enumerate(lengths) if i not in got]
    assert max_episodes is None or len(left) <= max_episodes
    assert max_frames is None or sum(left) <= max_frames
    assert got == list(range(len(got))), "FIFO: always a prefix in commit order"
