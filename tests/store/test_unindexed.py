"""A store handle opened with ``index=False`` (a collector's writer) follows the log in O(1) memory."""

from __future__ import annotations

from pathlib import Path

from odsd.store import EpisodeStore
from odsd.testing.store import TINY_FEATURES, check_snapshot, make_episode


def _commit(writer, n: int, start: int = 0) -> None:
    for k in range(start, start + n):
        writer.commit(
            [make_episode(TINY_FEATURES, 3 + k % 5, seed=k), make_episode(TINY_FEATURES, 4, seed=1000 + k)]
        )


def test_unindexed_handle_keeps_no_episode_index(tmp_path: Path) -> None:
    root = tmp_path / "s"
    EpisodeStore.create(root, features=TINY_FEATURES, fps=10, durability="process")
    lean = EpisodeStore.open(root, index=False)
    writer = lean.writer(writer_id="w")
    _commit(writer, 70)  # past the checkpoint interval (64)
    state = lean.refresh()
    assert (state.seq, state.next_episode_id, state.writer_seqs) == (69, 140, {"w": 69})
    assert state.episodes == {} and state.segments == {} and state.dead_segments == {}
    assert lean.log.checkpoint_seqs() == [], "an unindexed writer cannot write checkpoints"

    # Snapshots from the lean handle build the index transiently and see everything.
    full = EpisodeStore.open(root)
    assert lean.snapshot().num_episodes == full.snapshot().num_episodes == 140
    check_snapshot(lean.snapshot())
    # Whoever holds the index writes the checkpoint the writer could not.
    assert full.log.checkpoint_seqs() == [69]
    again = EpisodeStore.open(root, index=False)
    assert again.refresh().next_episode_id == 140 and again.refresh().episodes == {}
    # A new writer with the same id continues its sequence; duplicates are still recognized.
    resumed = again.writer(writer_id="w")
    assert resumed.next_writer_seq == 70
    assert resumed.commit([make_episode(TINY_FEATURES, 3, seed=5)], writer_seq=69).duplicate


def test_snapshot_refresh_from_an_unindexed_handle_sees_new_episodes(tmp_path: Path) -> None:
    root = tmp_path / "s"
    EpisodeStore.create(root, features=TINY_FEATURES, fps=10, durability="process")
    lean = EpisodeStore.open(root, index=False)
    writer = lean.writer(writer_id="w")
    _commit(writer, 2)
    snap = lean.snapshot()
    _commit(writer, 3, start=2)
    assert snap.refresh().num_episodes == 10
