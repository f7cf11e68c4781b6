"""Student-only evaluation summaries: success with a confidence interval, failure points."""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from odsd.schema import EpisodeMeta


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a success rate (robust near 0 and 1)."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


@dataclass(frozen=True)
class EvalResult:
    episodes: int
    successes: int
    success_rate: float
    ci95: tuple[float, float]
    mean_length: float
    failure_points: dict[str, int] = field(default_factory=dict)
    """Failed episodes counted by the segment (task phase) they ended in."""


def summarize_eval(metas: list[EpisodeMeta]) -> EvalResult:
    n = len(metas)
    successes = sum(m.success for m in metas)
    points: Counter[str] = Counter()
    for m in metas:
        if not m.success:
            points[m.segments[-1].name if m.segments else "unknown"] += 1
    return EvalResult(
        episodes=n,
        successes=successes,
        success_rate=successes / n if n else 0.0,
        ci95=wilson_interval(successes, n),
        mean_length=sum(m.length for m in metas) / n if n else 0.0,
        failure_points=dict(points.most_common()),
    )


def append_eval_record(
    run_dir: Path,
    *,
    run_id: str,
    iteration: int,
    policy_version: int,
    result: EvalResult,
    labels: int | None = None,
) -> dict[str, Any]:
    """Append a student-only evaluation to ``runs/<run_id>/eval.jsonl`` (read by ``odsd report``)."""
    record: dict[str, Any] = {
        "kind": "eval",
        "time": datetime.now(UTC).isoformat(),
        "run_id": run_id,
        "iteration": iteration,
        "policy_version": policy_version,
        "episodes": result.episodes,
        "success_rate": result.success_rate,
        "ci95": list(result.ci95),
        "failure_points": result.failure_points,
    }
    if labels is not None:
        record["labels"] = labels
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "eval.jsonl", "a") as fh:
        fh.write(json.dumps(record) + "\n")
    return record
