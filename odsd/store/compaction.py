"""Compaction: merge small segments into sealed shards with one add + remove commit."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from odsd.schema import AddAction, CommitRecord, EpisodeEntry, RemoveAction
from odsd.store.errors import CommitConflictError
from odsd.store.layout import checked_layouts, read_for_copy
from odsd.store.segments import EncodedFrames, concat_frames, remove_tree, take_frames, write_segment
from odsd.store.state import StoreState
from odsd.store.writer import new_writer_id, publish

if TYPE_CHECKING:
    from odsd.store.episode_store import EpisodeStore

DEFAULT_SMALL_FRAMES = 20_000
DEFAULT_SHARD_FRAMES = 200_000
SHARD_CHUNK_FRAMES = 16_384


@dataclass(frozen=True)
class CompactionResult:
    shards: list[str]
    merged_segments: int
    episodes: int
    seqs: list[int]


def plan_compaction(
    state: StoreState, *, small_frames: int = DEFAULT_SMALL_FRAMES, shard_frames: int = DEFAULT_SHARD_FRAMES
) -> list[list[str]]:
    """Groups of live small segments (in commit order) to merge, each up to ``shard_frames``."""
    live_frames: dict[str, int] = {}
    for episode_id in sorted(state.episodes):
        entry = state.episodes[episode_id]
        live_frames[entry.segment] = live_frames.get(entry.segment, 0) + entry.meta.length
    candidates = [s for s, n in live_frames.items() if n < small_frames or state.segments[s].n_frames > n]
    groups: list[list[str]] = []
    current: list[str] = []
    total = 0
    for seg in candidates:
        if current and total + live_frames[seg] > shard_frames:
            groups.append(current)
            current, total = [], 0
        current.append(seg)
        total += live_frames[seg]
    if current:
        groups.append(current)
    return [g for g in groups if len(g) > 1 or state.segments[g[0]].n_frames > live_frames[g[0]]]


def compact(
    store: EpisodeStore,
    *,
    small_frames: int = DEFAULT_SMALL_FRAMES,
    shard_frames: int = DEFAULT_SHARD_FRAMES,
    max_shards: int | None = None,
) -> CompactionResult:
    """Rewrite groups of small segments as shards; readers on older snapshots are unaffected.

    Each shard is published by one commit that removes its episodes from the old segments and
    adds them, with unchanged ids and metadata, in the shard. If a concurrent commit removed
    any of those episodes first, that group is abandoned (its shard deleted) and reported as
    a :class:`CommitConflictError`.
    """
    state = store.refresh().copy()
    groups = plan_compaction(state, small_frames=small_frames, shard_frames=shard_frames)[:max_shards]
    writer_id = f"compactor-{new_writer_id()[2:]}"
    shards: list[str] = []
    seqs: list[int] = []
    merged = episodes = 0
    for wseq, group in enumerate(groups):
        members = set(group)
        entries = [state.episodes[i] for i in sorted(state.episodes) if state.episodes[i].segment in members]
        frames: dict[str, np.ndarray | EncodedFrames] = {}
        # Verified reads: a damaged segment must not be laundered into a shard with fresh checksums.
        layouts = {s: checked_layouts(store.root, state.segments[s], store.features) for s in group}
        for field in store.features:
            # Image fields are copied as encoded chunks: a lossy frame is never re-encoded.
            cache = {seg: read_for_copy(layouts[seg][field], state.segments[seg]) for seg in group}
            frames[field] = concat_frames(
                [take_frames(cache[e.segment], e.offset, e.offset + e.meta.length) for e in entries]
            )
        rel_path = f"shards/{uuid.uuid4().hex[:16]}"
        info = write_segment(
            store.root,
            rel_path,
            frames,
            store.features,
            chunk_frames=SHARD_CHUNK_FRAMES,
            durable=store.durable,
        )
        new_entries: list[EpisodeEntry] = []
        offset = 0
        for e in entries:
            new_entries.append(e.model_copy(update={"segment": rel_path, "offset": offset}))
            offset += e.meta.length
        ids = [e.episode_id for e in entries]

        def build(
            current: StoreState,
            seq: int,
            ids: list[int] = ids,
            entries: list[EpisodeEntry] = entries,
            new_entries: list[EpisodeEntry] = new_entries,
            wseq: int = wseq,
            info=info,
        ) -> CommitRecord:
            for old in entries:
                if current.episodes.get(old.episode_id) != old:
                    raise CommitConflictError(
                        f"{store.root}: episode {old.episode_id} changed during compaction; shard not published"
                    )
            return CommitRecord(
                seq=seq,
                kind="compact",
                writer_id=writer_id,
                writer_seq=wseq,
                first_episode_id=current.next_episode_id,
                removes=[RemoveAction(episode_ids=ids, reason="compaction")],
                adds=[AddAction(segment=info, episodes=new_entries)],
            )

        try:
            record = publish(store, build)
        except BaseException:
            remove_tree(store.root / rel_path)
            raise
        assert record is not None
        shards.append(rel_path)
        seqs.append(record.seq)
        merged += len(group)
        episodes += len(entries)
    return CompactionResult(shards=shards, merged_segments=merged, episodes=episodes, seqs=seqs)
