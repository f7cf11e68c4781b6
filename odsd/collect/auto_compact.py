"""Auto-compaction by the collector's writer: the store's file count stays proportional to its data.

Every commit adds a segment (a Zarr group: a directory, its ``zarr.json`` and per field a
directory, a ``zarr.json`` and a chunk). The writer merges its own recent segments into shards
between two commits, off the collection loop::

    compactor = AutoCompactor(store, config.compaction, writer_id=writer.writer_id)
    result = writer.commit(batch)
    compactor.after_commit(result, frames=batch.num_frames)   # passes when they are due

A pass is due once ``min_segments`` of the writer's segments are uncompacted (the *tail*). It
merges the oldest ones (at most ``max_segments_per_pass`` segments, ``max_bytes_per_pass`` bytes,
``shard_frames`` frames) into one shard with one ``compact`` commit (the protocol of
``odsd store compact``: episodes keep their ids and metadata; readers on older snapshots keep
reading the old segments). Merged segments are deleted ``vacuum_grace_s`` after the compaction
commit, and only when no reader lease pins a watermark before it. Old checkpoints beyond the
newest ``keep_checkpoints`` are deleted. Once ``log_min_records`` commit records older than the
newest ``log_keep_records`` are files, they are packed into a log archive
(:func:`odsd.store.log_compaction.compact_log`). Nothing here holds more than the tail's few
numbers per segment in memory, and a pass reads at most one shard's worth of data.

A SIGKILL at any moment loses nothing: an unpublished shard is an unreferenced directory
(``odsd store fsck --repair`` removes it), and a published compaction leaves the old segments
merely dead (``odsd store vacuum`` deletes them).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import math
import os
import sys
import time
import uuid
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from odsd.schema import AddAction, CommitRecord, EpisodeEntry, RemoveAction
from odsd.store.errors import CommitConflictError
from odsd.store.layout import checked_layouts, read_for_copy
from odsd.store.leases import active_leases
from odsd.store.log import CommitLog, checkpoint_name
from odsd.store.log_archive import read_archive
from odsd.store.log_compaction import LogCompactionResult, archivable, compact_log
from odsd.store.segments import concat_frames, remove_tree, write_segment
from odsd.store.writer import publish

if TYPE_CHECKING:
    from odsd.collect.config import CompactionConfig
    from odsd.store import CommitResult, EpisodeStore
    from odsd.store.state import StoreState

log = logging.getLogger("odsd.collect")


@dataclass(frozen=True)
class _TailSegment:
    seq: int
    path: str
    n_frames: int


@dataclass(frozen=True)
class _Merged:
    seq: int
    at: float
    paths: tuple[str, ...]


class AutoCompactor:
    """Compacts the segments one writer commits (see the module docstring)."""

    def __init__(self, store: EpisodeStore, config: CompactionConfig, *, writer_id: str) -> None:
        self.store = store
        self.config = config
        # One compactor id per writer: the store's idempotency keys grow per run, not per pass.
        self.writer_id = f"{writer_id}-compact"
        state = store.refresh()
        self._next_wseq = state.writer_seqs.get(self.writer_id, -1) + 1
        self._scanned = state.seq
        """Every record up to here was checked for removes of tail episodes."""
        self._own: set[int] = set()
        """Seqs after ``_scanned`` published by this writer or compactor (no need to read them)."""
        self._removed: set[int] = set()
        """Episode ids other writers removed (retention, deletes) while still in the tail."""
        self.tail: deque[_TailSegment] = deque()
        self.merged: deque[_Merged] = deque()
        self.passes = 0
        self.segments_compacted = 0
        self._retry_after = 0
        self._log_retry_after = 0
        self._commits = 0
        self.log_passes = 0

    def after_commit(self, result: CommitResult, *, frames: int) -> None:
        """Note the writer's commit, then compact, vacuum and prune if due (errors are logged)."""
        if not self.config.enabled or result.seq is None or result.segment is None:
            return
        self._commits += 1
        self._own.add(result.seq)
        self.tail.append(_TailSegment(result.seq, result.segment, frames))
        if len(self.tail) >= self.config.min_segments and self._commits >= self._retry_after:
            try:
                self.run_pass()
            except Exception as exc:  # compaction is maintenance: collection goes on
                log.warning("auto-compaction pass failed (retried later): %s", exc)
                self._retry_after = self._commits + self.config.min_segments
        self.vacuum()
        if self._commits >= self._log_retry_after:
            try:
                self.compact_log()
            except Exception as exc:  # maintenance too: the records stay files meanwhile
                log.warning("log compaction failed (retried later): %s", exc)
                self._log_retry_after = self._commits + self.config.log_min_records

    # -- compaction ---------------------------------------------------------------------------

    def _scan(self, upto: int) -> None:
        """Read the records other writers published up to ``upto`` and note their removes."""
        commit_log = self.store.log
        if self._scanned + 1 <= min(upto, commit_log.archives().through):
            records = iter(commit_log.read_tail(self._scanned, until=upto)[0])  # archived: one read
        else:
            records = (commit_log.read(s) for s in range(self._scanned + 1, upto + 1) if s not in self._own)
        for record in records:
            if record.seq in self._own:
                continue
            for remove in record.removes:
                self._removed.update(remove.episode_ids)
        self._own = {s for s in self._own if s > upto}
        self._scanned = max(self._scanned, upto)

    def _take_group(self) -> list[tuple[_TailSegment, AddAction]]:
        """The oldest tail segments that fit one shard (removed from the tail)."""
        cfg = self.config
        group: list[tuple[_TailSegment, AddAction]] = []
        frames = nbytes = 0
        while self.tail and len(group) < cfg.max_segments_per_pass:
            seg = self.tail[0]
            add = next(a for a in self.store.log.read(seg.seq).adds if a.segment.path == seg.path)
            if group and (
                frames + seg.n_frames > cfg.shard_frames
                or nbytes + add.segment.nbytes > cfg.max_bytes_per_pass
            ):
                break
            self.tail.popleft()
            if any(e.episode_id in self._removed for e in add.episodes):
                continue  # partly removed by another writer: left to `odsd store compact`
            group.append((seg, add))
            frames += seg.n_frames
            nbytes += add.segment.nbytes
        return group

    def run_pass(self) -> int:
        """Merge the oldest tail segments into one shard; returns how many segments were merged."""
        self._scan(self.store.refresh().seq)
        group = self._take_group()
        if len(group) < 2:
            return 0  # a single segment already holds about a shard's worth of frames
        try:
            merged = self._merge(group)
        except BaseException:
            self.tail.extendleft(seg for seg, _ in reversed(group))  # tried again at the next pass
            raise
        if not merged:
            self.tail.extendleft(seg for seg, _ in reversed(group))
        return merged

    def _merge(self, group: list[tuple[_TailSegment, AddAction]]) -> int:
        root = self.store.root
        features = self.store.features
        paths = [seg.path for seg, _ in group]
        # Verified reads: a damaged segment must not be laundered into a shard with fresh checksums.
        infos = [add.segment for _, add in group]
        layouts = [checked_layouts(root, info, features) for info in infos]
        frames = {
            name: concat_frames(
                [read_for_copy(lay[name], info) for lay, info in zip(layouts, infos, strict=True)]
            )
            for name in features
        }
        rel_path = f"shards/{uuid.uuid4().hex[:16]}"
        info = write_segment(
            root,
            rel_path,
            frames,
            features,
            chunk_frames=self.config.chunk_frames,
            durable=self.store.durable,
        )
        del frames
        entries: list[EpisodeEntry] = []
        offset = 0
        for _, add in group:
            for entry in sorted(add.episodes, key=lambda e: e.offset):
                entries.append(
                    entry.model_copy(update={"segment": rel_path, "offset": offset + entry.offset})
                )
            offset += add.segment.n_frames
        ids = [e.episode_id for e in entries]
        wseq = self._next_wseq

        def build(current: StoreState, seq: int) -> CommitRecord:
            self._scan(current.seq)
            if any(i in self._removed for i in ids):
                raise CommitConflictError(f"{root}: episodes removed during auto-compaction; shard dropped")
            return CommitRecord(
                seq=seq,
                kind="compact",
                writer_id=self.writer_id,
                writer_seq=wseq,
                first_episode_id=current.next_episode_id,
                removes=[RemoveAction(episode_ids=ids, reason="compaction")],
                adds=[AddAction(segment=info, episodes=entries)],
            )

        try:
            record = publish(self.store, build)
        except CommitConflictError as exc:
            remove_tree(root / rel_path)
            log.warning("%s", exc)
            return 0
        except BaseException:
            remove_tree(root / rel_path)
            raise
        assert record is not None
        self._next_wseq = wseq + 1
        self._own.add(record.seq)
        self.merged.append(_Merged(record.seq, time.monotonic(), tuple(paths)))
        self._removed = {i for i in self._removed if i > max(ids)} if self.tail else set()
        self.passes += 1
        self.segments_compacted += len(group)
        self.prune_checkpoints()
        release_freed_memory()
        return len(group)

    # -- deleting what compaction made dead ---------------------------------------------------

    def vacuum(self) -> int:
        """Delete merged segments whose grace passed and that no reader lease can see."""
        grace = self.config.vacuum_grace_s
        now = time.monotonic()
        if not self.merged or now - self.merged[0].at < grace:
            return 0
        oldest_pin = min((lease.watermark for lease in active_leases(self.store.root)), default=None)
        deleted = 0
        while self.merged and now - self.merged[0].at >= grace:
            merged = self.merged[0]
            if oldest_pin is not None and oldest_pin < merged.seq:
                break  # a reader pinned before the compaction still reads these segments
            for path in merged.paths:
                remove_tree(self.store.root / path)
            deleted += len(merged.paths)
            self.merged.popleft()
        return deleted

    def compact_log(self) -> LogCompactionResult | None:
        """Pack old commit records into a log archive when enough are due (None: not due)."""
        cfg = self.config
        watermark = self.store.refresh().seq
        if not archivable(
            self.store.log, watermark, keep_records=cfg.log_keep_records, min_records=cfg.log_min_records
        ):
            return None
        result = compact_log(
            self.store.log,
            keep_records=cfg.log_keep_records,
            min_records=cfg.log_min_records,
            max_archives=cfg.log_max_archives,
        )
        self.log_passes += not result.busy
        return result

    def prune_checkpoints(self) -> int:
        """Keep the newest ``keep_checkpoints`` checkpoints (the records they summarize remain)."""
        seqs = self.store.log.checkpoint_seqs()
        old = seqs[: -self.config.keep_checkpoints]
        for seq in old:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.store.log.dir / checkpoint_name(seq))
        return len(old)


def release_freed_memory() -> None:
    """Give the heap pages a pass freed back to the OS (glibc keeps them in its arenas otherwise).

    A pass allocates a shard's worth of arrays in this thread and in zarr's I/O threads; glibc
    keeps what they freed in per-thread arenas, and the writer's RSS grew a few MB per pass
    (measured: +25 MB over 12 passes without, +15 MB and flat after 6 with ``malloc_trim``).
    """
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


# glibc mallopt(3) parameters
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
HEAP_MMAP_THRESHOLD = 1 << 20
"""Allocations of at least this many bytes get their own mapping, returned to the OS when freed."""
HEAP_ARENA_MAX = 2


def bound_native_heap() -> bool:
    """Make glibc return what big allocations free, in a process that compacts (the writer).

    glibc serves an allocation above its *dynamic* mmap threshold with its own mapping, but
    raises the threshold to the size of every such block freed (up to 32 MiB): after the first
    pass frees a shard-sized array, every later array of a commit or pass up to that size comes
    from the heap, whose freed pages stay resident between live neighbours, and each thread's
    arena (I/O and fsync pools) keeps its own. The writer's RSS grew a few MB per pass that way
    (tracemalloc: Python-level memory flat). Fixing the threshold at ``HEAP_MMAP_THRESHOLD``
    (which also turns the dynamic adjustment off), the trim threshold with it, and at most
    ``HEAP_ARENA_MAX`` arenas keeps freed arrays out of the heap. Returns whether it applied
    (glibc only; elsewhere nothing changes).
    """
    libc = _glibc()
    if libc is None:
        return False
    ok = libc.mallopt(_M_MMAP_THRESHOLD, HEAP_MMAP_THRESHOLD)
    ok &= libc.mallopt(_M_TRIM_THRESHOLD, 2 * HEAP_MMAP_THRESHOLD)
    ok &= libc.mallopt(_M_ARENA_MAX, HEAP_ARENA_MAX)
    return bool(ok)


def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt  # noqa: B018 - musl and others lack it
        libc.malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


# -- the bound ----------------------------------------------------------------------------------


def entries_per_segment(num_fields: int) -> int:
    """Files and directories of a single-chunk segment: its directory and ``zarr.json``, and per
    field a directory, a ``zarr.json`` and one chunk."""
    return 2 + 3 * num_fields


def entries_per_shard(num_fields: int, n_frames: int, chunk_frames: int) -> int:
    """Files and directories of a shard of ``n_frames`` frames (``ceil(n / chunk)`` chunks per field)."""
    return 2 + num_fields * (2 + max(1, math.ceil(n_frames / chunk_frames)))


def _recent_records(root: Path, window_s: float) -> int:
    """How many commit records were published in the last ``window_s`` seconds.

    Record files by their mtime, newest first; when every file is that recent, the archived
    records are counted by their timestamps too (newest archive first).
    """
    commit_log = CommitLog(root, durable=False)
    now = time.time()
    count = 0
    for seq in reversed(commit_log.record_seqs()):
        try:
            if os.stat(commit_log.path(seq)).st_mtime < now - window_s:
                return count
        except FileNotFoundError:
            continue
        count += 1
    view = commit_log.archives()
    cutoff = datetime.fromtimestamp(now - window_s, UTC)
    for archive in reversed(view.archives):
        stamps = [
            datetime.fromisoformat(r.timestamp)
            for r in read_archive(view.path(archive), archive, archive.first, archive.last)
        ]
        count += sum(stamp >= cutoff for stamp in stamps)
        if stamps[0] < cutoff:
            break
    return count


def log_bound(config: CompactionConfig, *, writers: int = 1) -> int:
    """Most entries of ``_log/`` besides checkpoints and quarantined records (see :func:`file_bound`)."""
    records = config.log_keep_records + config.log_min_records + 3 * writers
    archives = config.log_max_archives + 2
    return records + archives + 3  # _archives.json, .archive.lock, .quarantine.lock


def file_bound(store_root: str | Path, config: CompactionConfig, *, writers: int = 1) -> int:
    """The most files and directories a store collected with auto-compaction can hold now.

    ``P·(2T + A + writers) + Q·(S + 1) + (N + B + 3·writers) + (L + 2) + 3 + K + 2 + other``, where

    - ``P = 2 + 3F`` entries per segment (``F`` fields), ``T = min_segments`` (the uncompacted tail
      stays below it; segments merged by the passes of the last ``T`` commits are counted again
      while they wait for their grace), ``A`` = records published in the last
      ``vacuum_grace_s + 10`` seconds (segments merged but still in their grace period: a rate
      times a time, not a count of all commits), plus one in-flight segment per writer;
    - ``S`` shards (plus one in flight) of at most ``Q = 2 + F·(2 + ceil(shard_frames /
      chunk_frames))`` entries each: one shard per ``shard_frames`` frames (or per
      ``max_segments_per_pass`` segments) — proportional to the data, not to the commits;
    - the log: at most ``N + B + 3·writers`` record files (``N = log_keep_records`` kept, fewer
      than ``B = log_min_records`` waiting for the next log compaction, and per writer the
      records published between two of its checks and a stale attempt being taken back),
      ``L + 2`` archives (``L = log_max_archives``, plus a new and a merged one while a pass runs
      or after it was killed), the archive index and two lock files; ``K = keep_checkpoints``
      checkpoints; the ``_log`` and ``segments`` directories;
    - ``other``: the manifest, ``shards/``, ``segments/<writer>/`` directories, ``runs/`` (each run
      keeps its newest 20 run-state manifests), ``policies/`` and ``_leases/``, counted as they are.

    No term grows with the number of commits.
    """
    from odsd.schema import StoreManifest

    root = Path(store_root)
    manifest = StoreManifest.model_validate_json((root / "odsd.json").read_bytes())
    fields = len(manifest.features)
    recent = _recent_records(root, config.vacuum_grace_s + 10.0)
    shards = [p for p in (root / "shards").iterdir()] if (root / "shards").is_dir() else []
    per_segment = entries_per_segment(fields)
    per_shard = entries_per_shard(fields, config.shard_frames, config.chunk_frames)
    other = 1 + (1 if shards else 0)  # odsd.json, shards/
    seg_root = root / "segments"
    if seg_root.is_dir():
        other += sum(1 for _ in seg_root.iterdir())  # one directory per writer
    for name in ("runs", "policies", "_leases"):
        if (root / name).exists():
            other += 1 + sum(len(d) + len(f) for _, d, f in os.walk(root / name))
    segments = 2 * config.min_segments + recent + writers
    return (
        per_segment * segments
        + per_shard * (len(shards) + 1)
        + log_bound(config, writers=writers)
        + config.keep_checkpoints
        + 2
        + other
    )
