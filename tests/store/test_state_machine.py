"""Stateful property test: commit / retransmit / retain / compact / vacuum / reopen / snapshots
(old watermarks, leases) against the in-memory :class:`odsd.testing.store.StoreModel`."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from odsd.store import (
    EpisodeStore,
    RetentionPolicy,
    Snapshot,
    VacuumedDataError,
    apply_retention,
    compact,
    fsck,
    vacuum,
)
from odsd.store.leases import active_leases
from odsd.testing.store import TINY_FEATURES, StoreModel, check_snapshot, make_episode

FEATURES = TINY_FEATURES
WRITER_IDS = ("wa", "wb")


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="odsd-sm-"))
        self.store = EpisodeStore.create(self.dir / "s", features=FEATURES, fps=10, durability="process")
        self.model = StoreModel()
        self.writers = {w: self.store.writer(writer_id=w) for w in WRITER_IDS}
        self.snapshots: list[tuple[Snapshot, bool]] = []
        self.readable_from = -1
        """Snapshots at or above this watermark must stay fully readable (vacuum's floor so far)."""
        self.next_seed = 0

    def teardown(self) -> None:
        for snap, _ in self.snapshots:
            snap.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- writes --------------------------------------------------------------------------------

    @rule(writer=st.sampled_from(WRITER_IDS), lengths=st.lists(st.integers(1, 6), min_size=1, max_size=3))
    def commit(self, writer: str, lengths: list[int]) -> None:
        batch = []
        for n in lengths:
            self.next_seed += 1
            batch.append((self.next_seed, n))
        w = self.writers[writer]
        wseq = w.next_writer_seq
        res = w.commit([make_episode(FEATURES, n, s) for s, n in batch])
        assert (res.seq, res.episode_ids) == self.model.commit(writer, wseq, batch)

    @precondition(lambda self: self.model.writer_seqs)
    @rule(data=st.data())
    def retransmit(self, data: st.DataObject) -> None:
        writer = data.draw(st.sampled_from(sorted(self.model.writer_seqs)))
        wseq = data.draw(st.integers(0, self.model.writer_seqs[writer]))
        res = self.writers[writer].commit([make_episode(FEATURES, 2, seed=0)], writer_seq=wseq)
        assert res.duplicate and res.seq is None
        assert self.model.commit(writer, wseq, [(0, 2)]) is None

    @rule(max_episodes=st.none() | st.integers(0, 8), max_frames=st.none() | st.integers(0, 40))
    def retain(self, max_episodes: int | None, max_frames: int | None) -> None:
        removed = apply_retention(
            self.store, RetentionPolicy(max_episodes=max_episodes, max_frames=max_frames)
        )
        assert removed == self.model.expire(max_episodes=max_episodes, max_frames=max_frames)
        if removed:
            self.model.remove(removed)

    @rule(small=st.sampled_from([4, 10, 1000]), shard=st.sampled_from([8, 20, 10_000]))
    def compact(self, small: int, shard: int) -> None:
        result = compact(self.store, small_frames=small, shard_frames=shard)
        self.model.compacted(len(result.seqs))

    @rule()
    def vacuum(self) -> None:
        pins = [lease.watermark for lease in active_leases(self.store.root)]
        floor = min([*pins, self.model.watermark])
        result = vacuum(self.store, grace_s=0)
        self.readable_from = max(self.readable_from, floor)
        if not pins:
            assert result.kept_for_lease == []

    @rule()
    def reopen(self) -> None:
        self.store = EpisodeStore.open(self.store.root, durability="process")
        self.writers = {w: self.store.writer(writer_id=w) for w in WRITER_IDS}
        for w, writer in self.writers.items():
            assert writer.next_writer_seq == self.model.writer_seqs.get(w, -1) + 1

    # -- reads ---------------------------------------------------------------------------------

    @rule(data=st.data(), lease=st.booleans())
    def take_snapshot(self, data: st.DataObject, lease: bool) -> None:
        watermark = data.draw(st.none() | st.integers(-1, self.model.watermark))
        snap = self.store.snapshot(watermark, lease=lease)
        assert snap.watermark == (self.model.watermark if watermark is None else watermark)
        self.model.check(snap)
        self.snapshots.append((snap, lease))

    @precondition(lambda self: self.snapshots)
    @rule(data=st.data())
    def read_snapshot(self, data: st.DataObject) -> None:
        snap, _ = data.draw(st.sampled_from(self.snapshots))
        self.model.check(snap)
        if snap.watermark >= self.readable_from:
            check_snapshot(snap, rng=np.random.default_rng(snap.watermark + 1))
        else:
            with contextlib.suppress(VacuumedDataError):  # may be gone, but never wrong
                check_snapshot(snap, rng=np.random.default_rng(snap.watermark + 1))

    @precondition(lambda self: self.snapshots)
    @rule(data=st.data())
    def close_snapshot(self, data: st.DataObject) -> None:
        i = data.draw(st.integers(0, len(self.snapshots) - 1))
        snap, _ = self.snapshots.pop(i)
        snap.close()

    @rule()
    def check_fsck(self) -> None:
        report = fsck(self.store)
        assert report.ok and report.findings == [], report.findings
        assert (report.watermark, report.episodes) == (self.model.watermark, len(self.model.live()))

    @invariant()
    def latest_matches_model(self) -> None:
        assert self.store.watermark == self.model.watermark
        self.model.check(self.store.snapshot())


StoreMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestStoreMachine = StoreMachine.TestCase
