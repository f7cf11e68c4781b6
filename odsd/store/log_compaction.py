"""Log compaction: pack old commit records into archives, so the log's file count stays bounded.

Every commit adds a record file ``_log/<seq>.json``; a daemon committing every 2 s would add
43 000 a day. A pass packs the record files older than the newest ``keep_records`` into one
archive (:mod:`odsd.store.log_archive`) once at least ``min_records`` of them are due, merges
archives while there are more than ``max_archives``, publishes the new archive index and only
then deletes the files it replaced::

    result = compact_log(store.log, keep_records=256, min_records=256, max_archives=8)
    result.archived, result.archives        # records packed this pass, archives now

Passes are serialized by a kernel lock (``_log/.archive.lock``); a pass that finds it held does
nothing (``busy``). A pass killed at any moment loses nothing: until the index is replaced the
new archive is an unlisted file, afterwards the replaced files are leftovers at archived seqs;
the next pass (or ``odsd store fsck --repair``) deletes either. See docs/store.md, "Log compaction".
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from odsd.schema.store import LogArchive, LogArchiveIndex
from odsd.store.errors import CorruptStoreError
from odsd.store.fsio import fsync_dir, temp_path, write_atomic
from odsd.store.log_archive import ARCHIVE_INDEX, ARCHIVE_RE, ArchiveView, archive_name
from odsd.store.log_codec import canonical, decode_document, encode_document

if TYPE_CHECKING:
    from odsd.store.log import CommitLog

DEFAULT_KEEP_RECORDS = 256
DEFAULT_MIN_RECORDS = 256
DEFAULT_MAX_ARCHIVES = 8
LOCK_NAME = ".archive.lock"
_COPY_BYTES = 1 << 20
_RECORD_RE = re.compile(r"^(\d{20})\.json$")


@dataclass(frozen=True)
class LogCompactionResult:
    """What one pass did."""

    archived: int = 0
    """Records packed into a new archive."""
    merged: int = 0
    """Merges of two archives into one."""
    deleted: int = 0
    """Files deleted: record files now archived, replaced archives, leftovers of earlier passes."""
    archives: int = 0
    """Archives after the pass."""
    through: int = -1
    """The archives hold records ``0..through``."""
    busy: bool = False
    """Another process was compacting the log; this pass did nothing."""


def compact_log(
    log: CommitLog,
    *,
    keep_records: int = DEFAULT_KEEP_RECORDS,
    min_records: int = DEFAULT_MIN_RECORDS,
    max_archives: int = DEFAULT_MAX_ARCHIVES,
) -> LogCompactionResult:
    """One pass (see the module docstring); ``keep_records ≥ 1`` (the newest record stays a file)."""
    if keep_records < 1 or min_records < 1 or max_archives < 1:
        raise ValueError("keep_records, min_records and max_archives must be at least 1")
    with _exclusive(log.dir / LOCK_NAME) as held:
        if not held:
            view = log.archives()
            return LogCompactionResult(archives=len(view.archives), through=view.through, busy=True)
        return _compact(log, keep_records, min_records, max_archives)


def leftovers(view: ArchiveView, names: list[str]) -> list[str]:
    """Names in ``_log/`` that are no part of the log as ``view`` describes it.

    Record files at archived seqs (a pass killed before deleting them, or a stale writer's
    record, see :meth:`CommitLog.publish`) and archives no index lists (a pass killed before
    publishing its index, or one whose index replaced them).
    """
    listed = {a.name for a in view.archives}
    out = [n for n in names if (m := _RECORD_RE.match(n)) and int(m.group(1)) <= view.through]
    return out + [n for n in names if ARCHIVE_RE.match(n) and n not in listed]


def remove_leftovers(log: CommitLog) -> list[str] | None:
    """Delete :func:`leftovers` under the pass lock; None when a pass holds it (nothing deleted)."""
    with _exclusive(log.dir / LOCK_NAME) as held:
        if not held:
            return None
        names = leftovers(log.archives(), os.listdir(log.dir))
        _unlink(log, names)
        return names


def archivable(log: CommitLog, watermark: int, *, keep_records: int, min_records: int) -> bool:
    """Whether a pass at ``watermark`` would pack anything (cheap: one look at the index)."""
    return watermark - keep_records - log.archives().through >= min_records


def _compact(log: CommitLog, keep: int, minimum: int, max_archives: int) -> LogCompactionResult:
    view = log.archives()
    names = os.listdir(log.dir)
    listed = {a.name for a in view.archives}
    record_seqs = sorted(
        int(n[:20]) for n in names if len(n) == 25 and n.endswith(".json") and n[:20].isdigit()
    )
    # Leftovers: record files at archived seqs (a pass killed before deleting them, or a stale
    # writer's) and archives no index lists (a pass killed before publishing its index).
    garbage = [log.path(s).name for s in record_seqs if s <= view.through]
    garbage += [n for n in names if ARCHIVE_RE.match(n) and n not in listed]
    deleted = _unlink(log, garbage)  # first: a new archive may get the name of an unlisted one

    top = view.through
    for seq in record_seqs:
        if seq == top + 1:
            top = seq
        elif seq > top + 1:
            break
    cutoff = top - keep
    archives = list(view.archives)
    written: list[str] = []
    archived = 0
    if cutoff - view.through >= minimum:
        archive = _pack(log, view.through + 1, cutoff)
        archives.append(archive)
        written.append(archive.name)
        archived = cutoff - view.through
    merged = 0
    while len(archives) > max_archives:
        # The adjacent pair of least bytes (the newest on a tie): old, large archives are rewritten
        # rarely, and each merge reads and writes at most those two files.
        i = min(range(len(archives) - 1), key=lambda k: (archives[k].nbytes + archives[k + 1].nbytes, -k))
        joined = _merge(log, archives[i], archives[i + 1])
        archives[i : i + 2] = [joined]
        written.append(joined.name)
        merged += 1
    if archives != view.archives:
        index = LogArchiveIndex(through=archives[-1].last, archives=archives)
        write_atomic(log.dir / ARCHIVE_INDEX, encode_document(index), durable=log.durable)
    # Only now, with the index durable, are the files it replaced deleted.
    kept = {a.name for a in archives}
    replaced = [a.name for a in view.archives if a.name not in kept]
    replaced += [n for n in written if n not in kept]  # an archive merged again in the same pass
    if archived:
        replaced += [log.path(s).name for s in range(view.through + 1, cutoff + 1)]
    deleted += _unlink(log, replaced)
    final = log.archives()
    return LogCompactionResult(archived, merged, deleted, len(final.archives), final.through)


def _unlink(log: CommitLog, names: list[str]) -> int:
    deleted = 0
    for name in names:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(log.dir / name)
            deleted += 1
    if deleted and log.durable:
        fsync_dir(log.dir)
    return deleted


def _pack(log: CommitLog, first: int, last: int) -> LogArchive:
    """Write the record files ``first..last`` (each verified) into a new archive; return its entry."""
    final = log.dir / archive_name(first, last)
    digest = hashlib.sha256()
    nbytes = 0
    with _written(final, durable=log.durable) as out:
        for seq in range(first, last + 1):
            path = log.path(seq)
            try:
                data = path.read_bytes()
            except FileNotFoundError as exc:
                raise CorruptStoreError(f"{path}: commit record is missing") from exc
            body = decode_document(path, data)
            if body.get("seq") != seq:
                raise CorruptStoreError(f"{path}: record says seq {body.get('seq')}, file name says {seq}")
            line = canonical(body) + b"\n"
            out.write(line)
            digest.update(line)
            nbytes += len(line)
    return LogArchive(name=final.name, first=first, last=last, nbytes=nbytes, sha256=digest.hexdigest())


def _merge(log: CommitLog, a: LogArchive, b: LogArchive) -> LogArchive:
    """Concatenate two adjacent archives, checking each against its index entry while copying."""
    final = log.dir / archive_name(a.first, b.last)
    total = hashlib.sha256()
    nbytes = 0
    with _written(final, durable=log.durable) as out:
        for part in (a, b):
            path = log.dir / part.name
            own = hashlib.sha256()
            size = 0
            with open(path, "rb") as src:
                while chunk := src.read(_COPY_BYTES):
                    own.update(chunk)
                    total.update(chunk)
                    out.write(chunk)
                    size += len(chunk)
            if size != part.nbytes or own.hexdigest() != part.sha256:
                raise CorruptStoreError(f"{path}: damaged log archive (checksum mismatch); not merged")
            nbytes += size
    return LogArchive(name=final.name, first=a.first, last=b.last, nbytes=nbytes, sha256=total.hexdigest())


@contextlib.contextmanager
def _written(final: Path, *, durable: bool) -> Iterator:
    """A file written under a temporary name, synced and renamed to ``final`` (removed on error)."""
    tmp = temp_path(final)
    try:
        with open(tmp, "wb") as out:
            yield out
            if durable:
                out.flush()
                os.fsync(out.fileno())
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(final.parent)


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[bool]:
    """Hold ``flock`` on ``path`` without waiting; yields whether it was taken."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)
