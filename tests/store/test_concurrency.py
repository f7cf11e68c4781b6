"""Concurrency: 4 writer processes and 2 reader processes on one store, with online compaction
and vacuum running in the test process, for a few seconds.

Checks: no commit is lost or duplicated (the log holds exactly the commits the writers saw
return, each once, and retransmissions are no-ops); every snapshot a reader takes is internally
consistent (gapless ids, every episode's frames hash to the content hash in its metadata,
gathers agree with per-episode reads); each reader's watermarks only grow.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from odsd.store import EpisodeStore, compact, fsck, vacuum
from odsd.testing.store import (
    TINY_FEATURES,
    ReportFile,
    check_snapshot,
    content_hash,
    derive_seed,
    fork_call,
    make_episode,
    wait_exit,
)

WRITERS = 4
READERS = 2
DURATION_S = 3.0
FEATURES = TINY_FEATURES


def batch_for(writer_id: str, writer_seq: int) -> list[tuple[int, int]]:
    rng = np.random.default_rng(derive_seed("batch", writer_id, writer_seq))
    return [
        (derive_seed(writer_id, writer_seq, k), int(rng.integers(2, 40))) for k in range(rng.integers(1, 4))
    ]


def _writer(root: Path, writer_id: str, durability: str, report_path: Path, deadline: float) -> None:
    store = EpisodeStore.open(root, durability=durability)  # type: ignore[arg-type]
    writer = store.writer(writer_id=writer_id, run_id=f"run-{writer_id}")
    report = ReportFile(report_path)
    n = 0
    while time.time() < deadline:
        wseq = writer.next_writer_seq
        episodes = [make_episode(FEATURES, length, seed) for seed, length in batch_for(writer_id, wseq)]
        res = writer.commit(episodes)
        assert not res.duplicate
        report.append(seq=res.seq, ids=res.episode_ids, writer_id=writer_id, writer_seq=wseq)
        n += 1
        if n % 5 == 0:
            assert writer.commit(episodes, writer_seq=wseq).duplicate, "retransmission published twice"


def _reader(root: Path, reader: int, report_path: Path, deadline: float) -> None:
    store = EpisodeStore.open(root)
    rng = np.random.default_rng(reader)
    report = ReportFile(report_path)
    verified: set[tuple[int, str]] = set()
    last_wm = -1
    snap = store.snapshot(lease=True)
    snapshots = 0
    # Until the deadline, and in any case two snapshots (a loaded machine can make one take it all).
    while time.time() < deadline or (snapshots < 2 and time.time() < deadline + 60):
        # snap.refresh() reuses loaded segments; a fresh handle now and then, as a new trainer would.
        fresh = EpisodeStore.open(root).snapshot(lease=True) if snapshots % 3 == 2 else snap.refresh()
        snap.close()
        snap = fresh
        assert snap.watermark >= last_wm, f"watermark went back from {last_wm} to {snap.watermark}"
        last_wm = snap.watermark
        snapshots += 1
        ids = [int(i) for i in snap.episode_ids]
        assert ids == list(range(len(ids))), "ids visible at a watermark are gapless"
        assert all(e.commit_seq <= snap.watermark for e in snap.entries)
        snap.load()
        # Verify up to 150 not-yet-verified episodes per snapshot (a random sample when writers
        # outpace the reader), so every reader takes several snapshots however fast commits are.
        pending = [e for e in snap.entries if (e.episode_id, e.segment) not in verified]
        if len(pending) > 150:
            pending = [pending[i] for i in sorted(rng.choice(len(pending), 150, replace=False))]
        for entry in pending:
            key = (entry.episode_id, entry.segment)
            frames = snap.episode(entry.episode_id)
            assert content_hash(frames) == entry.meta.extra["sha"], (
                f"episode {entry.episode_id} in {entry.segment}"
            )
            verified.add(key)
        if snap.num_frames:
            idx = rng.integers(0, snap.num_frames, size=256)
            episode_pos = snap.frame_episode(idx)
            for name in FEATURES:
                got = snap.gather(name, idx)
                for j in range(0, 256, 16):
                    eid = int(snap.episode_ids[episode_pos[j]])
                    start, _ = snap.frame_range(eid)
                    np.testing.assert_array_equal(got[j], snap.episode(eid, [name])[name][idx[j] - start])
    snap.close()
    report.append(reader=reader, snapshots=snapshots, last_watermark=last_wm, verified=len(verified))


def test_writers_and_readers_concurrently(tmp_path: Path) -> None:
    root = tmp_path / "store"
    EpisodeStore.create(root, features=FEATURES, fps=10, durability="process")
    wreport = ReportFile(tmp_path / "writers.jsonl")
    rreport = ReportFile(tmp_path / "readers.jsonl")
    start = time.time()
    deadline = start + DURATION_S
    pids = [
        fork_call(_writer, root, f"w{i}", "fsync" if i == 0 else "process", wreport.path, deadline)
        for i in range(WRITERS)
    ]
    pids += [fork_call(_reader, root, r, rreport.path, deadline + 0.5) for r in range(READERS)]
    # Online maintenance in this process while the others run.
    store = EpisodeStore.open(root, durability="process")
    compactions = deleted = 0
    while time.time() < deadline:
        compactions += len(compact(store, small_frames=200, shard_frames=400, max_shards=1).seqs)
        # A grace well above the instant between a reader pinning its state and writing its lease.
        deleted += len(vacuum(store, grace_s=1.0).deleted)
        time.sleep(0.05)
    codes = [wait_exit(pid) for pid in pids]
    assert codes == [0] * (WRITERS + READERS), f"child exit codes {codes} (tracebacks above)"

    final = EpisodeStore.open(root)
    snap = final.snapshot()
    records = [final.log.read(s) for s in range(final.watermark + 1)]
    appends = [r for r in records if r.kind == "append"]
    keys = [(r.writer_id, r.writer_seq) for r in appends]
    reported = wreport.read()
    # No commit lost, none duplicated: the log's appends are exactly the reported commits.
    assert len(keys) == len(set(keys)), "an idempotency key was published twice"
    assert sorted(keys) == sorted((r["writer_id"], r["writer_seq"]) for r in reported)
    for writer in {k[0] for k in keys}:
        seqs = sorted(s for w, s in keys if w == writer)
        assert seqs == list(range(len(seqs)))
    by_seq = {r.seq: r for r in appends}
    for item in reported:
        record = by_seq[item["seq"]]
        assert (record.writer_id, record.writer_seq) == (item["writer_id"], item["writer_seq"])
        assert [e.episode_id for e in record.adds[0].episodes] == item["ids"]
        for eid, (seed, length) in zip(
            item["ids"], batch_for(item["writer_id"], item["writer_seq"]), strict=True
        ):
            meta = snap.meta(eid)
            assert (meta.seed, meta.length, meta.writer_id) == (seed, length, item["writer_id"])
    assert snap.num_episodes == sum(len(r["ids"]) for r in reported)
    assert len({r["writer_id"] for r in reported}) == WRITERS
    check_snapshot(snap, gather_samples=1024)

    readers = rreport.read()
    assert sorted(r["reader"] for r in readers) == list(range(READERS))
    assert all(r["snapshots"] >= 2 and r["last_watermark"] <= snap.watermark for r in readers), readers
    assert fsck(final).findings == []
    print(
        f"\n{len(appends)} commits by {WRITERS} writers in {DURATION_S}s, {compactions} compactions, "
        f"{deleted} segments vacuumed; readers: {readers}"
    )
