"""``fsck``: check a store end to end and, with ``repair``, clean what is safe to clean.

Repairs never touch committed data: they delete temporary ``.partial`` files, segment
directories no commit record references (left by crashed writers) and damaged checkpoints
(the records they summarize remain), and move a damaged *trailing* record aside. A damaged
record inside the history, a missing committed segment or a checksum mismatch is reported
with its path and left for a human.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from odsd.schema import Checkpoint, CommitRecord, EpisodeEntry, SegmentInfo
from odsd.store.episode_store import EpisodeStore
from odsd.store.errors import CorruptStoreError
from odsd.store.fsio import PARTIAL_SUFFIX
from odsd.store.layout import check_segment, decode_checked
from odsd.store.log import _RECORD_RE, LOG_DIR, CommitLog, TornRecord, checkpoint_name
from odsd.store.log_archive import ARCHIVE_INDEX, ARCHIVE_RE, ArchiveGone, ArchiveView, read_archive
from odsd.store.log_compaction import leftovers, remove_leftovers
from odsd.store.segments import remove_tree
from odsd.store.state import StoreState

DEFAULT_REPAIR_GRACE_S = 900.0
DATA_DIRS = ("segments", "shards")


@dataclass(frozen=True)
class Finding:
    severity: Literal["error", "warning"]
    path: str
    message: str
    repairable: bool = False


@dataclass
class FsckReport:
    watermark: int = -1
    episodes: int = 0
    segments_checked: int = 0
    findings: list[Finding] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def add(
        self, severity: Literal["error", "warning"], path: Path | str, message: str, repairable: bool = False
    ) -> None:
        self.findings.append(Finding(severity, str(path), message, repairable))


def _age_s(path: Path) -> float:
    try:
        return time.time() - path.lstat().st_mtime
    except FileNotFoundError:
        return 0.0


def _stray_partials(root: Path) -> list[Path]:
    found: list[Path] = []
    for top in (root / LOG_DIR, *(root / d for d in DATA_DIRS), root):
        if not top.is_dir():
            continue
        walker = [(str(top), [], os.listdir(top))] if top == root else os.walk(top)
        for dirpath, dirnames, filenames in walker:
            for name in list(dirnames) + list(filenames):
                if name.endswith(PARTIAL_SUFFIX):
                    found.append(Path(dirpath) / name)
    return sorted(set(found))


def _segment_dirs(root: Path) -> set[str]:
    found: set[str] = set()
    seg_root = root / "segments"
    if seg_root.is_dir():
        for writer in seg_root.iterdir():
            if writer.is_dir():
                found.update(
                    f"segments/{writer.name}/{p.name}"
                    for p in writer.iterdir()
                    if p.is_dir() and not p.name.endswith(PARTIAL_SUFFIX)
                )
    shard_root = root / "shards"
    if shard_root.is_dir():
        found.update(
            f"shards/{p.name}"
            for p in shard_root.iterdir()
            if p.is_dir() and not p.name.endswith(PARTIAL_SUFFIX)
        )
    return found


def fsck(
    store: EpisodeStore, *, repair: bool = False, deep: bool = True, grace_s: float = DEFAULT_REPAIR_GRACE_S
) -> FsckReport:
    """Check manifest, log, checkpoints and segment data; optionally repair what is safe."""
    root = store.root
    report = FsckReport()
    log = store.log
    state = StoreState()
    checkpoint_seqs = log.checkpoint_seqs()
    # What each checkpoint must match, taken during the one replay of the log below.
    expected: dict[int, tuple[dict[int, EpisodeEntry], int]] = {}

    def apply(record: CommitRecord, where: Path) -> None:
        state.apply(record, str(where))
        if record.seq in checkpoint_seqs:
            expected[record.seq] = (dict(state.episodes), state.next_episode_id)

    view, history_ok = _replay_archives(log, report, apply)
    through = view.through if view is not None else -1
    seqs = [s for s in log.record_seqs() if s > through]
    torn = None
    for i, seq in enumerate(seqs if history_ok else []):
        if seq != through + 1 + i:
            report.add(*_missing_record(log, view, through + 1 + i, seq))
            history_ok = False
            break
        try:
            apply(log.read(seq), log.path(seq))
        except CorruptStoreError as exc:
            if seq == seqs[-1]:
                torn = seq
                report.add(
                    "error",
                    log.path(seq),
                    f"damaged trailing commit record ({exc}); readers ignore it",
                    repairable=True,
                )
            else:
                report.add("error", log.path(seq), str(exc))
                history_ok = False
            break
    if history_ok and not seqs and view is not None and view.identity is None:
        problem = _missing_record(log, view, 0, None)
        if problem is not None:
            report.add(*problem)
            history_ok = False
    if view is not None:
        _log_leftovers(log, view, report, repair=repair, grace_s=grace_s)
    report.watermark = state.seq
    report.episodes = len(state.episodes)

    if torn is not None and repair:
        target = log.quarantine(TornRecord(torn, log.path(torn), "damaged"))
        if target is not None:
            report.repaired.append(f"moved damaged trailing record to {target}")
    for path in log.quarantined():
        report.add(
            "warning",
            path,
            "damaged trailing record set aside (by fsck --repair or a writer that committed past it); "
            "the records before it are the history",
        )

    for ckpt_seq in checkpoint_seqs:
        path = log.dir / checkpoint_name(ckpt_seq)
        try:
            ckpt = log.read_checkpoint(ckpt_seq)
            bad = ckpt_seq in expected and not _checkpoint_matches(ckpt, *expected[ckpt_seq])
            problem = "checkpoint disagrees with the commit records" if bad else None
        except (CorruptStoreError, OSError) as exc:
            problem = f"damaged checkpoint ({exc})"
        if problem:
            report.add("error", path, problem + "; readers fall back to the records", repairable=True)
            if repair:
                path.unlink(missing_ok=True)
                report.repaired.append(f"deleted {path}")

    live_segments = sorted({e.segment for e in state.episodes.values()})
    for seg in live_segments:
        report.segments_checked += 1
        for message in _segment_problems(store, state.segments[seg], deep=deep):
            report.add("error", root / seg, message)

    if history_ok:
        known = set(state.segments)
        for seg in sorted(_segment_dirs(root) - known):
            path = root / seg
            old = _age_s(path) >= grace_s
            report.add(
                "warning",
                path,
                "segment not referenced by any commit record (crashed writer)",
                repairable=old,
            )
            if repair and old:
                remove_tree(path)
                report.repaired.append(f"deleted {path}")
    for path in _stray_partials(root):
        old = _age_s(path) >= grace_s
        report.add("warning", path, "temporary file of an unfinished write", repairable=old)
        if repair and old:
            if path.is_dir():
                remove_tree(path)
            else:
                path.unlink(missing_ok=True)
            report.repaired.append(f"deleted {path}")
    return report


def _replay_archives(
    log: CommitLog, report: FsckReport, apply: Callable[[CommitRecord, Path], None]
) -> tuple[ArchiveView | None, bool]:
    """Replay every archived record (each archive read whole: its sha256 is checked too)."""
    try:
        view = log.archives()
    except CorruptStoreError as exc:
        report.add("error", log.dir / ARCHIVE_INDEX, str(exc))
        return None, False
    for archive in view.archives:
        path = view.path(archive)
        try:
            for record in read_archive(path, archive, archive.first, archive.last):
                apply(record, path)
        except ArchiveGone:
            report.add(
                "error",
                path,
                f"log archive is missing (the index lists it for records {archive.first}..{archive.last})",
            )
            return view, False
        except CorruptStoreError as exc:
            report.add("error", path, str(exc))
            return view, False
    return view, True


def _missing_record(
    log: CommitLog, view: ArchiveView | None, seq: int, found: int | None
) -> tuple[Literal["error"], Path, str] | None:
    """The finding for record ``seq`` missing (``found``: the next record file, None to look)."""
    names = os.listdir(log.dir)
    later = [int(m.group(1)) for n in names if (m := _RECORD_RE.match(n)) and int(m.group(1)) > seq]
    found = found if found is not None else min(later, default=None)
    if view is not None and view.identity is None and any(ARCHIVE_RE.match(n) for n in names):
        upto = f"{found - 1}" if found is not None else "the newest"
        return (
            "error",
            log.dir / ARCHIVE_INDEX,
            f"log archive index is missing; records {seq}..{upto} are in archives nothing lists",
        )
    if found is None:
        return None
    return "error", log.path(seq), f"commit record {seq} is missing; records {found}.. are unreachable"


def _log_leftovers(
    log: CommitLog, view: ArchiveView, report: FsckReport, *, repair: bool, grace_s: float
) -> None:
    """Record files at archived seqs and unlisted archives: warnings, deleted by ``repair``."""
    names = leftovers(view, os.listdir(log.dir))
    for name in names:
        path = log.dir / name
        if ARCHIVE_RE.match(name):
            message = "log archive no index lists (an interrupted log compaction)"
        else:
            try:
                same = (
                    log.read(int(name[:20])).model_dump()
                    == CommitRecord.model_validate_json(path.read_bytes()).model_dump()
                )
            except (CorruptStoreError, ValueError, OSError):
                same = False
            message = (
                "record file left by log compaction (the record is archived)"
                if same
                else "record file at an archived seq that is not the archived record (a stale writer's "
                "attempt, not part of the history)"
            )
        report.add("warning", path, message, repairable=True)
    if repair and names:
        removed = remove_leftovers(log)
        if removed is None:
            report.add("warning", log.dir, "log compaction is running: leftovers not deleted this time")
        else:
            report.repaired.extend(f"deleted {log.dir / n}" for n in removed)


def _segment_problems(store: EpisodeStore, info: SegmentInfo, *, deep: bool) -> list[str]:
    """Layout problems of a live segment (always) and, when ``deep``, of its data against the record."""
    seg_dir = store.root / info.path
    try:
        layouts, problems = check_segment(store.root, info, store.features, root_real=store.root_real)
    except OSError as exc:
        return [f"{exc.filename or seg_dir}: cannot read ({exc.strerror})"]
    found = [p.message if p.path == str(seg_dir) else str(p) for p in problems]
    if found or not deep:
        return found
    for name, layout in layouts.items():
        try:
            _values, checksum = decode_checked(layout)
        except CorruptStoreError as exc:
            found.append(str(exc))
            continue
        if checksum != info.checksums[name]:
            if layout.missing:
                found.append(
                    f"{min(layout.missing)}: chunk file is missing; its fill values are not the committed data"
                )
            else:
                found.append(f"{seg_dir / name}: checksum mismatch against commit record")
    return found


def _checkpoint_matches(ckpt: Checkpoint, episodes: dict[int, EpisodeEntry], next_episode_id: int) -> bool:
    return ckpt.next_episode_id == next_episode_id and {e.episode_id: e for e in ckpt.episodes} == episodes
