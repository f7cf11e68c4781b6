"""Packed commit records: ``_log/_archive.<first>-<last>.jsonl`` files and their index.

Log compaction (:mod:`odsd.store.log_compaction`) packs old records into archives so that the
log's file count does not grow with the number of commits. An archive holds one encoded record
per line (exactly what the record's own file held: canonical JSON with its embedded sha256), for
consecutive seqs ``first..last``; ``_log/_archives.json`` (:class:`~odsd.schema.store.LogArchiveIndex`,
replaced atomically, checksummed like a record) lists the archives, which cover ``0..through``
without gap. Readers read seqs ``≤ through`` from the archives, later ones from their files::

    view = load_view(log_dir)                    # the index now (empty if there is none)
    for record in view.records(first, last):     # verified: line checksums, seqs, file size
        ...
"""

from __future__ import annotations

import bisect
import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from odsd.schema import CommitRecord
from odsd.schema.store import LogArchive, LogArchiveIndex
from odsd.store.errors import CorruptStoreError
from odsd.store.log_codec import decode_document

ARCHIVE_INDEX = "_archives.json"
ARCHIVE_RE = re.compile(r"^_archive\.(\d{20})-(\d{20})\.jsonl$")


def archive_name(first: int, last: int) -> str:
    return f"_archive.{first:020d}-{last:020d}.jsonl"


class ArchiveGone(Exception):
    """An archive listed by an index read earlier no longer exists (merged away meanwhile, or lost)."""

    def __init__(self, path: Path, archive: LogArchive) -> None:
        super().__init__(
            f"{path}: log archive is missing (the index lists it for records {archive.first}..{archive.last})"
        )


@dataclass(frozen=True)
class ArchiveView:
    """The archive index as read at one moment; ``identity`` tells a later read whether it changed."""

    log_dir: Path
    index: LogArchiveIndex = field(default_factory=lambda: LogArchiveIndex(through=-1, archives=[]))
    identity: tuple[int, int, int] | None = None
    """(inode, mtime ns, size) of the index file; None when there is no index."""

    @property
    def through(self) -> int:
        return self.index.through

    @property
    def archives(self) -> list[LogArchive]:
        return self.index.archives

    def path(self, archive: LogArchive) -> Path:
        return self.log_dir / archive.name

    def archive_for(self, seq: int) -> LogArchive | None:
        if not 0 <= seq <= self.through:
            return None
        firsts = [a.first for a in self.archives]
        return self.archives[bisect.bisect_right(firsts, seq) - 1]

    def records(self, first: int, last: int) -> Iterator[CommitRecord]:
        """The archived records ``first..last`` (all ``≤ through``), in order, each verified.

        Raises :class:`CorruptStoreError` naming the archive for a damaged line, a wrong seq, a
        wrong size or a truncated file, and :class:`ArchiveGone` for an archive that is no more.
        """
        if first > last:
            return
        if last > self.through or first < 0:
            raise ValueError(f"records {first}..{last} are not all archived (through {self.through})")
        archive = self.archive_for(first)
        assert archive is not None
        i = self.archives.index(archive)
        for archive in self.archives[i:]:
            if archive.first > last:
                break
            yield from read_archive(
                self.path(archive), archive, max(first, archive.first), min(last, archive.last)
            )


def read_archive(path: Path, archive: LogArchive, first: int, last: int) -> Iterator[CommitRecord]:
    """Records ``first..last`` of one archive; the whole file's sha256 is checked when it is read whole."""
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below; a generator holds it across yields
    except FileNotFoundError as exc:
        raise ArchiveGone(path, archive) from exc
    with fh:
        size = os.fstat(fh.fileno()).st_size
        if size != archive.nbytes:
            raise CorruptStoreError(
                f"{path}: damaged log archive ({size} bytes, the archive index says {archive.nbytes})"
            )
        whole = first == archive.first and last == archive.last
        digest = hashlib.sha256() if whole else None
        seq = archive.first
        for line in fh:
            if digest is not None:
                digest.update(line)
            if seq > last:
                break
            if seq >= first:
                yield decode_archived(path, line, seq)
            seq += 1
        if seq <= last:
            raise CorruptStoreError(
                f"{path}: damaged log archive (it ends before record {seq}; the index says it holds "
                f"{archive.first}..{archive.last})"
            )
        if digest is not None and digest.hexdigest() != archive.sha256:
            raise CorruptStoreError(f"{path}: damaged log archive (checksum mismatch)")


def decode_archived(path: Path, line: bytes, seq: int) -> CommitRecord:
    body = decode_document(path, line, f"archived record {seq}")
    try:
        record = CommitRecord.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise CorruptStoreError(
            f"{path}: invalid archived record {seq} ({first['loc']}: {first['msg']})"
        ) from exc
    if record.seq != seq:
        raise CorruptStoreError(f"{path}: line of record {seq} holds record {record.seq}")
    return record


def load_view(log_dir: Path, previous: ArchiveView | None = None) -> ArchiveView:
    """The index now: ``previous`` itself when the file did not change, an empty view without one."""
    path = log_dir / ARCHIVE_INDEX
    try:
        fh = open(path, "rb")  # noqa: SIM115
    except FileNotFoundError:
        if previous is not None and previous.identity is None:
            return previous
        return ArchiveView(log_dir)
    except IsADirectoryError as exc:
        raise CorruptStoreError(f"{path}: archive index is a directory") from exc
    with fh:
        st = os.fstat(fh.fileno())
        identity = (st.st_ino, st.st_mtime_ns, st.st_size)
        if previous is not None and previous.identity == identity:
            return previous
        data = fh.read()
    body = decode_document(path, data, "archive index")
    try:
        index = LogArchiveIndex.model_validate(body)
    except ValidationError as exc:
        raise CorruptStoreError(f"{path}: invalid archive index ({exc.errors()[0]['msg']})") from exc
    if previous is not None and index.through < previous.through:
        raise CorruptStoreError(
            f"{path}: archive index went back from record {previous.through} to {index.through}"
        )
    return ArchiveView(log_dir, index, identity)
