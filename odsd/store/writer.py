"""``EpisodeWriter``: commit batches of complete episodes atomically."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from odsd.errors import ConfigError, as_storage_error
from odsd.gcpause import gc_paused
from odsd.schema import AddAction, CommitContext, CommitRecord, EpisodeEntry, EpisodeMeta, RemoveAction
from odsd.schema.names import name_problem
from odsd.store.errors import CommitConflictError, CorruptStoreError
from odsd.store.segments import remove_tree, validate_frames, write_segment
from odsd.store.state import StoreState

if TYPE_CHECKING:
    from odsd.store.episode_store import EpisodeStore

log = logging.getLogger("odsd.store")


@dataclass
class Episode:
    """One complete episode: per-field frame arrays ``[length, *shape]`` and its metadata."""

    frames: Mapping[str, np.ndarray]
    meta: EpisodeMeta


@dataclass
class EpisodeBatch:
    """Several complete episodes with their frames concatenated per field, episode after episode.

    The fast path for producers that already hold frames contiguously (the collector copies all
    rows that finish in one step out at once): no per-episode, per-field Python work.
    """

    frames: Mapping[str, np.ndarray]
    metas: list[EpisodeMeta]

    @property
    def num_episodes(self) -> int:
        return len(self.metas)

    @property
    def num_frames(self) -> int:
        return sum(m.length for m in self.metas)

    def offsets(self) -> list[int]:
        out = [0]
        for meta in self.metas:
            out.append(out[-1] + meta.length)
        return out[:-1]

    @classmethod
    def from_episodes(cls, episodes: Sequence[Episode]) -> EpisodeBatch:
        fields = episodes[0].frames.keys() if episodes else ()
        frames = {
            name: np.concatenate([np.asarray(ep.frames[name]) for ep in episodes])
            if len(episodes) > 1
            else np.asarray(episodes[0].frames[name])
            for name in fields
        }
        return cls(frames=frames, metas=[ep.meta for ep in episodes])

    @classmethod
    def concat(cls, parts: Sequence[EpisodeBatch | Episode]) -> EpisodeBatch:
        batches = [p if isinstance(p, EpisodeBatch) else EpisodeBatch.from_episodes([p]) for p in parts]
        if len(batches) == 1:
            return batches[0]
        fields = batches[0].frames.keys()
        return cls(
            frames={name: np.concatenate([b.frames[name] for b in batches]) for name in fields},
            metas=[m for b in batches for m in b.metas],
        )


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
        problem = name_problem(self.writer_id)
        if problem:  # it names the writer's directory, segments/<writer_id>/
            raise ConfigError(f"writer id {self.writer_id!r} {problem}")
        self.run_id = run_id
        self.next_writer_seq = store.refresh().writer_seqs.get(self.writer_id, -1) + 1

    def commit(
        self,
        episodes: Sequence[Episode] | EpisodeBatch,
        *,
        context: CommitContext | None = None,
        writer_seq: int | None = None,
    ) -> CommitResult:
        """Write ``episodes`` into a new segment and publish them with one commit record.

        Returns once the record is durable (per the store's durability). Passing the
        ``writer_seq`` of a commit that is already in the log publishes nothing.
        """
        with gc_paused():
            try:
                return self._commit(episodes, context=context, writer_seq=writer_seq)
            except OSError as exc:
                storage = as_storage_error(exc)
                if storage is None:
                    raise
                raise storage from exc

    def _commit(
        self,
        episodes: Sequence[Episode] | EpisodeBatch,
        *,
        context: CommitContext | None,
        writer_seq: int | None,
    ) -> CommitResult:
        batch = episodes if isinstance(episodes, EpisodeBatch) else self._as_batch(episodes)
        if not batch.metas:
            raise ValueError("commit needs at least one episode")
        wseq = self.next_writer_seq if writer_seq is None else writer_seq
        if self.store.refresh().is_duplicate(self.writer_id, wseq):
            return CommitResult(seq=None, duplicate=True)
        features = self.store.features
        frames = validate_frames(
            batch.frames, features, batch.num_frames, f"commit of {batch.num_episodes} episodes"
        )
        offsets = batch.offsets()
        metas = batch.metas
        rel_path = f"segments/{self.writer_id}/{wseq:012d}-{uuid.uuid4().hex[:6]}"
        info = write_segment(self.store.root, rel_path, frames, features, durable=self.store.durable)

        def build(state: StoreState, seq: int) -> CommitRecord | None:
            if state.is_duplicate(self.writer_id, wseq):
                return None
            first = state.next_episode_id
            # The metas were validated when built; skip re-validating hundreds of them per commit.
            entries = [
                EpisodeEntry.model_construct(
                    episode_id=first + i,
                    segment=info.path,
                    offset=offsets[i],
                    commit_seq=seq,
                    meta=_stamp(meta, self.writer_id, self.run_id),
                )
                for i, meta in enumerate(metas)
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

        attempted: list[int] = []
        try:
            record = publish(self.store, build, attempted=attempted)
        except BaseException as exc:
            linked = self._linked(attempted, wseq)
            if linked is None:
                remove_tree(self.store.root / info.path)
                raise
            if not isinstance(exc, OSError):
                raise
            # The record is in the log: the commit happened, only what follows it (a checkpoint,
            # a directory sync) failed. Reporting it as failed would undercount what is committed.
            log.warning(
                "%s: commit %d is published, but finishing it failed: %s", self.store.root, linked.seq, exc
            )
            record = linked
        self.next_writer_seq = max(self.next_writer_seq, wseq + 1)
        if record is None:
            remove_tree(self.store.root / info.path)
            return CommitResult(seq=None, duplicate=True)
        return CommitResult(
            seq=record.seq, episode_ids=[e.episode_id for e in record.adds[0].episodes], segment=info.path
        )

    def _as_batch(self, episodes: Sequence[Episode]) -> EpisodeBatch:
        """Validate each episode on its own (errors name the episode), then concatenate."""
        features = self.store.features
        checked = [
            Episode(
                frames=validate_frames(ep.frames, features, ep.meta.length, f"episode {i} of commit"),
                meta=ep.meta,
            )
            for i, ep in enumerate(episodes)
        ]
        return EpisodeBatch.from_episodes(checked) if checked else EpisodeBatch(frames={}, metas=[])

    def _linked(self, attempted: list[int], writer_seq: int) -> CommitRecord | None:
        """The record of this commit if one of the seqs it tried holds it (linked just before an error)."""
        for seq in attempted:
            try:
                record = self.store.log.read(seq)
            except (CorruptStoreError, OSError):
                continue
            if record.writer_id == self.writer_id and record.writer_seq == writer_seq:
                return record
        return None

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
    store: EpisodeStore,
    build: Callable[[StoreState, int], CommitRecord | None],
    *,
    attempted: list[int] | None = None,
) -> CommitRecord | None:
    """Publish the record ``build(state, seq)`` at the log's next seq, retrying after lost races.

    ``build`` sees the state the record will follow; it returns None to publish nothing (a
    duplicate) or raises :class:`CommitConflictError` when the commit no longer applies.
    Each seq tried is appended to ``attempted`` (so a caller can tell after an error whether
    its record was linked).
    """
    while True:
        with store._lock:
            state = store.refresh()
            torn = store.torn_record
            if torn is not None:
                # A damaged record with no valid record after it is not part of the history
                # (readers stop before it): set it aside, as fsck --repair would, and commit at
                # its seq, so one bad byte does not stop production.
                target = store.log.quarantine(torn)
                if target is not None:
                    log.warning(
                        "%s: damaged trailing commit record moved to %s (%s)", torn.path, target, torn.problem
                    )
                continue
            seq = state.seq + 1
            record = build(state, seq)
            if record is None:
                return None
            if attempted is not None:
                attempted.append(seq)
            if store.log.publish(record):
                state.apply(record, str(store.log.path(seq)))
                store.maybe_checkpoint(state)
                return record
