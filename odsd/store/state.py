"""The store's logical state: what the log says after applying records ``0..seq``."""

from __future__ import annotations

from dataclasses import dataclass, field

from odsd.schema import Checkpoint, CommitRecord, EpisodeEntry, SegmentInfo
from odsd.store.errors import CorruptStoreError


@dataclass
class StoreState:
    """Live episodes, every segment ever added and the idempotency keys, as of ``seq``.

    ``seq == -1`` is the empty store. Applying a record validates it against the state, so a
    record that removes an episode that is not live, or re-uses an id, is reported as corruption.

    An ``indexed=False`` state (what a writer that only appends needs) follows the log without the
    per-episode index: it keeps ``seq``, ``next_episode_id`` and ``writer_seqs`` (one entry per
    writer id, not per episode), so its memory does not grow with the store. It checks sequence
    and appended-id continuity only; it cannot be checkpointed or snapshotted.
    """

    seq: int = -1
    next_episode_id: int = 0
    episodes: dict[int, EpisodeEntry] = field(default_factory=dict)
    segments: dict[str, SegmentInfo] = field(default_factory=dict)
    segment_refs: dict[str, int] = field(default_factory=dict)
    dead_segments: dict[str, tuple[int, str]] = field(default_factory=dict)
    writer_seqs: dict[str, int] = field(default_factory=dict)
    indexed: bool = True

    @classmethod
    def from_checkpoint(cls, ckpt: Checkpoint) -> StoreState:
        state = cls(
            seq=ckpt.seq,
            next_episode_id=ckpt.next_episode_id,
            episodes={e.episode_id: e for e in ckpt.episodes},
            segments=dict(ckpt.segments),
            dead_segments={k: (v[0], v[1]) for k, v in ckpt.dead_segments.items()},
            writer_seqs=dict(ckpt.writer_seqs),
        )
        for entry in state.episodes.values():
            state.segment_refs[entry.segment] = state.segment_refs.get(entry.segment, 0) + 1
        return state

    def without_index(self) -> StoreState:
        """The same position in the log without the per-episode index (see the class docstring)."""
        return StoreState(
            seq=self.seq,
            next_episode_id=self.next_episode_id,
            writer_seqs=dict(self.writer_seqs),
            indexed=False,
        )

    def to_checkpoint(self) -> Checkpoint:
        if not self.indexed:
            raise ValueError("a state without the episode index cannot be checkpointed")
        return Checkpoint(
            seq=self.seq,
            next_episode_id=self.next_episode_id,
            episodes=[self.episodes[i] for i in sorted(self.episodes)],
            segments=self.segments,
            dead_segments=self.dead_segments,
            writer_seqs=self.writer_seqs,
        )

    def copy(self) -> StoreState:
        return StoreState(
            seq=self.seq,
            next_episode_id=self.next_episode_id,
            episodes=dict(self.episodes),
            segments=dict(self.segments),
            segment_refs=dict(self.segment_refs),
            dead_segments=dict(self.dead_segments),
            writer_seqs=dict(self.writer_seqs),
            indexed=self.indexed,
        )

    def is_duplicate(self, writer_id: str, writer_seq: int) -> bool:
        return writer_seq <= self.writer_seqs.get(writer_id, -1)

    def apply(self, record: CommitRecord, where: str = "") -> None:
        if record.seq != self.seq + 1:
            raise CorruptStoreError(f"{where}: record seq {record.seq} follows {self.seq}")
        if not self.indexed:
            self._apply_unindexed(record, where)
            return
        for remove in record.removes:
            for episode_id in remove.episode_ids:
                entry = self.episodes.pop(episode_id, None)
                if entry is None:
                    raise CorruptStoreError(f"{where}: removes episode {episode_id}, which is not live")
                self._unref(entry.segment, record)
        next_id = self.next_episode_id
        for add in record.adds:
            self.segments[add.segment.path] = add.segment
            self.dead_segments.pop(add.segment.path, None)
            for entry in add.episodes:
                if entry.episode_id in self.episodes:
                    raise CorruptStoreError(f"{where}: adds episode {entry.episode_id} twice")
                if (
                    entry.segment != add.segment.path
                    or entry.offset + entry.meta.length > add.segment.n_frames
                ):
                    raise CorruptStoreError(
                        f"{where}: episode {entry.episode_id} lies outside the segment it adds ({add.segment.path})"
                    )
                if record.kind == "append":
                    if entry.episode_id != next_id:
                        raise CorruptStoreError(
                            f"{where}: appends episode id {entry.episode_id}, expected {next_id}"
                        )
                    next_id += 1
                elif entry.episode_id >= self.next_episode_id:
                    raise CorruptStoreError(f"{where}: {record.kind} adds unknown episode {entry.episode_id}")
                self.episodes[entry.episode_id] = entry
                self.segment_refs[add.segment.path] = self.segment_refs.get(add.segment.path, 0) + 1
            if not add.episodes:
                self.dead_segments[add.segment.path] = (record.seq, record.timestamp)
        self.next_episode_id = next_id
        prev = self.writer_seqs.get(record.writer_id, -1)
        self.writer_seqs[record.writer_id] = max(prev, record.writer_seq)
        self.seq = record.seq

    def _apply_unindexed(self, record: CommitRecord, where: str) -> None:
        next_id = self.next_episode_id
        if record.kind == "append":
            for add in record.adds:
                for entry in add.episodes:
                    if entry.episode_id != next_id:
                        raise CorruptStoreError(
                            f"{where}: appends episode id {entry.episode_id}, expected {next_id}"
                        )
                    next_id += 1
        self.next_episode_id = next_id
        prev = self.writer_seqs.get(record.writer_id, -1)
        self.writer_seqs[record.writer_id] = max(prev, record.writer_seq)
        self.seq = record.seq

    def _unref(self, segment: str, record: CommitRecord) -> None:
        refs = self.segment_refs[segment] - 1
        if refs:
            self.segment_refs[segment] = refs
        else:
            del self.segment_refs[segment]
            self.dead_segments[segment] = (record.seq, record.timestamp)

    @property
    def num_frames(self) -> int:
        return sum(e.meta.length for e in self.episodes.values())
