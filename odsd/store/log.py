"""The commit log: numbered JSON records published with put-if-absent, plus checkpoints.

Record ``<seq>`` exists for every seq from 0 up to the watermark: as the file
``_log/<seq>.json``, or, once log compaction packed it, as a line of an archive
(:mod:`odsd.store.log_archive`; the archives cover ``0..through``). A record is written in full
under a temporary name and hard-linked into place, so concurrent writers are ordered by whoever
links ``<seq>`` first; the loser re-reads the log and retries at the next number.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from odsd.schema import Checkpoint, CommitRecord
from odsd.store.errors import CorruptStoreError, StoreError
from odsd.store.fsio import fsync_dir, put_if_absent, write_atomic
from odsd.store.log_archive import ARCHIVE_INDEX, ARCHIVE_RE, ArchiveGone, ArchiveView, load_view
from odsd.store.log_codec import decode_document as _decode
from odsd.store.log_codec import encode_document

__all__ = ["LOG_DIR", "CommitLog", "TornRecord", "checkpoint_name", "encode_document", "record_name"]

log = logging.getLogger("odsd.store")

LOG_DIR = "_log"
QUARANTINE_DIR = "_quarantine"
_RECORD_RE = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT_RE = re.compile(r"^_checkpoint\.(\d{20})\.json$")


def record_name(seq: int) -> str:
    return f"{seq:020d}.json"


def checkpoint_name(seq: int) -> str:
    return f"_checkpoint.{seq:020d}.json"


@dataclass(frozen=True)
class TornRecord:
    """A damaged record with no valid record after it: not yet part of the store's history."""

    seq: int
    path: Path
    problem: str


class CommitLog:
    """Read and publish the records under ``<store>/_log`` (files and archives alike)."""

    def __init__(self, root: Path, *, durable: bool = True) -> None:
        self.dir = root / LOG_DIR
        self.durable = durable
        self._view: ArchiveView | None = None
        self.stale_publications = 0
        """Records this handle linked at a seq already archived, and took back (see :meth:`publish`)."""

    def path(self, seq: int) -> Path:
        """The file of record ``seq`` (which may be archived instead: see :meth:`where`)."""
        return self.dir / record_name(seq)

    def where(self, seq: int) -> Path:
        """The file that holds record ``seq`` as last seen: its archive, or its own file."""
        view = self._view
        archive = view.archive_for(seq) if view is not None else None
        return view.path(archive) if view is not None and archive is not None else self.path(seq)

    def archives(self) -> ArchiveView:
        """The archive index now (re-read only when the file changed)."""
        self._view = load_view(self.dir, self._view)
        return self._view

    def exists(self, seq: int) -> bool:
        # The file first, then the index: an archiver publishes the index before it deletes files.
        return self.path(seq).exists() or seq <= self.archives().through

    def read(self, seq: int) -> CommitRecord:
        view = self.archives()
        if seq <= view.through:
            return self._read_archived(seq, view)
        try:
            record = self._read_file(seq)
        except CorruptStoreError:
            if seq > self.archives().through:
                raise
            return self._read_archived(seq, self.archives())  # archived (and deleted) meanwhile
        if seq <= self.archives().through:
            return self._read_archived(seq, self.archives())  # the archive is the history
        return record

    def _read_archived(self, seq: int, view: ArchiveView) -> CommitRecord:
        for _ in range(100):
            try:
                return next(view.records(seq, seq))
            except ArchiveGone:
                newer = self.archives()
                if newer is view:
                    break
                view = newer
        archive = view.archive_for(seq)
        assert archive is not None
        raise CorruptStoreError(str(ArchiveGone(view.path(archive), archive)))

    def _read_file(self, seq: int) -> CommitRecord:
        path = self.path(seq)
        try:
            data = path.read_bytes()
        except FileNotFoundError as exc:
            raise CorruptStoreError(f"{path}: commit record is missing") from exc
        except IsADirectoryError as exc:
            raise CorruptStoreError(f"{path}: commit record is a directory") from exc
        except OSError as exc:
            raise StoreError(f"{path}: cannot read commit record ({exc.strerror})") from exc
        body = _decode(path, data)
        try:
            record = CommitRecord.model_validate(body)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise CorruptStoreError(f"{path}: invalid record ({first['loc']}: {first['msg']})") from exc
        if record.seq != seq:
            raise CorruptStoreError(f"{path}: record says seq {record.seq}, file name says {seq}")
        return record

    def read_tail(
        self, after: int, *, until: int | None = None
    ) -> tuple[list[CommitRecord], TornRecord | None]:
        """Records ``after+1 ..`` while they exist (up to ``until``), and a torn trailing record if any.

        A damaged record followed by a present record is corruption of history and raises.
        Archived records come from their archive. Records read from files are kept only if the
        archive index, read again afterwards, does not cover them (else they are read again from
        the archive): a file at an archived seq may be a stale writer's, never the history.
        """
        for _ in range(100):
            view = self.archives()
            try:
                records, torn, files_from = self._read_tail(view, after, until)
            except (CorruptStoreError, ArchiveGone) as exc:
                if self.archives() is not view:
                    continue  # archived or merged while reading: read again
                if isinstance(exc, ArchiveGone):
                    raise CorruptStoreError(str(exc)) from exc
                raise
            if files_from is not None and self.archives() is not view and self._view.through >= files_from:
                continue
            return records, torn
        raise StoreError(f"{self.dir}: the log archives kept changing while reading")  # pragma: no cover

    def _read_tail(
        self, view: ArchiveView, after: int, until: int | None
    ) -> tuple[list[CommitRecord], TornRecord | None, int | None]:
        records: list[CommitRecord] = []
        seq = after + 1
        if seq <= view.through:
            stop = view.through if until is None else min(until, view.through)
            records.extend(view.records(seq, stop))
            seq = stop + 1
        if until is not None and seq > until:
            return records, None, None
        files_from = seq
        while (until is None or seq <= until) and self.path(seq).exists():
            try:
                records.append(self._read_file(seq))
            except CorruptStoreError as exc:
                if self.path(seq + 1).exists():
                    raise
                return records, TornRecord(seq, self.path(seq), str(exc)), files_from
            seq += 1
        if until is None or seq <= until:
            # A hole in the history (a later record exists, this one does not) is corruption:
            # stopping here would hide the later records and let the next writer fill the hole.
            # Records are only published at watermark + 1, so once seq + 1 exists, seq must exist
            # too (re-checked after seeing seq + 1, in case both were published in between).
            if self.path(seq + 1).exists() and not self.path(seq).exists():
                raise CorruptStoreError(
                    f"{self.path(seq)}: commit record is missing but record {seq + 1} exists"
                )
            if seq == files_from == view.through + 1:
                self._check_no_gap(seq, view)
        return records, None, files_from

    def _check_no_gap(self, seq: int, view: ArchiveView) -> None:
        """Record ``seq`` is neither archived nor a file: no later record file may exist either.

        Checked where reading starts right after the archives (or at 0), which is where a lost
        archive index (or lost first records) would otherwise read as a shorter history.
        """
        names = self._names()
        later = [int(m.group(1)) for n in names if (m := _RECORD_RE.match(n)) and int(m.group(1)) > seq]
        if view.identity is None and any(ARCHIVE_RE.match(n) for n in names):
            upto = min(later) - 1 if later else "the newest"
            raise CorruptStoreError(
                f"{self.dir / ARCHIVE_INDEX}: log archive index is missing; records {seq}..{upto} "
                "are in archives nothing lists"
            )
        if not later:
            return
        raise CorruptStoreError(f"{self.path(seq)}: commit record is missing but record {min(later)} exists")

    def publish(self, record: CommitRecord) -> bool:
        """Put ``record`` at its seq if that number is free; False when another writer took it.

        A writer that read the log before log compaction archived ``record.seq`` and deleted its
        file (a stale writer) finds the name free and links it: after linking, a covering archive
        is looked for, and if one holds another record at this seq, the link is taken back and
        False returned, so the writer re-reads the log and retries at the next seq. The archiver
        publishes the index before deleting any file, so an archive covering the seq is visible
        whenever its file could be missing (docs/store.md, "Log compaction").
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.path(record.seq)
        data = encode_document(record)
        if not put_if_absent(path, data, durable=self.durable):
            return False
        view = self.archives()
        if record.seq > view.through:
            return True
        archived = self._read_archived(record.seq, view)
        if (archived.writer_id, archived.writer_seq) == (record.writer_id, record.writer_seq):
            return True  # this very record was linked, then archived
        self.stale_publications += 1
        with contextlib.suppress(FileNotFoundError):
            if path.read_bytes() == data:
                os.unlink(path)
                if self.durable:
                    fsync_dir(self.dir)
        log.info("%s: seq %d was archived after this writer read the log; retrying", path, record.seq)
        return False

    def _names(self) -> list[str]:
        try:
            return os.listdir(self.dir)
        except FileNotFoundError as exc:
            raise CorruptStoreError(f"{self.dir}: commit log directory is missing") from exc
        except NotADirectoryError as exc:
            raise CorruptStoreError(f"{self.dir}: commit log is not a directory") from exc

    def record_seqs(self) -> list[int]:
        """Seqs of the record *files* (archived records are not among them)."""
        return sorted(int(m.group(1)) for name in self._names() if (m := _RECORD_RE.match(name)))

    def checkpoint_seqs(self) -> list[int]:
        return sorted(int(m.group(1)) for name in self._names() if (m := _CHECKPOINT_RE.match(name)))

    def write_checkpoint(self, checkpoint: Checkpoint) -> None:
        write_atomic(
            self.dir / checkpoint_name(checkpoint.seq), encode_document(checkpoint), durable=self.durable
        )

    def read_checkpoint(self, seq: int) -> Checkpoint:
        path = self.dir / checkpoint_name(seq)
        body = _decode(path, path.read_bytes(), "checkpoint")
        try:
            return Checkpoint.model_validate(body)
        except ValidationError as exc:
            raise CorruptStoreError(f"{path}: invalid checkpoint ({exc.errors()[0]['msg']})") from exc

    def newest_checkpoint(self, *, at_most: int | None = None) -> Checkpoint | None:
        """The newest readable checkpoint (≤ ``at_most``); damaged ones are skipped (records remain)."""
        for seq in reversed(self.checkpoint_seqs()):
            if at_most is not None and seq > at_most:
                continue
            try:
                return self.read_checkpoint(seq)
            except (CorruptStoreError, OSError):
                continue
        return None

    def quarantine(self, torn: TornRecord) -> Path | None:
        """Move a damaged trailing record to ``_log/_quarantine/``; None if it is no longer one.

        Writers do this to commit past a torn tail, and ``fsck --repair`` does it too, so the
        move is serialized by a kernel lock on ``_log/.quarantine.lock`` and re-checked under it:
        while the damaged file exists nobody can publish at its seq (put-if-absent fails) and
        only a holder of this lock removes it, so the file moved is the damaged one, never a
        valid record another writer published after an earlier quarantine.
        """
        with self._quarantine_lock():
            if not torn.path.exists() or self.exists(torn.seq + 1):
                return None
            try:
                self.read(torn.seq)
            except CorruptStoreError:
                pass
            else:
                return None
            qdir = self.dir / QUARANTINE_DIR
            qdir.mkdir(exist_ok=True)
            target = qdir / torn.path.name
            if target.exists():
                target = qdir / f"{torn.path.name}.{time.time_ns()}"
            os.rename(torn.path, target)
            if self.durable:
                fsync_dir(qdir)
                fsync_dir(self.dir)
            return target

    def quarantined(self) -> list[Path]:
        qdir = self.dir / QUARANTINE_DIR
        return sorted(qdir.iterdir()) if qdir.is_dir() else []

    @contextlib.contextmanager
    def _quarantine_lock(self) -> Iterator[None]:
        fd = os.open(self.dir / ".quarantine.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)
