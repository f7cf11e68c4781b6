"""Log compaction: old commit records packed into archives, the log's file count bounded.

Readers see the same history at every watermark; a stale writer that links a record at a seq
already archived takes it back and retries; a SIGKILL at any moment of a pass loses nothing;
concurrent writers committing while the log is compacted never fork the history.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odsd.store import EpisodeStore, fsck
from odsd.store.log import LOG_DIR, encode_document, record_name
from odsd.store.log_archive import ARCHIVE_INDEX, ARCHIVE_RE
from odsd.store.log_compaction import compact_log
from odsd.testing.damage import run_odsd
from odsd.testing.store import (
    TINY_FEATURES,
    ReportFile,
    check_episode,
    check_snapshot,
    derive_seed,
    fork_call,
    make_episode,
    wait_exit,
)


def _store(root: Path) -> EpisodeStore:
    return EpisodeStore.create(root, features=TINY_FEATURES, fps=10, durability="process")


def _commit(writer, wseq: int) -> list[int]:
    episodes = [make_episode(TINY_FEATURES, 3 + k, derive_seed(writer.writer_id, wseq, k)) for k in range(2)]
    return writer.commit(episodes).episode_ids


def _history(store: EpisodeStore) -> list[tuple[tuple[int, ...], tuple[str, ...]]]:
    """Per watermark: the visible episode ids and their segments."""
    out = []
    for wm in range(store.watermark + 1):
        state = store.state_at(wm)
        ids = tuple(sorted(state.episodes))
        out.append((ids, tuple(state.episodes[i].segment for i in ids)))
    return out


def _log_files(root: Path) -> list[str]:
    return sorted(os.listdir(root / LOG_DIR))


def _records(names: list[str]) -> list[str]:
    return [n for n in names if n.endswith(".json") and n[0].isdigit()]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(st.sampled_from(["commit", "remove", "compact_log"]), min_size=5, max_size=40),
    keep=st.integers(1, 4),
    minimum=st.integers(1, 5),
    max_archives=st.integers(1, 3),
)
def test_every_watermark_reads_the_same_after_log_compaction(
    tmp_path_factory, steps: list[str], keep: int, minimum: int, max_archives: int
) -> None:
    root = tmp_path_factory.mktemp("s") / "store"
    store = _store(root)
    writer = store.writer(writer_id="w")
    for i, step in enumerate(steps):
        if step == "commit" or store.watermark < 0:
            _commit(writer, i)
        elif step == "remove" and store.refresh().episodes:
            writer.remove([min(store.refresh().episodes)], reason="retention")
        else:
            before = _history(EpisodeStore.open(root))
            result = compact_log(store.log, keep_records=keep, min_records=minimum, max_archives=max_archives)
            assert not result.busy and result.archives <= max_archives
            fresh = EpisodeStore.open(root)
            assert _history(fresh) == before, "log compaction changed what a watermark shows"
            names = _log_files(root)
            assert all(int(n[:20]) > result.through for n in _records(names)), (
                "an archived record file remains"
            )
            assert len([n for n in names if ARCHIVE_RE.match(n)]) == result.archives
    final = EpisodeStore.open(root)
    check_snapshot(final.snapshot())
    report = fsck(final)
    assert report.ok and not report.findings, report.findings


def test_merges_keep_the_archive_count_bounded(tmp_path: Path) -> None:
    store = _store(tmp_path / "store")
    writer = store.writer(writer_id="w")
    merges = 0
    for wseq in range(120):
        _commit(writer, wseq)
        result = compact_log(store.log, keep_records=2, min_records=3, max_archives=3)
        merges += result.merged
        names = _log_files(store.root)
        assert len(_records(names)) <= 2 + 3
        assert sum(1 for n in names if ARCHIVE_RE.match(n)) <= 3
    assert result.through > 100 and merges > 20
    final = EpisodeStore.open(store.root)
    assert [int(i) for i in final.snapshot().episode_ids] == list(range(240))
    assert fsck(final).ok


def test_stale_writer_takes_back_a_record_linked_at_an_archived_seq(tmp_path: Path) -> None:
    """A writer that read the log, then lost its seq to others *and* to log compaction, retries."""
    root = tmp_path / "store"
    store = _store(root)
    _commit(store.writer(writer_id="a"), 0)
    stale = EpisodeStore.open(root)
    stale_writer = stale.writer(writer_id="stale")
    real_publish = stale.log.publish
    hijacked: list[int] = []

    def publish_after_archiving(record):
        if not hijacked:
            # Between the stale writer's read of the log and its link: others commit at its seq
            # and later ones, and log compaction archives them and deletes their files.
            other = EpisodeStore.open(root).writer(writer_id="other")
            for wseq in range(4):
                _commit(other, wseq)
            result = compact_log(EpisodeStore.open(root).log, keep_records=1, min_records=1)
            assert result.through >= record.seq and not stale.log.path(record.seq).exists()
            hijacked.append(record.seq)
        return real_publish(record)

    stale.log.publish = publish_after_archiving  # type: ignore[method-assign]
    result = stale_writer.commit([make_episode(TINY_FEATURES, 4, 99)])
    assert stale.log.stale_publications == 1
    assert result.seq is not None and result.seq > hijacked[0]
    assert not stale.log.path(hijacked[0]).exists(), "the stale record was not taken back"
    final = EpisodeStore.open(root)
    snap = final.snapshot()
    assert [int(i) for i in snap.episode_ids] == list(range(2 + 8 + 1)), "an episode id was given twice"
    assert final.log.read(hijacked[0]).writer_id == "other"
    assert snap.entry(result.episode_ids[0]).meta.writer_id == "stale"
    check_snapshot(snap)
    report = fsck(final)
    assert report.ok and not report.findings, report.findings


def test_interrupted_passes_leave_leftovers_that_readers_ignore(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = _store(root)
    writer = store.writer(writer_id="w")
    for wseq in range(6):
        _commit(writer, wseq)
    before = _history(EpisodeStore.open(root))
    saved = {seq: store.log.path(seq).read_bytes() for seq in range(6)}
    compact_log(store.log, keep_records=1, min_records=1)
    (archive,) = store.log.archives().archives
    # A pass killed after publishing its index, before deleting the files (the same records),
    # a stale writer's record left at an archived seq, and a pass killed before its index.
    store.log.path(1).write_bytes(saved[1])
    stale = store.log.read(2).model_copy(update={"writer_id": "stale"})
    store.log.path(2).write_bytes(encode_document(stale))
    unlisted = root / LOG_DIR / "_archive.00000000000000000005-00000000000000000005.jsonl"
    unlisted.write_bytes(saved[5])
    assert _history(EpisodeStore.open(root)) == before
    assert EpisodeStore.open(root).log.read(2).writer_id == "w"
    report = fsck(EpisodeStore.open(root))
    assert report.ok
    warned = {Path(f.path).name: f.message for f in report.findings if f.severity == "warning"}
    assert set(warned) == {record_name(1), record_name(2), unlisted.name}, warned
    assert "left by log compaction" in warned[record_name(1)]
    assert "stale writer" in warned[record_name(2)]
    repaired = fsck(EpisodeStore.open(root), repair=True)
    assert len(repaired.repaired) == 3
    assert not fsck(EpisodeStore.open(root)).findings
    assert (root / LOG_DIR / archive.name).exists() and _history(EpisodeStore.open(root)) == before


def test_cli_compact_archives_the_log(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = _store(root)
    writer = store.writer(writer_id="w")
    for wseq in range(12):
        _commit(writer, wseq)
    before = _history(EpisodeStore.open(root))
    proc = run_odsd("store", "compact", root, "--small-frames", "1", "--keep-records", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["log"]["archived"] == 10 and out["log"]["through"] == 9
    assert _records(_log_files(root)) == [record_name(10), record_name(11)]
    assert (root / LOG_DIR / ARCHIVE_INDEX).exists()
    assert _history(EpisodeStore.open(root)) == before
    text = run_odsd("store", "compact", root, "--no-log")
    assert text.returncode == 0 and "archived" not in text.stdout, text.stdout


# -- a SIGKILL at any moment of a pass --------------------------------------------------------------


def _committing_archiver(root: Path, report_path: Path, ready_fd: int) -> None:
    store = EpisodeStore.open(root, index=False)
    writer = store.writer(writer_id="w-log")
    report = ReportFile(report_path)
    os.write(ready_fd, b"r")
    os.close(ready_fd)
    while True:
        ids = _commit(writer, writer.next_writer_seq)
        report.append(ids=ids)
        compact_log(store.log, keep_records=1, min_records=1, max_archives=2)


def test_sigkill_during_log_compaction_loses_nothing(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _store(root)
    report = ReportFile(tmp_path / "report.jsonl")
    rng = np.random.default_rng(11)
    leftovers = 0
    for _ in range(25):
        read_fd, write_fd = os.pipe()
        pid = fork_call(_committing_archiver, root, report.path, write_fd)
        os.close(write_fd)
        assert os.read(read_fd, 1) == b"r"
        os.close(read_fd)
        time.sleep(rng.uniform(0.01, 0.4))
        os.kill(pid, signal.SIGKILL)
        assert wait_exit(pid) == -signal.SIGKILL
        store = EpisodeStore.open(root)
        report_ = fsck(store)
        assert report_.ok, report_.errors[:3]
        leftovers += sum(f.severity == "warning" for f in report_.findings)
        snap = store.snapshot()
        ids = [int(i) for i in snap.episode_ids]
        assert ids == list(range(store.refresh().next_episode_id)), "an episode was lost or repeated"
        assert {i for item in report.read() for i in item["ids"]} <= set(ids)
        for episode_id in ids:
            check_episode(snap, episode_id)
    final = EpisodeStore.open(root)
    view = final.log.archives()
    assert view.through > 20 and len(view.archives) <= 2
    assert len(_records(_log_files(root))) <= 3
    assert fsck(final, repair=True, grace_s=0).ok
    assert not [f for f in fsck(EpisodeStore.open(root)).findings if "archive" in f.message]
    print(f"fsck warnings after the kills (leftovers readers ignore): {leftovers}")


# -- concurrent writers while the log is compacted ------------------------------------------------


def _racing_writer(root: Path, writer_id: str, report_path: Path, commits: int) -> None:
    store = EpisodeStore.open(root, index=False)
    writer = store.writer(writer_id=writer_id)
    report = ReportFile(report_path)
    for wseq in range(commits):
        ids = _commit(writer, wseq)
        report.append(writer_id=writer_id, wseq=wseq, ids=ids, stale=store.log.stale_publications)
        compact_log(store.log, keep_records=1, min_records=1, max_archives=3)


def test_concurrent_writers_never_fork_history_while_the_log_is_compacted(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _store(root)
    report = ReportFile(tmp_path / "report.jsonl")
    writers, commits = 4, 40
    pids = [fork_call(_racing_writer, root, f"w{k}", report.path, commits) for k in range(writers)]
    archiver = EpisodeStore.open(root)
    running = set(pids)
    while running:
        compact_log(archiver.log, keep_records=1, min_records=1, max_archives=3)
        for pid in list(running):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                assert os.waitstatus_to_exitcode(status) == 0, f"writer {pid} failed"
                running.discard(pid)
    items = report.read()
    assert len(items) == writers * commits
    final = EpisodeStore.open(root)
    snap = final.snapshot()
    returned = [i for item in items for i in item["ids"]]
    assert len(returned) == len(set(returned)) == 2 * writers * commits, "an episode id was given twice"
    assert sorted(returned) == [int(i) for i in snap.episode_ids]
    for item in items:
        for episode_id in item["ids"]:
            assert snap.entry(episode_id).meta.writer_id == item["writer_id"]
            check_episode(snap, episode_id)
    seqs = [final.log.read(s) for s in range(final.watermark + 1)]
    keys = [(r.writer_id, r.writer_seq) for r in seqs]
    assert len(keys) == len(set(keys)) == writers * commits, "a commit was published twice"
    report_ = fsck(final)
    assert report_.ok, report_.errors[:3]
    print(
        f"stale publications taken back: {sum(max(i['stale'] for i in items if i['writer_id'] == f'w{k}') for k in range(writers))}"
    )
