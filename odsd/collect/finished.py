"""Finished episodes on their way to the store: frames as recorded plus what the metadata needs.

The collector copies finished episodes out of its buffers as a :class:`FinishedBatch` (raw
recorded fields, episode boundaries and a few scalars per episode). Turning that into an
:class:`~odsd.store.EpisodeBatch` (derived per-frame fields, :class:`~odsd.schema.EpisodeMeta`
with its segment table) is pure Python work per episode, so it happens in the commit worker,
off the collection loop::

    batch = FinishedBatch(frames, offsets, episodes, run)
    store_batch = batch.to_episode_batch()      # in the writer thread or process
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from odsd.collect.derived import derived_fields
from odsd.collect.segments import segment_table
from odsd.gcpause import gc_paused
from odsd.schema import EpisodeMeta
from odsd.store import EpisodeBatch


@dataclass(frozen=True)
class FinishedEpisode:
    """One finished episode: where it is in the batch's frames and how it ended."""

    length: int
    row: int
    success: bool
    terminated: bool
    truncated: bool
    iteration: int
    beta: float
    """The iteration's beta; frames record the beta of their own step."""
    started: str
    finished: str
    commit: bool
    """Accepted for the store (mode and outcome rules)."""
    evaluate: bool
    """Counted as an evaluation episode."""

    @property
    def terminal_reason(self) -> str:
        if self.success:
            return "success"
        return "truncated" if self.truncated and not self.terminated else "terminated"


@dataclass(frozen=True)
class RunInfo:
    """Metadata shared by every episode of a run (and the store's field order)."""

    run_id: str
    writer_id: str | None
    seed: int
    task: str
    expert_name: str | None
    expert_version: str | None
    phase_names: tuple[str, ...]
    has_student: bool
    fields: tuple[str, ...]


@dataclass(frozen=True)
class FinishedBatch:
    """Finished episodes with their recorded frames concatenated per field, episode after episode."""

    frames: Mapping[str, np.ndarray]
    """Recorded fields only (the derived ones are computed by :meth:`to_episode_batch`)."""
    offsets: np.ndarray
    """Episode ``j`` is ``offsets[j]:offsets[j + 1]``."""
    episodes: Sequence[FinishedEpisode]
    run: RunInfo

    @property
    def num_episodes(self) -> int:
        return len(self.episodes)

    @property
    def num_frames(self) -> int:
        return int(self.offsets[-1])

    def select(self, picks: Sequence[int]) -> FinishedBatch:
        """The episodes at positions ``picks`` (in that order)."""
        if list(picks) == list(range(self.num_episodes)):
            return self
        lengths = np.diff(self.offsets)[list(picks)]
        index = np.concatenate([np.arange(self.offsets[j], self.offsets[j + 1]) for j in picks])
        offsets = np.zeros(len(picks) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return FinishedBatch(
            frames={name: values[index] for name, values in self.frames.items()},
            offsets=offsets,
            episodes=[self.episodes[j] for j in picks],
            run=self.run,
        )

    def metas(self) -> list[EpisodeMeta]:
        """The store metadata of every episode (segment table from the recorded ``segment_id``)."""
        run = self.run
        segment_ids = self.frames["segment_id"]
        versions = self.frames["policy_version"]
        phase_names = list(run.phase_names)
        out = []
        for j, ep in enumerate(self.episodes):
            start, stop = int(self.offsets[j]), int(self.offsets[j + 1])
            reason = ep.terminal_reason
            # Built from typed values (thousands per second): no re-validation.
            out.append(
                EpisodeMeta.model_construct(
                    length=ep.length,
                    run_id=run.run_id,
                    writer_id=run.writer_id,
                    iteration=ep.iteration,
                    env_row=ep.row,
                    seed=run.seed,
                    success=ep.success,
                    terminated=ep.terminated,
                    truncated=ep.truncated,
                    terminal_reason=reason,
                    policy_version_first=int(versions[start]) if run.has_student else None,
                    policy_version_last=int(versions[stop - 1]) if run.has_student else None,
                    expert_name=run.expert_name,
                    expert_version=run.expert_version,
                    beta=ep.beta,
                    task=run.task,
                    segments=segment_table(segment_ids[start:stop], phase_names, ep.success, reason),
                    started=ep.started,
                    finished=ep.finished,
                )
            )
        return out

    def to_episode_batch(self) -> EpisodeBatch:
        """The store batch: every field of the schema, in schema order, and the metadata."""
        with gc_paused():
            return self._to_episode_batch()

    def _to_episode_batch(self) -> EpisodeBatch:
        frames = dict(self.frames)
        frames |= derived_fields(
            frames["segment_id"],
            self.offsets,
            np.array([ep.terminated for ep in self.episodes], dtype=bool),
            np.array([ep.truncated for ep in self.episodes], dtype=bool),
        )
        return EpisodeBatch(frames={name: frames[name] for name in self.run.fields}, metas=self.metas())
