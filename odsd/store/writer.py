"""``EpisodeWriter``: commit batches of complete episodes atomically."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from odsd.schema import AddAction, CommitContext, CommitRecord, EpisodeEntry, EpisodeMeta, RemoveAction
from odsd.store.errors import CommitConflictError, CorruptStoreError
from odsd.store.segments import remove_tree, validate_frames, write_segment
from odsd.store.state import StoreState

if TYPE_CHECKING:
    from odsd.store.episode_store import EpisodeStore


@dataclass
class Episode:
    """One complete episode: per-field frame arrays ``[length, *shape]`` and its metadata."""

    frames: Mapping[str, np.ndarray]
    meta: EpisodeMeta


@dataclass(frozen=True)
class CommitResult:
    """What a commit published: its seq and the ids given to the episodes (empty if a duplicate)."""

    seq: int | None
    episode_ids: list[int] = field(default_factory=list)
    duplicate: bool = False
    segment: str | None = None


def new_writer_id() -> str:
    return f"w-{uuid.uuid4().hex[:12]}"


class EpisodeWriter:
    """Commits batches of episodes into new segments, one commit record per batch.

    Each writer has an id and a monotonically increasing writer sequence; (writer_id,
    writer_seq) is the commit's idempotency key, so retransmitting a commit is a no-op.
    """

    def __init__(
        self, store: EpisodeStore, *, writer_id: str | None = None, run_id: str | None = None
    ) -> None:
        self.store = store
        self.writer_id = writer_id or new_writer_id()
        self.run_id = run_id
        self.next_writer_seq = store.refresh().writer_seqs.get(self.writer_id, -1) + 1

    def commit(
        self,
        episodes: Sequence[Episode],
        *,
        context: CommitContext | None = None,
        writer_seq: int | None = None,
    ) -> CommitResult:
        """Write ``episodes`` into a new segment and publish them with one commit record.

        Returns once the record is durable (per the store's durability). Passing the
        ``writer_seq`` of a commit that is already in the log publishes nothing.
        """
        if not episodes:
            raise ValueError("commit needs at least one episode")
        wseq = self.next_writer_seq if writer_seq is None else writer_seq
        if self.store.refresh().is_duplicate(self.writer_id, wseq):
            return CommitResult(seq=None, duplicate=True)
        features = self.store.features
        columns: dict[str, list[np.ndarray]] = {name: [] for name in features}
        offsets: list[int] = []
        offset = 0
        for i, episode in enumerate(episodes):
            length = episode.meta.length
            checked = validate_frames(episode.frames, features, length, f"episode {i} of commit")
            for name, values in checked.items():
                columns[name].append(values)
            offsets.append(offset)
            offset += length
        frames = {
            name: np.concatenate(parts) if len(parts) > 1 else parts[0] for name, parts in columns.items()
        }
        rel_path = f"segments/{self.writer_id}/{wseq:012d}-{uuid.uuid4().hex[:6]}"
        info = write_segment(self.store.root, rel_path, frames, features, durable=self.store.durable)

        def build(state: StoreState, seq: int) -> CommitRecord | None:
            if state.is_duplicate(self.writer_id, wseq):
                return None
            first = state.next_episode_id
            entries = [
                EpisodeEntry(
                    episode_id=first + i,
                    segment=info.path,
                    offset=offsets[i],
                    commit_seq=seq,
                    meta=_stamp(ep.meta, self.writer_id, self.run_id),
                )
                for i, ep in enumerate(episodes)
            ]
            return CommitRecord(
                seq=seq,
                kind="append",
                writer_id=self.writer_id,
                writer_seq=wseq,
                run_id=self.run_id,
                first_episode_id=first,
                adds=[AddAction(segment=info, episodes=entries)],
                context=context or CommitContext(),
            )

        try:
            record = publish(self.store, build)
        except BaseException:
            if not self._published(wseq):
                remove_tree(self.store.root / info.path)
            raise
        self.next_writer_seq = max(self.next_writer_seq, wseq + 1)
        if record is None:
            remove_tree(self.store.root / info.path)
            return CommitResult(seq=None, duplicate=True)
        return CommitResult(
            seq=record.seq, episode_ids=[e.episode_id for e in record.adds[0].episodes], segment=info.path
        )

    def _published(self, writer_seq: int) -> bool:
        """Whether a record with this writer's ``writer_seq`` is in the log (e.g. linked just before an error)."""
        log = self.store.log
        seq = max(log.record_seqs(), default=-1)
        while seq >= 0:
            try:
                record = log.read(seq)
            except Exception:
                return True  # cannot tell: keep the segment (fsck removes it later if unreferenced)
            if record.writer_id == self.writer_id and record.writer_seq == writer_seq:
                return True
            if record.writer_id == self.writer_id and record.writer_seq < writer_seq:
                return False
            seq -= 1
        return False

    def remove(self, episode_ids: Sequence[int], *, reason: str = "manual") -> CommitResult:
        """Publish a commit that removes live episodes from all later snapshots (files stay until vacuum)."""
        ids = sorted(set(episode_ids))
        wseq = self.next_writer_seq

        def build(state: StoreState, seq: int) -> CommitRecord | None:
            missing = [i for i in ids if i not in state.episodes]
            if missing:
                raise CommitConflictError(f"{self.store.root}: episodes {missing[:5]} are not live")
            return CommitRecord(
                seq=seq,
                kind="delete" if reason == "manual" else "retain",
                writer_id=self.writer_id,
                writer_seq=wseq,
                run_id=self.run_id,
                first_episode_id=state.next_episode_id,
                removes=[RemoveAction(episode_ids=ids, reason=reason)],  # type: ignore[arg-type]
            )

        record = publish(self.store, build)
        self.next_writer_seq = wseq + 1
        assert record is not None
        return CommitResult(seq=record.seq)


def _stamp(meta: EpisodeMeta, writer_id: str, run_id: str | None) -> EpisodeMeta:
    updates: dict[str, object] = {}
    if meta.writer_id is None:
        updates["writer_id"] = writer_id
    if meta.run_id is None and run_id is not None:
        updates["run_id"] = run_id
    return meta.model_copy(update=updates) if updates else meta


def publish(
    store: EpisodeStore, build: Callable[[StoreState, int], CommitRecord | None]
) -> CommitRecord | None:
    """Publish the record ``build(state, seq)`` at the log's next seq, retrying after lost races.

    ``build`` sees the state the record will follow; it returns None to publish nothing (a
    duplicate) or raises :class:`CommitConflictError` when the commit no longer applies.
    """
    while True:
        with store._lock:
            state = store.refresh()
            if store.torn_record is not None:
                raise CorruptStoreError(
                    f"{store.torn_record.path}: damaged trailing commit record blocks new commits "
                    "(run `odsd store fsck --repair`)"
                )
            seq = state.seq + 1
            record = build(state, seq)
            if record is None:
                return None
            if store.log.publish(record):
                state.apply(record, str(store.log.path(seq)))
                store.maybe_checkpoint(state)
                return record
