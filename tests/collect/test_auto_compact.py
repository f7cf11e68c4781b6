"""Auto-compaction by the collector's writer: bounded file count, same data, crash safety, leases."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from odsd.collect.auto_compact import AutoCompactor, entries_per_segment, file_bound, log_bound
from odsd.collect.config import CompactionConfig, load_config
from odsd.errors import ConfigError
from odsd.store import EpisodeStore, fsck
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

ODSD = [sys.executable, "-c", "from odsd.cli import main; main()"]


def count_entries(root: Path) -> int:
    return sum(len(d) + len(f) for _, d, f in os.walk(root))


def collect(store: Path, *sets: str) -> None:
    args = [
        "collect",
        "--mode",
        "dagger_sync",
        "--task",
        "pick_place",
        "--num-envs",
        "16",
        "--max-episodes",
        "192",
        "--episodes-per-iteration",
        "64",
        "--seed",
        "5",
        "--store",
        str(store),
        "--durability",
        "process",
        "--set",
        "commit_max_episodes=8",
        *[f"--set={item}" for item in sets],
    ]
    proc = subprocess.run([*ODSD, *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]


SMALL = (
    "compaction.min_segments=4",
    "compaction.vacuum_grace_s=0",
    "compaction.log_keep_records=4",
    "compaction.log_min_records=4",
    "compaction.log_max_archives=2",
)


def test_cli_collect_with_auto_compaction_bounds_files_and_keeps_data(tmp_path: Path) -> None:
    on, off = tmp_path / "on", tmp_path / "off"
    collect(off, "compaction.enabled=false")
    collect(on, *SMALL)
    config = load_config(None, None, list(SMALL)).compaction

    # With auto-compaction the store holds at most the bound; without it, one segment per commit.
    assert count_entries(on) <= file_bound(on, config)
    log_names = os.listdir(on / "_log")
    assert sum(n[0].isdigit() for n in log_names) <= log_bound(config), sorted(log_names)
    assert 1 <= sum(n.startswith("_archive.") for n in log_names) <= config.log_max_archives
    # The bound allows for segments of the last grace + 10 s still waiting for deletion: measure
    # the store without compaction once none of its records is that recent.
    newest = max(p.stat().st_mtime for p in (off / "_log").glob("*.json"))
    time.sleep(max(0.0, newest + config.vacuum_grace_s + 10.5 - time.time()))
    assert count_entries(off) > file_bound(off, config), "the run was too short to tell the two apart"
    segments = [p for p in (on / "segments").glob("*/*") if p.is_dir()]
    fields = len(EpisodeStore.open(on).features)
    assert len(segments) <= config.min_segments + 1
    assert sum(1 for _ in (on / "shards").iterdir()) >= 2
    assert entries_per_segment(fields) * len(segments) <= entries_per_segment(fields) * (
        config.min_segments + 1
    )

    # The same seed gives the same episodes, whether they sit in segments or shards.
    a, b = EpisodeStore.open(on).snapshot(), EpisodeStore.open(off).snapshot()
    assert a.num_episodes == b.num_episodes == 192
    assert list(a.episode_ids) == list(b.episode_ids)
    assert {e.segment.split("/")[0] for e in a.entries} >= {"shards"}
    skip = {"started", "finished", "writer_id", "run_id"}
    for episode_id in a.episode_ids:
        ma, mb = a.meta(int(episode_id)), b.meta(int(episode_id))
        assert ma.model_dump(exclude=skip) == mb.model_dump(exclude=skip)
        ea, eb = a.episode(int(episode_id)), b.episode(int(episode_id))
        for name in ea:
            np.testing.assert_array_equal(ea[name], eb[name], err_msg=f"episode {episode_id} {name}")
    report = fsck(EpisodeStore.open(on))
    assert report.ok and not [f for f in report.findings if f.severity == "error"]


def test_log_files_stay_bounded_however_many_commits(tmp_path: Path) -> None:
    """The bound has no per-commit term: the log's files stay below it commit after commit."""
    root = _store(tmp_path)
    store = EpisodeStore.open(root, index=False)
    writer = store.writer(writer_id="w")
    config = CompactionConfig(
        min_segments=2,
        max_segments_per_pass=4,
        vacuum_grace_s=0,
        log_keep_records=3,
        log_min_records=5,
        log_max_archives=3,
    )
    compactor = AutoCompactor(store, config, writer_id="w")
    most = 0
    for wseq in range(150):
        _commit(writer, compactor, wseq)
        log_entries = len(os.listdir(root / "_log"))
        most = max(most, log_entries)
        assert log_entries <= log_bound(config) + config.keep_checkpoints
        assert count_entries(root) <= file_bound(root, config)
    assert store.watermark > 150 and compactor.log_passes >= 20
    assert most <= 3 + 5 + 3 + 3 + 2 + 3, most  # no term grows with the 190 records
    final = EpisodeStore.open(root)
    assert [int(i) for i in final.snapshot().episode_ids] == list(range(450))
    check_snapshot(final.snapshot())
    assert fsck(final).ok


def test_log_compaction_off_switch(tmp_path: Path) -> None:
    root = _store(tmp_path)
    store = EpisodeStore.open(root, index=False)
    writer = store.writer(writer_id="w")
    compactor = AutoCompactor(
        store, CompactionConfig(enabled=False, log_keep_records=1, log_min_records=1), writer_id="w"
    )
    for wseq in range(10):
        _commit(writer, compactor, wseq)
    assert compactor.log_passes == 0 and not (root / "_log" / "_archives.json").exists()


def test_compaction_config_keys_and_off_switch() -> None:
    cfg = load_config(None, None, ["compaction.enabled=false", "compaction.min_segments=8"])
    assert cfg.compaction.enabled is False and cfg.compaction.min_segments == 8
    with pytest.raises(ConfigError, match="compaction"):
        load_config(None, None, ["compaction.min_segments=100"])  # above max_segments_per_pass
    with pytest.raises(ConfigError, match="compaction"):
        load_config(None, None, ["compaction.every=3"])


# -- the compactor on its own --------------------------------------------------------------------


def _commit(writer, compactor: AutoCompactor | None, wseq: int) -> list[int]:
    episodes = [make_episode(TINY_FEATURES, 5 + k, derive_seed("auto", wseq, k)) for k in range(3)]
    result = writer.commit(episodes)
    if compactor is not None:
        compactor.after_commit(result, frames=sum(e.meta.length for e in episodes))
    return result.episode_ids


def _store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    EpisodeStore.create(root, features=TINY_FEATURES, fps=10, durability="process")
    return root


def test_disabled_compactor_keeps_no_tail(tmp_path: Path) -> None:
    store = EpisodeStore.open(_store(tmp_path), index=False)
    writer = store.writer(writer_id="w")
    compactor = AutoCompactor(store, CompactionConfig(enabled=False), writer_id="w")
    for wseq in range(10):
        _commit(writer, compactor, wseq)
    assert not compactor.tail and compactor.passes == 0
    assert not (store.root / "shards").exists()


def test_auto_vacuum_keeps_what_a_lease_can_see(tmp_path: Path) -> None:
    root = _store(tmp_path)
    store = EpisodeStore.open(root, index=False)
    writer = store.writer(writer_id="w")
    config = CompactionConfig(min_segments=2, max_segments_per_pass=2, vacuum_grace_s=0)
    compactor = AutoCompactor(store, config, writer_id="w")
    _commit(writer, compactor, 0)
    reader = EpisodeStore.open(root).snapshot(lease=True)  # pins the watermark before compaction
    old = {e.segment for e in reader.entries}
    _commit(writer, compactor, 1)  # the pass merges both segments
    _commit(writer, compactor, 2)
    assert compactor.passes == 1
    assert all((root / path).is_dir() for path in old), "a leased reader's segments were deleted"
    check_snapshot(reader)
    reader.close()
    _commit(writer, compactor, 3)  # vacuum runs after each commit
    assert not any((root / path).exists() for path in old)
    check_snapshot(EpisodeStore.open(root).snapshot())


def test_auto_compaction_leaves_segments_another_writer_removed_from(tmp_path: Path) -> None:
    root = _store(tmp_path)
    store = EpisodeStore.open(root, index=False)
    writer = store.writer(writer_id="w")
    config = CompactionConfig(min_segments=3, max_segments_per_pass=3, vacuum_grace_s=0)
    compactor = AutoCompactor(store, config, writer_id="w")
    first = _commit(writer, compactor, 0)
    EpisodeStore.open(root).writer(writer_id="retention").remove([first[1]], reason="retention")
    for wseq in range(1, 6):
        _commit(writer, compactor, wseq)
    snap = EpisodeStore.open(root).snapshot()
    assert first[1] not in set(snap.episode_ids.tolist())
    assert snap.entry(first[0]).segment.startswith("segments/"), "a partly removed segment was compacted"
    assert any(e.segment.startswith("shards/") for e in snap.entries)
    check_snapshot(snap)
    assert fsck(EpisodeStore.open(root)).ok


def _compacting_writer(root: Path, report_path: Path, ready_fd: int) -> None:
    store = EpisodeStore.open(root, index=False)
    writer = store.writer(writer_id="w-auto")
    compactor = AutoCompactor(
        store,
        CompactionConfig(min_segments=2, max_segments_per_pass=4, vacuum_grace_s=0, chunk_frames=16),
        writer_id="w-auto",
    )
    report = ReportFile(report_path)
    os.write(ready_fd, b"r")
    os.close(ready_fd)
    while True:
        wseq = writer.next_writer_seq
        ids = _commit(writer, compactor, wseq)
        report.append(ids=ids, passes=compactor.passes)


def test_sigkill_during_auto_compaction_loses_nothing(tmp_path: Path) -> None:
    root = _store(tmp_path)
    report = ReportFile(tmp_path / "report.jsonl")
    rng = np.random.default_rng(7)
    for _ in range(30):
        read_fd, write_fd = os.pipe()
        pid = fork_call(_compacting_writer, root, report.path, write_fd)
        os.close(write_fd)
        assert os.read(read_fd, 1) == b"r"
        os.close(read_fd)
        # A new writer's tail starts empty: let it commit once, so that the kill lands around
        # its second commit and the pass that follows it (the pass merges both).
        seen = len(report.read())
        deadline = time.monotonic() + 30
        while len(report.read()) == seen and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(rng.uniform(0.0, 0.6))
        os.kill(pid, signal.SIGKILL)
        assert wait_exit(pid) == -signal.SIGKILL
        store = EpisodeStore.open(root)
        snap = store.snapshot()
        ids = [int(i) for i in snap.episode_ids]
        # Nothing committed is lost: every id ever assigned is live (nothing else removes here).
        assert ids == list(range(store.refresh().next_episode_id))
        returned = {i for item in report.read() for i in item["ids"]}
        assert returned <= set(ids)
        for episode_id in ids:
            check_episode(snap, episode_id)
    final = EpisodeStore.open(root)
    kinds = [final.log.read(seq).kind for seq in range(final.watermark + 1)]
    assert kinds.count("compact") >= 5, kinds.count("compact")
    report_ = fsck(final)
    assert report_.ok, report_.errors[:5]
    leftovers = [f.path for f in report_.findings if f.severity == "warning"]
    assert any("/shards/" in path for path in leftovers), "no kill landed inside a compaction pass"
    repaired = fsck(EpisodeStore.open(root), repair=True, grace_s=0)
    assert repaired.ok
    check_snapshot(EpisodeStore.open(root).snapshot())


# -- the writer's native heap ---------------------------------------------------------------------

_HEAP_PROBE = """
import ctypes, sys
import numpy as np

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost"
    )]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "bound":
    from odsd.collect.auto_compact import bound_native_heap
    assert bound_native_heap()
big = np.ones(24 << 20, np.uint8)  # a shard's worth, freed: glibc raises its dynamic mmap threshold
del big
commit = np.ones(4 << 20, np.uint8)  # a commit's array after it
print(int(libc.mallinfo2().hblkhd >= commit.nbytes))  # in its own mapping (returned when freed)?
"""


def test_bound_native_heap_keeps_freed_arrays_out_of_the_heap() -> None:
    """After a pass frees a shard-sized array, a commit-sized one must still be mapped, not heap."""
    run = [sys.executable, "-c", _HEAP_PROBE]
    plain = subprocess.run([*run, "plain"], capture_output=True, text=True, check=True)
    bound = subprocess.run([*run, "bound"], capture_output=True, text=True, check=True)
    assert plain.stdout.strip() == "0", "glibc's dynamic threshold no longer applies: the probe shows nothing"
    assert bound.stdout.strip() == "1", bound.stdout + bound.stderr
