"""Collection metrics: per-iteration and rolling windows, appended to ``metrics.jsonl``."""

from __future__ import annotations

import json
import resource
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch


def rss_bytes() -> int:
    """Resident set size of this process (current where /proc exists, else peak)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * resource.getpagesize()
    except OSError:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


@dataclass(frozen=True)
class StepStats:
    """What one collection step contributes to the metrics (computed once, added to every window)."""

    rows: int
    expert_latency_s: float | None
    invalid_reasons: dict[str, int]
    expert_executed: int
    disagreement_sum: float = 0.0
    disagreement_dim_sum: np.ndarray | None = None
    disagreement_rows: int = 0

    @staticmethod
    def disagreement(
        expert_action: torch.Tensor, student_action: torch.Tensor, both_valid: torch.Tensor
    ) -> tuple[float, np.ndarray | None, int]:
        """Sum of L2 distances, per-dimension absolute sums and row count over rows where both are valid."""
        diff = (expert_action - student_action)[both_valid]
        if not diff.numel():
            return 0.0, None, 0
        return float(diff.norm(dim=1).sum()), diff.abs().sum(dim=0).cpu().numpy(), int(diff.shape[0])


@dataclass
class MetricsWindow:
    """Accumulates one window (an iteration, or the span between two rolling reports)."""

    started: float = field(default_factory=time.monotonic)
    env_steps: int = 0
    frames_committed: int = 0
    episodes_finished: int = 0
    episodes_committed: int = 0
    successes: int = 0
    expert_latency_s: list[float] = field(default_factory=list)
    labels: int = 0
    invalid_by_reason: Counter[str] = field(default_factory=Counter)
    disagreement_sum: float = 0.0
    disagreement_dim_sum: np.ndarray | None = None
    disagreement_rows: int = 0
    expert_executed: int = 0
    lengths: list[int] = field(default_factory=list)
    commit_latency_s: list[float] = field(default_factory=list)
    visibility_lag_s: list[float] = field(default_factory=list)
    """Per committed episode: from the step that finished it to its commit being reported."""

    def add_step(self, step: StepStats) -> None:
        self.env_steps += step.rows
        if step.expert_latency_s is not None:
            self.expert_latency_s.append(step.expert_latency_s)
            self.labels += step.rows
        if step.invalid_reasons:
            self.invalid_by_reason.update(step.invalid_reasons)
        self.expert_executed += step.expert_executed
        if step.disagreement_rows:
            self.disagreement_sum += step.disagreement_sum
            dims = step.disagreement_dim_sum
            self.disagreement_dim_sum = (
                dims if self.disagreement_dim_sum is None else self.disagreement_dim_sum + dims
            )
            self.disagreement_rows += step.disagreement_rows

    def summary(self) -> dict[str, Any]:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        lat = np.asarray(self.expert_latency_s) * 1e3
        com = np.asarray(self.commit_latency_s) * 1e3
        vis = np.asarray(self.visibility_lag_s) * 1e3
        invalid = sum(self.invalid_by_reason.values())
        rows = max(self.disagreement_rows, 1)
        return {
            "elapsed_s": round(elapsed, 3),
            "env_steps": self.env_steps,
            "env_steps_per_s": self.env_steps / elapsed,
            "frames_committed": self.frames_committed,
            "frames_committed_per_s": self.frames_committed / elapsed,
            "episodes_finished": self.episodes_finished,
            "episodes_committed": self.episodes_committed,
            "collection_success_rate": self.successes / self.episodes_finished
            if self.episodes_finished
            else None,
            "expert_latency_ms_p50": float(np.percentile(lat, 50)) if lat.size else None,
            "expert_latency_ms_p95": float(np.percentile(lat, 95)) if lat.size else None,
            "invalid_label_rate": invalid / self.labels if self.labels else None,
            "invalid_labels_by_reason": dict(self.invalid_by_reason),
            "disagreement_l2": self.disagreement_sum / rows if self.disagreement_rows else None,
            "disagreement_per_dim": (self.disagreement_dim_sum / rows).tolist()
            if self.disagreement_dim_sum is not None
            else None,
            "expert_executed_fraction": self.expert_executed / self.env_steps if self.env_steps else None,
            "episode_length_mean": float(np.mean(self.lengths)) if self.lengths else None,
            "commit_latency_ms_p50": float(np.percentile(com, 50)) if com.size else None,
            "commit_latency_ms_p95": float(np.percentile(com, 95)) if com.size else None,
            "visibility_lag_ms_p50": float(np.percentile(vis, 50)) if vis.size else None,
            "visibility_lag_ms_p95": float(np.percentile(vis, 95)) if vis.size else None,
        }


class MetricsLog:
    """Appends one JSON object per line to ``metrics.jsonl`` (``kind``: rolling | iteration | final)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, record: dict[str, Any]) -> None:
        if self.path is None:
            return
        with open(self.path, "a") as fh:
            fh.write(json.dumps(record, default=float) + "\n")
