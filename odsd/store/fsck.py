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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from odsd.schema import Checkpoint, EpisodeEntry, SegmentInfo
from odsd.store.episode_store import EpisodeStore
from odsd.store.errors import CorruptStoreError
from odsd.store.fsio import PARTIAL_SUFFIX
from odsd.store.layout import check_segment, decode_checked
from odsd.store.log import LOG_DIR, TornRecord, checkpoint_name
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
    seqs = log.record_seqs()
    checkpoint_seqs = log.checkpoint_seqs()
    # What each checkpoint must match, taken during the one replay of the log below.
    expected: dict[int, tuple[dict[int, EpisodeEntry], int]] = {}
    history_ok = True
    torn = None
    for i, seq in enumerate(seqs):
        if seq != i:
            report.add("error", log.path(i), f"commit record {i} is missing; records {seq}.. are unreachable")
            history_ok = False
            break
        try:
            record = log.read(seq)
            state.apply(record, str(log.path(seq)))
            if seq in checkpoint_seqs:
                expected[seq] = (dict(state.episodes), state.next_episode_id)
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
