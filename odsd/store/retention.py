"""Retention: keep the store within episode, frame and byte capacities (FIFO by commit order)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from odsd.store.state import StoreState
from odsd.store.writer import new_writer_id

if TYPE_CHECKING:
    from odsd.store.episode_store import EpisodeStore


@dataclass(frozen=True)
class RetentionPolicy:
    """Capacities; ``None`` means unbounded. Bytes are apportioned to episodes by frame count."""

    max_episodes: int | None = None
    max_frames: int | None = None
    max_bytes: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_episodes", "max_frames", "max_bytes"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"retention {name} must be >= 0, got {value}")


def episode_nbytes(state: StoreState, episode_id: int) -> int:
    entry = state.episodes[episode_id]
    seg = state.segments[entry.segment]
    return seg.nbytes * entry.meta.length // max(seg.n_frames, 1)


def select_expired(state: StoreState, policy: RetentionPolicy) -> list[int]:
    """The oldest episodes to remove so that what remains fits every capacity."""
    ids = sorted(state.episodes)
    episodes = len(ids)
    frames = sum(state.episodes[i].meta.length for i in ids)
    nbytes = sum(episode_nbytes(state, i) for i in ids) if policy.max_bytes is not None else 0
    expired: list[int] = []
    for episode_id in ids:
        over = (
            (policy.max_episodes is not None and episodes > policy.max_episodes)
            or (policy.max_frames is not None and frames > policy.max_frames)
            or (policy.max_bytes is not None and nbytes > policy.max_bytes)
        )
        if not over:
            break
        expired.append(episode_id)
        episodes -= 1
        frames -= state.episodes[episode_id].meta.length
        if policy.max_bytes is not None:
            nbytes -= episode_nbytes(state, episode_id)
    return expired


def apply_retention(
    store: EpisodeStore, policy: RetentionPolicy, *, writer_id: str | None = None
) -> list[int]:
    """Publish one remove commit for the expired episodes; returns their ids (empty: nothing to do)."""
    expired = select_expired(store.refresh(), policy)
    if not expired:
        return []
    writer = store.writer(writer_id=writer_id or f"retention-{new_writer_id()[2:]}")
    writer.remove(expired, reason="retention")
    return expired
