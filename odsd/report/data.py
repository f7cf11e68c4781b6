"""Load what ``odsd report`` draws: run metrics, per-iteration evaluations and episode segment tables.

Sources, all read-only:

- ``runs/<run_id>/metrics.jsonl``: the collector's ``iteration`` records (collection success, beta,
  invalid-label rate, disagreement, throughput, ...) plus ``rolling`` and ``final`` records;
- student-only evaluations: ``kind: "eval"`` records, either in ``metrics.jsonl`` or in
  ``runs/<run_id>/eval.jsonl`` (``iteration``, ``policy_version``, ``success_rate``, ``ci95``,
  ``episodes``, optional ``labels`` and ``failure_points``), as written by ``bench/results.py``;
- ``runs/<run_id>/run.json``: the run's mode, task and expert;
- the store's newest snapshot: episode metadata (run, iteration, success, segment table).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from odsd.errors import ConfigError
from odsd.store import EpisodeStore


@dataclass
class SegmentStats:
    """Per segment (task phase) name: how many episodes reached it and how many ended failing in it."""

    reached: int = 0
    failed_in: int = 0
    frames: int = 0
    reasons: Counter[str] = field(default_factory=Counter)

    @property
    def failure_rate(self) -> float:
        return self.failed_in / self.reached if self.reached else 0.0

    @property
    def mean_frames(self) -> float:
        return self.frames / self.reached if self.reached else 0.0


@dataclass
class RunData:
    run_id: str
    info: dict[str, Any] = field(default_factory=dict)
    iterations: list[dict[str, Any]] = field(default_factory=list)
    evals: list[dict[str, Any]] = field(default_factory=list)
    final: dict[str, Any] | None = None
    rolling: int = 0
    episodes: int = 0
    frames: int = 0
    successes: int = 0
    episodes_by_iteration: dict[int, list[int]] = field(default_factory=dict)
    """iteration -> [episodes, successes, frames] from the store's episode metadata."""
    segments: dict[str, SegmentStats] = field(default_factory=dict)
    failure_points_by_iteration: dict[int, Counter[str]] = field(default_factory=dict)

    @property
    def mode(self) -> str:
        return str(self.info.get("config", {}).get("mode", "?"))

    @property
    def task(self) -> str:
        return str(self.info.get("config", {}).get("task", "?"))

    @property
    def expert(self) -> str:
        return str(self.info.get("config", {}).get("expert", "?"))

    def metric(self, key: str) -> list[tuple[int, float]]:
        """(iteration, value) of one numeric field of the ``iteration`` records, missing values skipped."""
        out = []
        for rec in self.iterations:
            value = rec.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                out.append((int(rec.get("iteration", len(out))), float(value)))
        return out


@dataclass
class ReportData:
    store: Path
    watermark: int
    episodes: int
    frames: int
    runs: list[RunData]


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    records = []
    with open(path) as fh:
        for lineno, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                # a torn last line of a live run is expected; anything else is worth a note
                if lineno > 1:
                    continue
                raise ConfigError(f"{path}:{lineno}: not a JSON line") from None
            if isinstance(rec, dict):
                records.append(rec)
    return records


def load_run(run_dir: Path) -> RunData:
    data = RunData(run_id=run_dir.name)
    run_json = run_dir / "run.json"
    if run_json.is_file():
        try:
            data.info = json.loads(run_json.read_text())
        except json.JSONDecodeError:
            data.info = {}
    evals: dict[int, dict[str, Any]] = {}
    for rec in _read_jsonl(run_dir / "metrics.jsonl") + _read_jsonl(run_dir / "eval.jsonl"):
        kind = rec.get("kind")
        if kind == "iteration":
            data.iterations.append(rec)
        elif kind == "eval":
            evals[int(rec.get("iteration", len(evals)))] = rec  # the newest evaluation of an iteration wins
        elif kind == "final":
            data.final = rec
        elif kind == "rolling":
            data.rolling += 1
    data.iterations.sort(key=lambda r: int(r.get("iteration", 0)))
    data.evals = [evals[k] for k in sorted(evals)]
    return data


def load_report_data(store: Path, run: str | None = None) -> ReportData:
    """Everything the plots and the summary need, for one run or every run of ``store``."""
    opened = EpisodeStore.open(store)
    runs_dir = opened.root / "runs"
    if run is not None:
        if not (runs_dir / run).is_dir():
            raise ConfigError(f"{runs_dir / run}: no such run in this store")
        names = [run]
    else:
        names = sorted(p.name for p in runs_dir.iterdir() if p.is_dir()) if runs_dir.is_dir() else []
    runs = {name: load_run(runs_dir / name) for name in names}
    snap = opened.snapshot()
    try:
        for entry in snap.entries:
            meta = entry.meta
            rd = runs.get(meta.run_id or "")
            if rd is None:
                if run is not None or meta.run_id is None:
                    continue
                rd = runs[meta.run_id] = RunData(run_id=meta.run_id)
            rd.episodes += 1
            rd.frames += meta.length
            rd.successes += int(meta.success)
            per = rd.episodes_by_iteration.setdefault(meta.iteration, [0, 0, 0])
            per[0] += 1
            per[1] += int(meta.success)
            per[2] += meta.length
            seen: set[str] = set()
            for seg in meta.segments:
                stats = rd.segments.setdefault(seg.name, SegmentStats())
                if seg.name not in seen:
                    stats.reached += 1
                    seen.add(seg.name)
                stats.frames += seg.end - seg.start
            if not meta.success:
                last = meta.segments[-1] if meta.segments else None
                name = last.name if last else "unknown"
                stats = rd.segments.setdefault(name, SegmentStats())
                stats.failed_in += 1
                stats.reasons[
                    (last.failure_reason if last else None) or meta.terminal_reason or "unknown"
                ] += 1
                rd.failure_points_by_iteration.setdefault(meta.iteration, Counter())[name] += 1
        watermark, episodes, frames = snap.watermark, snap.num_episodes, snap.num_frames
    finally:
        snap.close()
    ordered = [runs[k] for k in sorted(runs, key=lambda k: (runs[k].info.get("created", ""), k))]
    return ReportData(opened.root, watermark, episodes, frames, ordered)


def eval_failure_points(rd: RunData) -> dict[int, dict[str, int]]:
    """Student-only failure points per iteration, from evaluation records that carry them."""
    return {
        int(e["iteration"]): {str(k): int(v) for k, v in (e.get("failure_points") or {}).items()}
        for e in rd.evals
        if e.get("failure_points")
    }


def iteration_table(rd: RunData) -> list[dict[str, Any]]:
    """One row per iteration joining the collector's record, the evaluation and the store counts."""
    by_it: dict[int, dict[str, Any]] = defaultdict(dict)
    for rec in rd.iterations:
        k = int(rec.get("iteration", 0))
        by_it[k].update(
            iteration=k,
            beta=rec.get("beta"),
            policy_version=rec.get("policy_version"),
            collection_success=rec.get("collection_success_rate"),
            invalid_label_rate=rec.get("invalid_label_rate"),
            disagreement=rec.get("disagreement_l2"),
            env_steps_per_s=rec.get("env_steps_per_s"),
            frames_committed_per_s=rec.get("frames_committed_per_s"),
            episodes_committed=rec.get("episodes_committed"),
        )
    for ev in rd.evals:
        k = int(ev.get("iteration", 0))
        by_it[k].update(
            iteration=k,
            student_success=ev.get("success_rate"),
            student_ci95=ev.get("ci95"),
            student_episodes=ev.get("episodes"),
            student_policy=ev.get("policy_version"),
            labels=ev.get("labels"),
        )
    for k, (n, s, _f) in rd.episodes_by_iteration.items():
        by_it[k].setdefault("iteration", k)
        by_it[k]["store_episodes"] = n
        by_it[k]["store_success"] = s / n if n else None
    return [by_it[k] for k in sorted(by_it)]
