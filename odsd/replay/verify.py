"""``odsd store verify --replay``: re-simulate a sample of episodes and check they reproduce.

::

    result = verify_store(store, sample=32, replay=True)   # dynamic re-simulation
    result.replay.max_obs_dev, [e.episode_id for e in result.replay.failed]
    result = verify_store(store)                            # kinematic: state ↔ observation check

An episode *does not reproduce* when an observation or float state element deviates by more than
``atol``, an exact state field (random stream, step counter, flags) differs, the per-step reward
deviates, or its recorded outcome (success / terminated / truncated and the final step) is not
what the re-simulation produces. Each such episode carries a one-line explanation (for example
``random stream diverged at frame 12 (rng_counter)``). Episodes whose env cannot be built or whose
spec does not match are listed as skipped with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from odsd.replay.defaults import DEFAULT_ENV_ROWS
from odsd.replay.errors import ReplayError
from odsd.replay.replay import DEFAULT_ATOL, ReplayReport, replay_episodes
from odsd.replay.spec_check import STATE_PREFIX, recorded_env
from odsd.store import EpisodeStore


@dataclass
class VerifyResult:
    """Outcome of ``store verify``."""

    watermark: int
    episodes_total: int
    sampled: list[int]
    replay: ReplayReport
    skipped: dict[int, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.replay.ok and not self.skipped

    def to_json(self) -> dict[str, Any]:
        return {
            "watermark": self.watermark,
            "episodes_total": self.episodes_total,
            "sampled": self.sampled,
            "skipped": {str(k): v for k, v in self.skipped.items()},
            "ok": self.ok,
            **self.replay.to_json(),
        }


def sample_episodes(episode_ids: np.ndarray, sample: int | None, seed: int = 0) -> list[int]:
    """``sample`` episode ids drawn without replacement by ``seed`` (all when None), sorted."""
    ids = np.asarray(episode_ids, dtype=np.int64)
    if sample is not None and sample < ids.size:
        if sample < 1:
            raise ReplayError(f"--sample must be >= 1, got {sample}")
        ids = np.random.default_rng(seed).choice(ids, size=sample, replace=False)
    return sorted(int(e) for e in ids)


def verify_store(
    store: EpisodeStore,
    *,
    replay: bool = False,
    sample: int | None = None,
    seed: int = 0,
    env_rows: int = DEFAULT_ENV_ROWS,
    atol: float = DEFAULT_ATOL,
    device: str | torch.device = "cpu",
    watermark: int | None = None,
    task: str | None = None,
) -> VerifyResult:
    """Replay a sample of the store's episodes (dynamic with ``replay``, else kinematic)."""
    if not any(k.startswith(STATE_PREFIX) for k in store.features):
        raise ReplayError(
            f"{store.root}: no recorded simulator state (state.* fields); collect with record_state=true (--set record_state=true)"
        )
    snap = store.snapshot(watermark)
    try:
        ids = sample_episodes(snap.episode_ids, sample, seed)
        groups: dict[str, list[int]] = {}
        for eid in ids:
            groups.setdefault(recorded_env(snap, eid, task=task).identity(), []).append(eid)
        mode = "dynamic" if replay else "kinematic"
        report = ReplayReport(mode=mode, atol=atol)
        skipped: dict[int, str] = {}
        for members in groups.values():
            try:
                part = replay_episodes(
                    snap, members, mode=mode, env_rows=env_rows, device=device, task=task, atol=atol
                )
            except ReplayError as exc:
                skipped.update({eid: str(exc) for eid in members})
                continue
            report.episodes.extend(part.episodes)
        report.episodes.sort(key=lambda e: e.episode_id)
        return VerifyResult(
            watermark=snap.watermark,
            episodes_total=snap.num_episodes,
            sampled=ids,
            replay=report,
            skipped=skipped,
        )
    finally:
        snap.close()
