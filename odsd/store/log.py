"""The commit log: numbered JSON records published with put-if-absent, plus checkpoints.

Record ``_log/<seq>.json`` exists for every seq from 0 up to the watermark. A record is written
in full under a temporary name and hard-linked into place, so concurrent writers are ordered by
whoever links ``<seq>`` first; the loser re-reads the log and retries at the next number.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
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

LOG_DIR = "_log"
QUARANTINE_DIR = "_quarantine"
_RECORD_RE = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT_RE = re.compile(r"^_checkpoint\.(\d{20})\.json$")


def record_name(seq: int) -> str:
    return f"{seq:020d}.json"


def checkpoint_name(seq: int) -> str:
    return f"_checkpoint.{seq:020d}.json"


def _canonical(body: dict) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def encode_document(model: CommitRecord | Checkpoint) -> bytes:
    """Serialize with an embedded sha256 over the canonical body, so damage is detectable.

    The file is the canonical (sorted, compact) JSON itself, which keeps encoding on json's C
    encoder: an indented dump of a 256-episode record costs ~40 ms in pure Python.
    """
    body = model.model_dump(mode="json")
    body["checksum"] = ""
    body["checksum"] = hashlib.sha256(_canonical(body)).hexdigest()
    return _canonical(body) + b"\n"


def _decode(path: Path, data: bytes, what: str = "record") -> dict:
    try:
        body = json.loads(data)
    except ValueError as exc:  # JSONDecodeError, or UnicodeDecodeError for bytes that are not UTF-8
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
        raise CorruptStoreError(f"{path}: damaged {what} (not valid JSON: {reason})") from exc
    except RecursionError as exc:
        raise CorruptStoreError(f"{path}: damaged {what} (nested too deeply)") from exc
    if not isinstance(body, dict) or "checksum" not in body:
        raise CorruptStoreError(f"{path}: damaged {what} (no checksum field)")
    stored = body["checksum"]
    body["checksum"] = ""
    if hashlib.sha256(_canonical(body)).hexdigest() != stored:
        raise CorruptStoreError(f"{path}: damaged {what} (checksum mismatch)")
    body["checksum"] = stored
    return body


@dataclass(frozen=True)
class TornRecord:
    """A damaged record with no valid record after it: not yet part of the store's history."""

    seq: int
    path: Path
    problem: str


class CommitLog:
    """Read and publish the records under ``<store>/_log``."""

    def __init__(self, root: Path, *, durable: bool = True) -> None:
        self.dir = root / LOG_DIR
        self.durable = durable

    def path(self, seq: int) -> Path:
        return self.dir / record_name(seq)

    def exists(self, seq: int) -> bool:
        return self.path(seq).exists()

    def read(self, seq: int) -> CommitRecord:
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
        """
        records: list[CommitRecord] = []
        seq = after + 1
        while (until is None or seq <= until) and self.exists(seq):
            try:
                records.append(self.read(seq))
            except CorruptStoreError as exc:
                if self.exists(seq + 1):
                    raise
                return records, TornRecord(seq, self.path(seq), str(exc))
            seq += 1
        # A hole in the history (a later record exists, this one does not) is corruption: stopping
        # here would hide the later records and let the next writer fill the hole. Records are
        # only published at watermark + 1, so once seq + 1 exists, seq must exist too (re-checked
        # after seeing seq + 1, in case both were published in between).
        if (until is None or seq <= until) and self.exists(seq + 1) and not self.exists(seq):
            raise CorruptStoreError(f"{self.path(seq)}: commit record is missing but record {seq + 1} exists")
        return records, None

    def publish(self, record: CommitRecord) -> bool:
        """Put ``record`` at its seq if that number is free; False when another writer took it."""
        self.dir.mkdir(parents=True, exist_ok=True)
        return put_if_absent(self.path(record.seq), encode_document(record), durable=self.durable)

    def _names(self) -> list[str]:
        try:
            return os.listdir(self.dir)
        except FileNotFoundError as exc:
            raise CorruptStoreError(f"{self.dir}: commit log directory is missing") from exc
        except NotADirectoryError as exc:
            raise CorruptStoreError(f"{self.dir}: commit log is not a directory") from exc

    def record_seqs(self) -> list[int]:
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
