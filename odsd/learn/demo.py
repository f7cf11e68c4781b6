"""``odsd demo``: a short DAgger run on a built-in task, alternating collection and training.

One process alternates: the collector runs iterations; at every iteration boundary (after the
iteration's episodes are committed) the reference learner trains on everything committed so far,
publishes the next student snapshot, and the student alone is evaluated. The collector then loads
that snapshot for the next iteration.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from odsd.collect import BetaSchedule, CollectConfig, Collector
from odsd.collect.evaluation import EvalResult, append_eval_record, summarize_eval
from odsd.errors import ConfigError
from odsd.learn.bc import BCConfig, publish_bc, train_bc
from odsd.lerobot import OdsdLeRobotDataset

MARKER = ".odsd-demo"


@dataclass(frozen=True)
class DemoConfig:
    out: Path = Path("odsd-demo")
    task: str = "pick_place"
    num_envs: int = 16
    episodes_per_iteration: int = 32
    iterations: int = 5
    train_steps: int = 1500
    eval_episodes: int = 48
    seed: int = 0
    device: str = "cpu"


@dataclass
class DemoRow:
    iteration: int
    beta: float
    policy_version: int
    collection_success: float | None
    episodes_committed: int
    student_success: float
    student_ci95: tuple[float, float]


@dataclass
class DemoResult:
    store: Path
    initial_student_success: float
    rows: list[DemoRow] = field(default_factory=list)


def evaluate_student(cfg: DemoConfig, policies: Path, seed: int) -> EvalResult:
    eval_cfg = CollectConfig(
        mode="eval",
        task=cfg.task,
        student=str(policies),
        num_envs=min(cfg.num_envs, cfg.eval_episodes),
        max_episodes=cfg.eval_episodes,
        seed=seed,
        device=cfg.device,
        store=cfg.out / "unused",
    )
    collector = Collector(eval_cfg, commit_store=False)
    collector.run()
    return summarize_eval(collector.eval_episodes)


def prepare_out(out: Path) -> None:
    if out.exists():
        if not (out / MARKER).exists():
            raise ConfigError(f"{out}: exists and was not made by odsd demo; choose another --out")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / MARKER).write_text("made by odsd demo; deleted by the next demo run\n")


TrainProgress = Callable[[str, int, int, float], None]
"""``(snapshot name, step, total steps, loss)`` while the learner trains."""


def run_demo(
    cfg: DemoConfig, progress: Callable[[str], None] = print, on_train_step: TrainProgress | None = None
) -> DemoResult:
    """Run the demo; ``progress`` receives one human-readable line per event and ``on_train_step``
    the training progress of each round (every 50 steps)."""
    torch.set_num_threads(max(1, min(torch.get_num_threads(), 4)))
    prepare_out(cfg.out)
    store_path = cfg.out / "store"
    policies = store_path / "policies"
    collect_cfg = CollectConfig(
        mode="dagger_sync",
        task=cfg.task,
        num_envs=cfg.num_envs,
        store=store_path,
        seed=cfg.seed,
        device=cfg.device,
        episodes_per_iteration=cfg.episodes_per_iteration,
        max_iterations=cfg.iterations,
        beta=BetaSchedule(kind="exponential", init_beta=1.0, decay=0.5, beta_min=0.0),
        durability="process",
        commit_max_age_s=1.0,
        metrics_interval_s=3600,
    )
    rows: list[DemoRow] = []
    holder: dict[str, Any] = {}

    def on_report(kind: str, record: dict[str, Any]) -> None:
        if kind != "iteration":
            return
        collector: Collector = holder["collector"]
        dataset = OdsdLeRobotDataset(store_path)
        name = f"v{record['iteration'] + 1}"
        progress(f"iteration {record['iteration']}: collected; training {name} on {len(dataset)} labels")

        def on_step(step: int, loss: float) -> None:
            if on_train_step is not None:
                on_train_step(name, step, cfg.train_steps, loss)

        model = train_bc(
            dataset,
            collector.spec,
            BCConfig(steps=cfg.train_steps, seed=cfg.seed, device=cfg.device),
            on_step=on_step,
        )
        path = publish_bc(policies, model, collector.spec, dataset)
        progress(f"evaluating {path.name} alone on {cfg.eval_episodes} episodes")
        result = evaluate_student(cfg, path, seed=10_000 + record["iteration"])
        assert collector.run_dir is not None
        append_eval_record(
            collector.run_dir,
            run_id=collector.run_id,
            iteration=record["iteration"],
            policy_version=int(path.name[1:]),
            result=result,
            labels=len(dataset),
        )
        row = DemoRow(
            iteration=record["iteration"],
            beta=record["beta"],
            policy_version=record["policy_version"],
            collection_success=record.get("collection_success_rate"),
            episodes_committed=dataset.meta.total_episodes,
            student_success=result.success_rate,
            student_ci95=result.ci95,
        )
        rows.append(row)
        cs = "-" if row.collection_success is None else f"{row.collection_success:.0%}"
        progress(
            f"iteration {row.iteration}: beta {row.beta:.3f}, collected with student v{row.policy_version}, "
            f"collection success {cs}, {row.episodes_committed} episodes committed; trained {path.name}: "
            f"student-only success {row.student_success:.0%}"
        )

    collector = Collector(collect_cfg)
    holder["collector"] = collector
    policies.mkdir(parents=True, exist_ok=True)
    from odsd.collect.student import publish_initial_student

    publish_initial_student(policies, collector.spec, seed=cfg.seed)
    initial = evaluate_student(cfg, policies, seed=9_999)
    progress(f"initial student v0 (untrained): student-only success {initial.success_rate:.0%}")
    collector.on_report = on_report
    collector.run()
    return DemoResult(store=store_path, initial_student_success=initial.success_rate, rows=rows)
