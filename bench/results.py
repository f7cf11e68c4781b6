"""Measured results of issue 7: DAgger vs BC at an equal label budget, a checkpoint expert, Fetch.

::

    python bench/results.py --quick                  # smoke run (a minute or two), writes to a temp dir
    python bench/results.py                          # the numbers in docs/results.md (tens of minutes)
    python bench/results.py --stages dagger_bc --seeds 0 1 2 --jobs 2
    python bench/results.py --stages fetch --fetch-iterations 4
    python bench/results.py --stages dagger_bc --task maniskill:PickCube-v1 --num-envs 2 --eval-num-envs 2
    python bench/results.py --stages dagger_bc --seeds 0 1 --iterations 5 \
        --task-kwargs '{"grasp_tol_xy": 0.005}' --mixing episode --hidden 64   # a variant

Protocol (identical for every learner that is compared):

- *DAgger*: ``dagger_sync`` with the ``pick_place`` planner, beta ``1.0 * 0.5**k``, a fixed number
  of committed episodes per iteration. After each iteration the reference MLP is trained *from
  scratch* on every committed frame with a valid expert label (``train_bc``), published, loaded by
  the collector at the boundary, and evaluated student-only.
- *BC*: ``expert_demo`` data from the same planner (successful episodes only, the mode's default),
  collected once per seed. For every DAgger iteration, BC trains from scratch (through the same
  LeRobot-compatible reader ``train_bc`` uses) on the first ``L`` valid labels of that data, where ``L`` is exactly the number of valid labels DAgger had trained
  on at that iteration (equal label budget), with the same number of training steps (a function of
  ``L`` only).
- *Evaluation*: ``Collector(CollectConfig(mode="eval", student=<snapshot>, ...), commit_store=False)``
  → ``summarize_eval``: the student alone acts, on the same fixed eval seed for every policy
  (same initial states and perturbation streams), ``--eval-episodes`` episodes, Wilson 95% CI.

Every DAgger store keeps its ``runs/<run_id>/metrics.jsonl`` and gets an ``eval.jsonl`` next to it
(one ``kind: "eval"`` record per iteration), so ``odsd report STORE --out DIR`` draws its plots;
the figures in ``docs/results.md`` are made by that same code.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
EVAL_SEED = 424_242
BEGIN = "<!-- BEGIN bench/results.py output -->"
END = "<!-- END bench/results.py output -->"


@dataclass(frozen=True)
class Setup:
    task: str = "pick_place"
    task_kwargs: dict[str, Any] = field(default_factory=dict)
    expert: str = "planner"
    num_envs: int = 16
    iterations: int = 6
    episodes_per_iteration: int = 32
    eval_episodes: int = 100
    steps_base: int = 2000
    steps_per_label: float = 0.4
    steps_max: int = 6000
    beta_decay: float = 0.5
    mixing: str = "step"
    lr: float = 3e-3
    lr_schedule: str = "cosine"
    hidden: tuple[int, ...] = (256, 256)
    eval_num_envs: int = 25
    eval_expert: str = "planner"
    """Labels the task phase (segment) of eval frames only; the student alone acts."""

    def bc_config(self, labels: int, seed: int) -> Any:
        from odsd.learn.bc import BCConfig

        return BCConfig(
            steps=self.train_steps(labels),
            lr=self.lr,
            lr_schedule=self.lr_schedule,
            hidden=tuple(self.hidden),
            seed=seed,
        )

    def train_steps(self, labels: int) -> int:
        """Training steps as a function of the label count only (same rule for DAgger and BC)."""
        return int(min(self.steps_max, self.steps_base + self.steps_per_label * labels))


# -- building blocks --------------------------------------------------------------------------


def _threads() -> None:
    import torch

    torch.set_num_threads(1)


def evaluate(setup: Setup, policy: Path, work: Path, *, expert: str | None = None) -> dict[str, Any]:
    """Student-only success of one snapshot (``expert``: evaluate a checkpoint *expert* instead)."""
    from odsd.collect import CollectConfig, Collector
    from odsd.collect.evaluation import summarize_eval

    cfg = CollectConfig(
        mode="eval",
        task=setup.task,
        task_kwargs=setup.task_kwargs,
        expert=expert or setup.eval_expert,
        student=str(policy),
        num_envs=min(setup.eval_num_envs, setup.eval_episodes),
        max_episodes=setup.eval_episodes,
        seed=EVAL_SEED,
        store=work / "unused",
    )
    t0 = time.monotonic()
    collector = Collector(cfg, commit_store=False)
    collector.run()
    res = summarize_eval(collector.eval_episodes)
    return {
        "episodes": res.episodes,
        "successes": res.successes,
        "success_rate": res.success_rate,
        "ci95": list(res.ci95),
        "mean_length": res.mean_length,
        "failure_points": res.failure_points,
        "wall_s": time.monotonic() - t0,
    }


def budget_dataset(store_path: Path, snapshot: Any, budget: int) -> Any:
    """The reader view ``train_bc`` trains on, cut to exactly the first ``budget`` valid labels.

    The reader is restricted to the first episodes (commit order) that hold ``budget`` labels, so
    its normalization statistics come from that data only; its anchors (valid labels, in episode
    order) are then cut at ``budget``.
    """
    from odsd.lerobot import OdsdLeRobotDataset
    from odsd.lerobot.selection import Selection

    per_episode = np.add.reduceat(valid_labels(snapshot).astype(np.int64), snapshot.starts)
    k = int(np.searchsorted(np.cumsum(per_episode), budget) + 1)
    ids = tuple(int(e) for e in snapshot.episode_ids[:k])

    class Budget(OdsdLeRobotDataset):
        def __len__(self) -> int:
            return min(super().__len__(), budget)

    ds = Budget(store_path, watermark=snapshot.watermark, selection=Selection(episodes=ids))
    ds.budget_episodes = k
    return ds


def valid_labels(snapshot: Any) -> np.ndarray:
    valid = snapshot.read("action.expert_valid").astype(bool)
    return valid & np.isfinite(snapshot.read("action.expert")).all(axis=1)


def dagger_run(setup: Setup, seed: int, work: Path, log=print) -> dict[str, Any]:
    """One DAgger run; returns per-iteration rows (labels, student-only eval, collection success)."""
    _threads()
    from odsd.collect import BetaSchedule, CollectConfig, Collector
    from odsd.collect.evaluation import EvalResult, append_eval_record
    from odsd.collect.student import publish_initial_student
    from odsd.learn.bc import publish_bc, train_bc
    from odsd.store import EpisodeStore

    store_path = work / f"dagger-{setup.task}-{setup.expert.split(':')[0]}-s{seed}"
    shutil.rmtree(store_path, ignore_errors=True)
    policies = store_path / "policies"
    cfg = CollectConfig(
        mode="dagger_sync",
        task=setup.task,
        task_kwargs=setup.task_kwargs,
        expert=setup.expert,
        num_envs=setup.num_envs,
        store=store_path,
        seed=seed,
        episodes_per_iteration=setup.episodes_per_iteration,
        max_iterations=setup.iterations,
        beta=BetaSchedule(kind="exponential", init_beta=1.0, decay=setup.beta_decay, beta_min=0.0),
        mixing=setup.mixing,
        durability="process",
        commit_max_age_s=1.0,
        metrics_interval_s=3600,
    )
    rows: list[dict[str, Any]] = []
    holder: dict[str, Any] = {}
    t_start = time.monotonic()
    times = {"collect_s": 0.0, "train_s": 0.0, "eval_s": 0.0}
    mark = [time.monotonic()]

    def on_report(kind: str, record: dict[str, Any]) -> None:
        if kind != "iteration":
            return
        times["collect_s"] += time.monotonic() - mark[0]
        collector = holder["collector"]
        snapshot = EpisodeStore.open(store_path).snapshot()
        labels = int(valid_labels(snapshot).sum())
        t0 = time.monotonic()
        model = train_bc(snapshot, collector.spec, setup.bc_config(labels, seed))
        path = publish_bc(policies, model, collector.spec, snapshot)
        times["train_s"] += time.monotonic() - t0
        ev = evaluate(setup, path, work)
        times["eval_s"] += ev["wall_s"]
        row = {
            "iteration": record["iteration"],
            "beta": record["beta"],
            "collected_with": record["policy_version"],
            "collection_success": record.get("collection_success_rate"),
            "episodes": snapshot.num_episodes,
            "frames": snapshot.num_frames,
            "labels": labels,
            "train_steps": setup.train_steps(labels),
            "policy": path.name,
            "student": ev,
            "elapsed_s": time.monotonic() - t_start,
        }
        rows.append(row)
        append_eval_record(
            store_path / "runs" / collector.run_id,
            run_id=collector.run_id,
            iteration=record["iteration"],
            policy_version=int(path.name[1:]),
            result=EvalResult(
                episodes=ev["episodes"],
                successes=ev["successes"],
                success_rate=ev["success_rate"],
                ci95=tuple(ev["ci95"]),
                mean_length=ev["mean_length"],
                failure_points=ev["failure_points"],
            ),
            labels=labels,
        )
        log(
            f"[dagger {setup.task} {setup.expert.split(':')[0]} s{seed}] it {row['iteration']} "
            f"beta {row['beta']:.3f} labels {labels} coll {row['collection_success']} "
            f"student {ev['success_rate']:.2f} fail {ev['failure_points']} t {row['elapsed_s']:.0f}s"
        )
        mark[0] = time.monotonic()

    collector = Collector(cfg, on_report=on_report)
    holder["collector"] = collector
    policies.mkdir(parents=True, exist_ok=True)
    publish_initial_student(policies, collector.spec, seed=seed)
    mark[0] = time.monotonic()
    collector.run()
    return {
        "seed": seed,
        "store": str(store_path),
        "rows": rows,
        "wall_s": time.monotonic() - t_start,
        **times,
    }


def expert_demo_store(setup: Setup, seed: int, work: Path, labels_needed: int) -> Path:
    """Collect planner ``expert_demo`` episodes until at least ``labels_needed`` valid labels."""
    _threads()
    from odsd.collect import CollectConfig, Collector
    from odsd.store import EpisodeStore

    store_path = work / f"demo-{setup.task}-s{seed}"
    shutil.rmtree(store_path, ignore_errors=True)
    chunk = 64
    while True:
        cfg = CollectConfig(
            mode="expert_demo",
            task=setup.task,
            task_kwargs=setup.task_kwargs,
            expert=setup.expert,
            num_envs=setup.num_envs,
            store=store_path,
            # a different env seed per chunk (the seed also drives initial states)
            seed=seed * 1000
            + 500
            + (0 if not store_path.exists() else len(list((store_path / "runs").iterdir()))),
            max_episodes=chunk,
            durability="process",
            commit_max_age_s=1.0,
            metrics_interval_s=3600,
        )
        Collector(cfg).run()
        snap = EpisodeStore.open(store_path).snapshot()
        if int(valid_labels(snap).sum()) >= labels_needed:
            return store_path


def bc_run(setup: Setup, seed: int, work: Path, budgets: list[int], log=print) -> dict[str, Any]:
    """BC on expert_demo data at each label budget (same steps rule, same eval)."""
    _threads()
    from odsd.envs import make_env
    from odsd.learn.bc import publish_bc, train_bc
    from odsd.store import EpisodeStore

    t_start = time.monotonic()
    store_path = expert_demo_store(setup, seed, work, max(budgets))
    collect_s = time.monotonic() - t_start
    snap = EpisodeStore.open(store_path).snapshot()
    probe = make_env(setup.task, num_envs=1, seed=0, **setup.task_kwargs)
    spec = probe.spec
    probe.close()
    policies = store_path / "policies"
    rows = []
    for budget in budgets:
        sub = budget_dataset(store_path, snap, budget)
        assert len(sub) == budget, (len(sub), budget)
        model = train_bc(sub, spec, setup.bc_config(budget, seed))
        path = publish_bc(policies, model, spec, sub)
        ev = evaluate(setup, path, work)
        rows.append(
            {
                "labels": budget,
                "episodes": sub.budget_episodes,
                "train_steps": setup.train_steps(budget),
                "student": ev,
            }
        )
        log(
            f"[bc {setup.task} s{seed}] labels {budget} ({sub.budget_episodes} eps) "
            f"student {ev['success_rate']:.2f} fail {ev['failure_points']}"
        )
    return {
        "seed": seed,
        "store": str(store_path),
        "rows": rows,
        "collect_s": collect_s,
        "wall_s": time.monotonic() - t_start,
    }


def dagger_and_bc(setup: Setup, seed: int, work: Path) -> dict[str, Any]:
    d = dagger_run(setup, seed, work, log=_log)
    budgets = [r["labels"] for r in d["rows"]]
    b = bc_run(setup, seed, work, budgets, log=_log)
    return {"seed": seed, "dagger": d, "bc": b}


def _log(line: str) -> None:
    print(time.strftime("%H:%M:%S"), line, flush=True)


# -- stages -----------------------------------------------------------------------------------


def _pool_map(fn, args: list[tuple], jobs: int) -> list[Any]:
    """``fn(*a)`` for each ``a`` in worker processes that may start the collector's writer process."""
    if jobs <= 1 or len(args) <= 1:
        return [fn(*a) for a in args]
    workers = min(jobs, len(args))
    with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
        return list(pool.map(fn, *zip(*args, strict=True)))


def stage_dagger_bc(setup: Setup, seeds: list[int], work: Path, jobs: int) -> dict[str, Any]:
    t0 = time.monotonic()
    runs = _pool_map(dagger_and_bc, [(setup, s, work) for s in seeds], jobs)
    return {
        "setup": asdict(setup),
        "seeds": seeds,
        "jobs": jobs,
        "runs": runs,
        "wall_s": time.monotonic() - t0,
    }


def stage_policy_expert(
    setup: Setup, seed: int, work: Path, expert_policy: Path, iterations: int
) -> dict[str, Any]:
    """DAgger on pick_place with a checkpoint ``PolicyExpert`` (``policy:<snapshot>``) as the expert."""
    _threads()
    t0 = time.monotonic()
    own = evaluate(setup, expert_policy, work)
    _log(f"[policy expert] {expert_policy}: own student-only success {own['success_rate']:.2f}")
    pe_setup = Setup(**{**asdict(setup), "expert": f"policy:{expert_policy}", "iterations": iterations})
    run = dagger_run(pe_setup, seed, work, log=_log)
    return {
        "expert_policy": str(expert_policy),
        "expert_eval": own,
        "setup": asdict(pe_setup),
        "run": run,
        "wall_s": time.monotonic() - t0,
    }


def stage_fetch(seed: int, work: Path, iterations: int, episodes: int, eval_episodes: int) -> dict[str, Any]:
    """The same DAgger loop on Gymnasium-Robotics FetchPickAndPlace-v4 with the Fetch planner."""
    setup = Setup(
        task="gymnasium:FetchPickAndPlace-v4",
        num_envs=8,
        iterations=iterations,
        episodes_per_iteration=episodes,
        eval_episodes=eval_episodes,
        eval_num_envs=8,
    )
    t0 = time.monotonic()
    run = dagger_run(setup, seed, work, log=_log)
    return {"setup": asdict(setup), "run": run, "wall_s": time.monotonic() - t0}


# -- rendering docs/results.md ----------------------------------------------------------------


def _stats(xs: list[float]) -> tuple[float, float, float, float]:
    """mean, sample std (0 for one value), min, max."""
    return (
        statistics.fmean(xs),
        statistics.stdev(xs) if len(xs) > 1 else 0.0,
        min(xs),
        max(xs),
    )


def _fmt_pct(xs: list[float]) -> str:
    m, sd, lo, hi = _stats(xs)
    return f"{m:.0%} ± {sd:.0%} [{lo:.0%}–{hi:.0%}]" if len(xs) > 1 else f"{m:.0%}"


def comparison_rows(dagger_bc: dict[str, Any]) -> list[dict[str, Any]]:
    runs = dagger_bc["runs"]
    n_it = min(len(r["dagger"]["rows"]) for r in runs)
    rows = []
    for k in range(n_it):
        d = [r["dagger"]["rows"][k]["student"]["success_rate"] for r in runs]
        b = [r["bc"]["rows"][k]["student"]["success_rate"] for r in runs]
        labels = [r["dagger"]["rows"][k]["labels"] for r in runs]
        rows.append(
            {
                "iteration": k,
                "beta": runs[0]["dagger"]["rows"][k]["beta"],
                "labels": labels,
                "dagger": d,
                "bc": b,
                "gap": [x - y for x, y in zip(d, b, strict=True)],
                "collection": [r["dagger"]["rows"][k]["collection_success"] or 0.0 for r in runs],
                "bc_episodes": [r["bc"]["rows"][k]["episodes"] for r in runs],
                "dagger_episodes": [r["dagger"]["rows"][k]["episodes"] for r in runs],
            }
        )
    return rows


def plot_comparison(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for key, label, color in (("dagger", "DAgger (student-only)", "C0"), ("bc", "BC on expert_demo", "C1")):
        x = [statistics.fmean(r["labels"]) for r in rows]
        st = [_stats(r[key]) for r in rows]
        ax.plot(x, [s[0] for s in st], marker="o", color=color, label=f"{label}, mean")
        ax.fill_between(
            x, [s[2] for s in st], [s[3] for s in st], color=color, alpha=0.18, label=f"{label}, min–max"
        )
    ax.set_xlabel("expert labels used for training (equal budget)")
    ax.set_ylabel("student-only success")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(f"pick_place: DAgger vs BC at equal label budget ({len(rows[0]['dagger'])} seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _report_images(store: Path, out: Path, build_report: Any) -> dict[str, Path]:
    """``odsd report`` of ``store`` into ``out``; when the store is gone, the PNGs already there."""
    if store.is_dir():
        return build_report(store, out).images
    return {p.stem.replace("_", " "): p for p in sorted(out.glob("*.png"))}


def _final_failures(runs: list[dict[str, Any]]) -> str:
    """Student-only failure points of the final DAgger and BC students, summed over seeds."""
    totals: dict[str, dict[str, int]] = {"dagger": {}, "bc": {}}
    for run in runs:
        for arm, counts in totals.items():
            for phase, n in run[arm]["rows"][-1]["student"]["failure_points"].items():
                counts[phase] = counts.get(phase, 0) + n
    return (
        "Student-only failures at the final iteration, by the task phase the episode ended in (all seeds): "
        f"DAgger {totals['dagger'] or 'none'}; BC {totals['bc'] or 'none'}."
    )


def render(results: dict[str, Any], docs: Path) -> Path:
    """Write ``docs/results.md`` and ``docs/img/*`` from a results JSON (and the stores it names)."""
    from odsd.report import build_report

    img = docs / "img"
    img.mkdir(parents=True, exist_ok=True)
    (img / "results.json").write_text(json.dumps(results, indent=1))
    out: list[str] = []
    db = results.get("dagger_bc")
    if db:
        setup = db["setup"]
        rows = comparison_rows(db)
        plot_comparison(rows, img / "dagger_vs_bc.png")
        out += [
            "## DAgger vs BC on `pick_place` at an equal label budget",
            "",
            f"Seeds {db['seeds']}; DAgger: {setup['episodes_per_iteration']} committed episodes per iteration, "
            f"{setup['num_envs']} env rows, beta = 1.0 · {setup['beta_decay']}^k; learner retrained from scratch "
            f"each iteration for min({setup['steps_max']}, {setup['steps_base']} + {setup['steps_per_label']} · labels) "
            f"steps; student-only eval on {setup['eval_episodes']} episodes of the fixed eval seed {EVAL_SEED}. "
            f"Cells: mean ± sample std [min–max] over seeds. Stage wall time {db['wall_s'] / 60:.1f} min "
            f"({len(db['seeds'])} seeds, {db.get('jobs', 2)} worker processes on a shared 2-core machine, "
            "next to other jobs: the training times are inflated by CPU contention).",
            "",
            "![DAgger vs BC](img/dagger_vs_bc.png)",
            "",
            "| iteration | beta | labels (mean) | DAgger student-only | BC at the same labels | DAgger − BC "
            "| DAgger collection success | BC expert episodes |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in rows:
            out.append(
                f"| {r['iteration']} | {r['beta']:.3f} | {statistics.fmean(r['labels']):.0f} | {_fmt_pct(r['dagger'])} "
                f"| {_fmt_pct(r['bc'])} | {statistics.fmean(r['gap']) * 100:+.0f} pts "
                f"(min {min(r['gap']) * 100:+.0f}) | {_fmt_pct(r['collection'])} "
                f"| {statistics.fmean(r['bc_episodes']):.0f} |"
            )
        out += ["", "Per seed, final iteration (Wilson 95% CI):", ""]
        out += [
            "| seed | DAgger | BC | DAgger wall | BC wall (incl. expert_demo collection) |",
            "|---:|---|---|---:|---:|",
        ]
        for run in db["runs"]:
            d, b = run["dagger"]["rows"][-1]["student"], run["bc"]["rows"][-1]["student"]
            out.append(
                f"| {run['seed']} | {d['success_rate']:.0%} ({d['ci95'][0]:.0%}–{d['ci95'][1]:.0%}) "
                f"| {b['success_rate']:.0%} ({b['ci95'][0]:.0%}–{b['ci95'][1]:.0%}) "
                f"| {run['dagger']['wall_s']:.0f} s (collect {run['dagger']['collect_s']:.0f}, train "
                f"{run['dagger']['train_s']:.0f}, eval {run['dagger']['eval_s']:.0f}) | {run['bc']['wall_s']:.0f} s |"
            )
        out += ["", _final_failures(db["runs"]), ""]
        store = Path(db["runs"][0]["dagger"]["store"])
        images = _report_images(store, img / "report-dagger", build_report)
        if images:
            out += [
                f"### `odsd report` of the seed-{db['runs'][0]['seed']} DAgger store",
                "",
                "Made by `odsd report STORE --out docs/img/report-dagger` (same code as the CLI):",
                "",
            ]
            out += [f"![{name}](img/report-dagger/{p.name})" for name, p in images.items()]
            out.append("")
    base = json.loads(json.dumps({**asdict(Setup()), **(db or {}).get("setup", {})}))
    for key, ab in results.items():
        if not key.startswith("dagger_bc_") or not ab:
            continue
        changed = {k: v for k, v in ab["setup"].items() if base.get(k) != v}
        what = ", ".join(f"`{k}` = `{json.dumps(v)}`" for k, v in changed.items()) or "nothing"
        rows = comparison_rows(ab)
        plot_comparison(rows, img / f"{key}.png")
        out += [
            f"## Variant `{key}`",
            "",
            f"The same comparison; it differs from the main one in {what}. Seeds {ab['seeds']}; "
            f"stage wall time {ab['wall_s'] / 60:.1f} min.",
            "",
            f"![{key}](img/{key}.png)",
            "",
            "| iteration | labels (mean) | DAgger student-only | BC at the same labels | DAgger − BC |",
            "|---:|---:|---:|---:|---:|",
        ]
        for r in rows:
            out.append(
                f"| {r['iteration']} | {statistics.fmean(r['labels']):.0f} | {_fmt_pct(r['dagger'])} "
                f"| {_fmt_pct(r['bc'])} | {statistics.fmean(r['gap']) * 100:+.0f} pts (min {min(r['gap']) * 100:+.0f}) |"
            )
        finals = [(run["seed"], run["dagger"]["rows"][-1], run["bc"]["rows"][-1]) for run in ab["runs"]]
        out += [
            "",
            "Final iteration per seed: "
            + "; ".join(
                f"seed {seed}: DAgger {d['student']['success_rate']:.0%}, BC {b['student']['success_rate']:.0%} "
                f"at {d['labels']} labels"
                for seed, d, b in finals
            )
            + ". "
            + _final_failures(ab["runs"]),
            "",
        ]
    pe = results.get("policy_expert")
    if pe:
        run = pe["run"]
        ex = pe["expert_eval"]
        out += [
            "## Checkpoint `PolicyExpert` on `pick_place`",
            "",
            f"Expert `policy:<snapshot>` = `{Path(pe['expert_policy']).name}` (the final DAgger student of the first seed). "
            f"Its own student-only success: **{ex['success_rate']:.0%}** ({ex['ci95'][0]:.0%}–{ex['ci95'][1]:.0%}, "
            f"n={ex['episodes']}). DAgger with it as the labeler, {pe['setup']['iterations']} iterations "
            f"(wall {pe['wall_s'] / 60:.1f} min):",
            "",
            "| iteration | beta | labels | collection success | student-only success (95% CI) |",
            "|---:|---:|---:|---:|---:|",
        ]
        for r in run["rows"]:
            st = r["student"]
            cs = "–" if r["collection_success"] is None else f"{r['collection_success']:.0%}"
            out.append(
                f"| {r['iteration']} | {r['beta']:.3f} | {r['labels']} | {cs} "
                f"| {st['success_rate']:.0%} ({st['ci95'][0]:.0%}–{st['ci95'][1]:.0%}) |"
            )
        out.append("")
        images = _report_images(Path(run["store"]), img / "report-policy-expert", build_report)
        out += [f"![{n}](img/report-policy-expert/{p.name})" for n, p in images.items() if n == "success"]
        out.append("")
    fe = results.get("fetch")
    if fe:
        run = fe["run"]
        out += [
            "## Gymnasium-Robotics `FetchPickAndPlace-v4` (MuJoCo, CPU) with the Fetch planner",
            "",
            f"{fe['setup']['iterations']} iterations × {fe['setup']['episodes_per_iteration']} episodes, "
            f"{fe['setup']['num_envs']} env rows, same learner and protocol; wall {fe['wall_s'] / 60:.1f} min "
            f"(collect {run['collect_s']:.0f} s, train {run['train_s']:.0f} s, eval {run['eval_s']:.0f} s).",
            "",
            "| iteration | beta | labels | collection success | student-only success (95% CI) |",
            "|---:|---:|---:|---:|---:|",
        ]
        for r in run["rows"]:
            st = r["student"]
            cs = "–" if r["collection_success"] is None else f"{r['collection_success']:.0%}"
            out.append(
                f"| {r['iteration']} | {r['beta']:.3f} | {r['labels']} | {cs} "
                f"| {st['success_rate']:.0%} ({st['ci95'][0]:.0%}–{st['ci95'][1]:.0%}, n={st['episodes']}) |"
            )
        out.append("")
    body = "\n".join(out)
    path = docs / "results.md"
    text = path.read_text() if path.is_file() else ""
    if BEGIN in text and END in text:  # keep the hand-written narrative around the measured part
        head, rest = text.split(BEGIN, 1)
        text = f"{head}{BEGIN}\n{body}\n{END}{rest.split(END, 1)[1]}"
    else:
        text = f"# Results\n\n{BEGIN}\n{body}\n{END}\n"
    path.write_text(text)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny smoke run into a temp dir")
    ap.add_argument("--stages", nargs="+", default=["dagger_bc", "policy_expert", "fetch"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=None)
    ap.add_argument("--episodes-per-iteration", type=int, default=None)
    ap.add_argument("--eval-episodes", type=int, default=None)
    ap.add_argument("--task", default=None, help="task for dagger_bc (default: pick_place)")
    ap.add_argument("--num-envs", type=int, default=None, help="env rows of the collectors (default 16)")
    ap.add_argument("--eval-num-envs", type=int, default=None, help="env rows of an evaluation (default 25)")
    ap.add_argument("--task-kwargs", type=json.loads, default=None)
    ap.add_argument("--expert", default=None, help="expert name for dagger_bc (default: the task's planner)")
    ap.add_argument("--beta-decay", type=float, default=None, help="beta = decay^k (0: expert only at k=0)")
    ap.add_argument("--mixing", choices=["step", "episode"], default=None, help="DAgger beta mixing")
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--hidden", type=int, nargs="+", default=None, help="student MLP hidden sizes")
    ap.add_argument("--lr-schedule", choices=["cosine", "constant"], default=None)
    ap.add_argument("--steps", type=float, nargs=3, default=None, metavar=("BASE", "PER_LABEL", "MAX"))
    ap.add_argument("--work", type=Path, default=None, help="stores and policies (default: temp dir)")
    ap.add_argument("--out", type=Path, default=None, help="raw results JSON")
    ap.add_argument(
        "--expert-policy", type=Path, default=None, help="policy_expert stage: the checkpoint expert"
    )
    ap.add_argument("--pe-iterations", type=int, default=4)
    ap.add_argument("--fetch-iterations", type=int, default=4)
    ap.add_argument("--fetch-episodes", type=int, default=16)
    ap.add_argument("--docs", type=Path, default=None, help="render the tables/figures into DOCS (e.g. docs)")
    ap.add_argument("--render", type=Path, default=None, help="only render an existing results JSON")
    args = ap.parse_args(argv)
    if args.render is not None:
        _log(f"wrote {render(json.loads(args.render.read_text()), args.docs or ROOT / 'docs')}")
        return 0

    setup = Setup()
    if args.quick:
        setup = Setup(
            iterations=2, episodes_per_iteration=16, eval_episodes=25, steps_base=300, steps_max=300
        )
    overrides = {
        k: v
        for k, v in {
            "iterations": args.iterations,
            "episodes_per_iteration": args.episodes_per_iteration,
            "eval_episodes": args.eval_episodes,
            "task": args.task,
            "num_envs": args.num_envs,
            "eval_num_envs": args.eval_num_envs,
            "task_kwargs": args.task_kwargs,
            "expert": args.expert,
            "beta_decay": args.beta_decay,
            "mixing": args.mixing,
            "lr": args.lr,
            "hidden": None if args.hidden is None else tuple(args.hidden),
            "lr_schedule": args.lr_schedule,
            "steps_base": None if args.steps is None else int(args.steps[0]),
            "steps_per_label": None if args.steps is None else args.steps[1],
            "steps_max": None if args.steps is None else int(args.steps[2]),
        }.items()
        if v is not None
    }
    setup = Setup(**{**asdict(setup), **overrides})
    work = args.work or Path(tempfile.mkdtemp(prefix="odsd-results-"))
    work.mkdir(parents=True, exist_ok=True)
    seeds = args.seeds[:1] if args.quick else args.seeds
    results: dict[str, Any] = {
        "created": datetime.now(UTC).isoformat(),
        "host": {"python": sys.version.split()[0], "platform": platform.platform(), "cpus": os.cpu_count()},
        "quick": args.quick,
    }
    if "dagger_bc" in args.stages:
        results["dagger_bc"] = stage_dagger_bc(setup, seeds, work, args.jobs)
    if "policy_expert" in args.stages:
        expert_policy = args.expert_policy
        if expert_policy is None:  # reuse the final DAgger student of the first seed
            run = results["dagger_bc"]["runs"][0]["dagger"]
            expert_policy = Path(run["store"]) / "policies" / run["rows"][-1]["policy"]
        pe_iters = 2 if args.quick else args.pe_iterations
        results["policy_expert"] = stage_policy_expert(setup, seeds[0], work, expert_policy, pe_iters)
    if "fetch" in args.stages:
        f_iters, f_eps = (1, 8) if args.quick else (args.fetch_iterations, args.fetch_episodes)
        results["fetch"] = stage_fetch(
            seeds[0], work, f_iters, f_eps, 16 if args.quick else setup.eval_episodes
        )
    out = args.out or work / "results.json"
    out.write_text(json.dumps(results, indent=1))
    _log(f"wrote {out}")
    if args.docs is not None:
        _log(f"wrote {render(results, args.docs)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
