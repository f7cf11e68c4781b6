"""Vacuum: deletes dead segment files only after the grace period and when no lease pins them."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from odsd.schema import ReaderLease
from odsd.store import EpisodeStore, RetentionPolicy, VacuumedDataError, apply_retention, compact, vacuum
from odsd.store.leases import LEASE_DIR, active_leases
from odsd.testing.store import check_snapshot, fork_call, make_episode, wait_exit


@pytest.fixture
def retained(tmp_store: EpisodeStore, features: dict[str, Any]) -> tuple[EpisodeStore, list[str]]:
    """Four single-episode commits, the first two removed by retention; returns their segments."""
    writer = tmp_store.writer()
    for i in range(4):
        writer.commit([make_episode(features, 3, seed=i)])
    snap = tmp_store.snapshot()
    dead = [snap.entry(0).segment, snap.entry(1).segment]
    apply_retention(tmp_store, RetentionPolicy(max_episodes=2))
    return tmp_store, dead


def _write_lease(store: EpisodeStore, watermark: int, *, pid: int, expires_in_s: float) -> None:
    lease = ReaderLease(
        lease_id=uuid.uuid4().hex,
        watermark=watermark,
        pid=pid,
        host=socket.gethostname(),
        expires=(datetime.now(UTC) + timedelta(seconds=expires_in_s)).isoformat(),
    )
    (store.root / LEASE_DIR).mkdir(exist_ok=True)
    (store.root / LEASE_DIR / f"{lease.lease_id}.json").write_text(json.dumps(lease.model_dump(mode="json")))


def test_grace_period(retained: tuple[EpisodeStore, list[str]]) -> None:
    store, dead = retained
    result = vacuum(store)  # default grace: an hour
    assert result.deleted == [] and sorted(result.kept_for_grace) == sorted(dead)
    assert all((store.root / p).is_dir() for p in dead)
    result = vacuum(store, grace_s=0)
    assert sorted(result.deleted) == sorted(dead) and result.freed_bytes > 0
    assert not any((store.root / p).exists() for p in dead)
    assert vacuum(store, grace_s=0).deleted == [], "idempotent"
    snap = store.snapshot()
    assert list(snap.episode_ids) == [2, 3]
    check_snapshot(snap)


def test_dry_run_deletes_nothing(retained: tuple[EpisodeStore, list[str]]) -> None:
    store, dead = retained
    result = vacuum(store, grace_s=0, dry_run=True)
    assert sorted(result.deleted) == sorted(dead) and result.freed_bytes > 0
    assert all((store.root / p).is_dir() for p in dead)


def test_lease_pins_old_watermark(tmp_store: EpisodeStore, features) -> None:
    writer = tmp_store.writer()
    for i in range(3):
        writer.commit([make_episode(features, 3, seed=i)])
    pinned = tmp_store.snapshot(lease=True)
    apply_retention(tmp_store, RetentionPolicy(max_episodes=1))
    result = vacuum(tmp_store, grace_s=0)
    assert result.deleted == [] and len(result.kept_for_lease) == 2
    check_snapshot(pinned)
    # A lease at the newest watermark pins nothing that is dead.
    pinned.close()
    newer = tmp_store.snapshot(lease=True)
    result = vacuum(tmp_store, grace_s=0)
    assert len(result.deleted) == 2 and result.kept_for_lease == []
    check_snapshot(newer)
    newer.close()


def test_lease_only_pins_what_it_can_see(tmp_store: EpisodeStore, features) -> None:
    """A lease taken after the first removal does not keep that removal's segment."""
    writer = tmp_store.writer()
    for i in range(3):
        writer.commit([make_episode(features, 3, seed=i)])
    apply_retention(tmp_store, RetentionPolicy(max_episodes=2))  # seq 3 removes episode 0
    pinned = tmp_store.snapshot(lease=True)  # watermark 3
    apply_retention(tmp_store, RetentionPolicy(max_episodes=1))  # seq 4 removes episode 1
    result = vacuum(tmp_store, grace_s=0)
    assert len(result.deleted) == 1 and len(result.kept_for_lease) == 1
    assert result.kept_for_lease == [pinned.entry(1).segment]
    check_snapshot(pinned)
    pinned.close()


def test_stale_leases_do_not_pin(retained: tuple[EpisodeStore, list[str]]) -> None:
    store, dead = retained
    _write_lease(store, 0, pid=os.getpid(), expires_in_s=-10)  # expired
    child = fork_call(lambda: None)
    assert wait_exit(child) == 0
    _write_lease(store, 0, pid=child, expires_in_s=3600)  # holder is gone
    (store.root / LEASE_DIR / "garbage.json").write_text("{not json")
    assert active_leases(store.root) == []
    assert sorted(vacuum(store, grace_s=0).deleted) == sorted(dead)


def test_live_lease_of_other_process(retained: tuple[EpisodeStore, list[str]]) -> None:
    store, dead = retained
    _write_lease(store, 0, pid=os.getppid(), expires_in_s=3600)
    assert [lease.watermark for lease in active_leases(store.root)] == [0]
    assert sorted(vacuum(store, grace_s=0).kept_for_lease) == sorted(dead)


def test_vacuum_keeps_partially_live_segments(tmp_store: EpisodeStore, features) -> None:
    tmp_store.writer().commit([make_episode(features, 3, seed=s) for s in (1, 2)])
    apply_retention(tmp_store, RetentionPolicy(max_episodes=1))
    assert vacuum(tmp_store, grace_s=0).deleted == []
    check_snapshot(tmp_store.snapshot())


def test_snapshot_after_vacuum(tmp_store: EpisodeStore, features) -> None:
    writer = tmp_store.writer()
    for i in range(3):
        writer.commit([make_episode(features, 4, seed=i)])
    old = tmp_store.snapshot()
    old_loaded = tmp_store.snapshot().load()
    compact(tmp_store, small_frames=100)
    assert len(vacuum(tmp_store, grace_s=0).deleted) == 3
    check_snapshot(old_loaded)  # data it already loaded stays usable
    with pytest.raises(VacuumedDataError, match="segments/"):
        old.episode(0)
    with pytest.raises(VacuumedDataError):
        EpisodeStore.open(tmp_store.root).snapshot(old.watermark).read("episode_step")
    check_snapshot(EpisodeStore.open(tmp_store.root).snapshot())


def test_lease_taken_while_vacuum_runs(tmp_store: EpisodeStore, features, monkeypatch) -> None:
    """A compaction + vacuum (grace 0) between pinning a leased snapshot's state and narrowing its
    lease to that watermark must not delete what the snapshot can see (the lease exists first)."""
    writer = tmp_store.writer()
    for i in range(3):
        writer.commit([make_episode(features, 4, seed=i)])
    other = EpisodeStore.open(tmp_store.root, durability="process")
    real_refresh = tmp_store.refresh
    raced: list[int] = []

    def racing_refresh():
        state = real_refresh()
        if len(raced) < 2:  # once for store.snapshot(), once for Snapshot.refresh()
            raced.append(len(compact(other, small_frames=100).seqs))
            writer_other = other.writer()
            writer_other.commit([make_episode(features, 4, seed=100 + len(raced))])
            raced.append(len(vacuum(other, grace_s=0).deleted))
        return state

    monkeypatch.setattr(tmp_store, "refresh", racing_refresh)
    with tmp_store.snapshot(lease=True) as snap:
        assert raced[0] == 1, "the race published a compaction above the pinned watermark"
        assert raced[1] == 0, "vacuum must keep what the new snapshot can see"
        check_snapshot(snap)
        assert [lease.watermark for lease in active_leases(tmp_store.root)] == [snap.watermark]
    monkeypatch.setattr(tmp_store, "refresh", real_refresh)
    assert len(vacuum(other, grace_s=0).deleted) == 3


def test_lease_counts_while_its_reader_holds_it_not_while_its_pid_lives(
    retained: tuple[EpisodeStore, list[str]],
) -> None:
    """A lease's liveness is its owner lock: a reader's lease pins while the reader runs, and stops
    pinning when it is SIGKILLed even if its pid now names a live process (pid reuse)."""
    store, dead = retained
    script = textwrap.dedent(
        f"""
        import time
        from odsd.store import EpisodeStore
        snap = EpisodeStore.open({str(store.root)!r}, durability="process").snapshot(0, lease=True)
        print("pinned", flush=True)
        time.sleep(60)
        """
    )
    reader = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout is not None and reader.stdout.readline().strip() == "pinned"
        assert [lease.watermark for lease in active_leases(store.root)] == [0]
        assert vacuum(store, grace_s=0).deleted == []
    finally:
        reader.kill()
        reader.wait()
    (path,) = (store.root / LEASE_DIR).glob("*.json")
    reused = json.loads(path.read_text()) | {"pid": os.getpid()}  # the pid now belongs to a live process
    path.write_text(json.dumps(reused))
    assert active_leases(store.root) == []
    assert sorted(vacuum(store, grace_s=0).deleted) == sorted(dead)


def test_a_lease_is_renewed_once_half_its_time_to_live_has_passed(tmp_path, monkeypatch) -> None:
    from odsd.store import leases as leases_module

    store = EpisodeStore.create(tmp_path / "s", features={"x": {"dtype": "float32"}}, fps=10)
    handle = leases_module.LeaseHandle(store.root, 0, ttl_s=100.0)
    first = json.loads(handle.path.read_text())["expires"]
    now = time.monotonic()
    monkeypatch.setattr(leases_module.time, "monotonic", lambda: now + 10.0)
    handle.renew_if_due()
    assert json.loads(handle.path.read_text())["expires"] == first  # not due yet
    monkeypatch.setattr(leases_module.time, "monotonic", lambda: now + 60.0)
    handle.renew_if_due()
    assert json.loads(handle.path.read_text())["expires"] > first
    handle.release()
