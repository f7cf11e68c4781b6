"""``odsd collect``, ``odsd eval`` and ``odsd check-env``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from odsd.cli.logs import json_line
from odsd.cli.output import console, err_console, print_json

ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="TOML run config.")]


def episode_bound(cfg: Any) -> int | None:
    """Accepted episodes at which the run stops (the smaller of its episode and iteration bounds)."""
    bounds = [cfg.max_episodes] if cfg.max_episodes is not None else []
    if cfg.max_iterations is not None:
        bounds.append(cfg.max_iterations * cfg.episodes_per_iteration)
    return min(bounds) if bounds else None


def _run_service(cfg: Any, state: Any, metrics_textfile: Path | None, json_logs: bool) -> None:
    """Run the collector service with the progress rendering the output calls for, then its summary."""
    from odsd.cli.logs import use_json_logs
    from odsd.cli.progress import RunProgress, choose_style
    from odsd.daemon.service import CollectService, ServiceOptions

    if json_logs:
        use_json_logs()
    progress = RunProgress(
        choose_style(json_logs),
        mode=cfg.mode,
        episode_bound=episode_bound(cfg),
        duration_s=cfg.duration_s,
        console=err_console,
    )
    with progress.active():
        summary = CollectService(
            cfg,
            options=ServiceOptions(metrics_textfile=metrics_textfile),
            on_report=progress.report,
            on_tick=progress.tick,
            resume_state=state,
        ).run()
    _print_summary(summary, cfg.store, json_logs=json_logs)


def image_encodings(items: list[str]) -> dict[str, str]:
    """``--image-codec`` values → ``{camera or "*": encoding}`` (``top=jpeg:90``, ``png``)."""
    out: dict[str, str] = {}
    for item in items:
        camera, sep, encoding = item.rpartition("=")
        if not encoding or (sep and not camera):
            raise typer.BadParameter(f"{item!r}: expected CAMERA=CODEC or CODEC", param_hint="--image-codec")
        out[camera or "*"] = encoding
    return out


def collect_cmd(
    config: ConfigOpt = None,
    mode: Annotated[str | None, typer.Option(help="expert_demo | dagger_sync.")] = None,
    task: Annotated[str | None, typer.Option(help="Built-in task, gymnasium:<id> or module:factory.")] = None,
    expert: Annotated[
        str | None,
        typer.Option(help="planner | policy:<snapshot> | lerobot:<pretrained dir> | module:factory."),
    ] = None,
    student: Annotated[
        str | None,
        typer.Option(
            help="Policy snapshot directory (default <store>/policies) or lerobot:<pretrained dir>."
        ),
    ] = None,
    num_envs: Annotated[int | None, typer.Option(help="Env rows stepped together.")] = None,
    device: Annotated[str | None, typer.Option(help="cpu, cuda, cuda:N, mps.")] = None,
    store: Annotated[Path | None, typer.Option(help="Episode store (created when missing).")] = None,
    episodes_per_iteration: Annotated[
        int | None, typer.Option(help="Committed episodes per iteration.")
    ] = None,
    max_episodes: Annotated[int | None, typer.Option(help="Stop after this many committed episodes.")] = None,
    max_iterations: Annotated[int | None, typer.Option(help="Stop after this many iterations.")] = None,
    duration: Annotated[float | None, typer.Option(help="Stop after this many seconds.")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of envs, mixing and the initial student.")] = None,
    keep_failed: Annotated[
        bool | None, typer.Option(help="expert_demo: also commit failed episodes.")
    ] = None,
    success_only: Annotated[bool | None, typer.Option(help="dagger_sync: commit only successes.")] = None,
    policy_wait: Annotated[
        float | None,
        typer.Option(help="Wait up to S seconds at a boundary for a newer student (odsd learn)."),
    ] = None,
    torch_threads: Annotated[
        int | None, typer.Option(help="torch intra-op threads (default: torch's).")
    ] = None,
    record_state: Annotated[
        bool | None,
        typer.Option("--record-state", help="Record the full simulator state per frame (replay)."),
    ] = None,
    durability: Annotated[str | None, typer.Option(help="fsync (default) | process.")] = None,
    writer: Annotated[
        str | None, typer.Option(help="Where commits are written: process (default) | thread.")
    ] = None,
    run_id: Annotated[str | None, typer.Option(help="Run id (default: time-based).")] = None,
    image_codec: Annotated[
        list[str] | None,
        typer.Option(
            "--image-codec",
            help="Store encoding of camera frames: CAMERA=CODEC or CODEC for all, e.g. top=jpeg:90 (repeatable).",
        ),
    ] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override any config field: dotted.name=value.")
    ] = None,
    json_logs: Annotated[bool, typer.Option("--json-logs", help="Progress as JSON lines on stderr.")] = False,
    metrics_textfile: Annotated[
        Path | None, typer.Option(help="Prometheus text file for node_exporter.")
    ] = None,
    resume_existing: Annotated[
        bool, typer.Option("--resume-existing", help="If run --run-id already has a run state, resume it.")
    ] = False,
) -> None:
    """Collect episodes into a store (expert_demo or dagger_sync); SIGTERM stops cleanly."""
    from odsd.collect import load_config
    from odsd.daemon.run_state import RunStateStore
    from odsd.daemon.service import load_resume

    overrides = {
        "mode": mode,
        "task": task,
        "expert": expert,
        "student": student,
        "num_envs": num_envs,
        "device": device,
        "store": store,
        "episodes_per_iteration": episodes_per_iteration,
        "max_episodes": max_episodes,
        "max_iterations": max_iterations,
        "duration_s": duration,
        "seed": seed,
        "keep_failed": keep_failed,
        "success_only": success_only,
        "record_state": record_state,
        "policy_wait_s": policy_wait,
        "torch_threads": torch_threads,
        "durability": durability,
        "writer": writer,
        "run_id": run_id,
        "image_encoding": image_encodings(image_codec) if image_codec else None,
    }
    cfg = load_config(config, overrides, set_)
    if cfg.mode == "eval":
        raise typer.BadParameter("use `odsd eval` for student-only evaluation", param_hint="--mode")
    state = None
    if resume_existing:
        if cfg.run_id is None:
            raise typer.BadParameter("--resume-existing needs --run-id", param_hint="--resume-existing")
        if RunStateStore(cfg.store / "runs" / cfg.run_id).sequences():
            cfg, state = load_resume(cfg.store, cfg.run_id, cfg.model_dump(exclude_unset=True))
    _run_service(cfg, state, metrics_textfile, json_logs)


def resume_cmd(
    store: Annotated[Path, typer.Argument(help="Store holding the run.")],
    run: Annotated[
        str | None, typer.Option("--run", help="Run id (default: the most recently active run).")
    ] = None,
    config: ConfigOpt = None,
    device: Annotated[str | None, typer.Option(help="cpu, cuda, cuda:N, mps.")] = None,
    max_episodes: Annotated[
        int | None, typer.Option(help="Stop after this many committed episodes (run total).")
    ] = None,
    max_iterations: Annotated[
        int | None, typer.Option(help="Stop after this many iterations (run total).")
    ] = None,
    duration: Annotated[float | None, typer.Option(help="Stop after this many seconds.")] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override a config field: dotted.name=value.")
    ] = None,
    metrics_textfile: Annotated[
        Path | None, typer.Option(help="Prometheus text file for node_exporter.")
    ] = None,
    json_logs: Annotated[bool, typer.Option("--json-logs", help="Progress as JSON lines on stderr.")] = False,
) -> None:
    """Continue a run from its newest complete run-state manifest (same run id, new writer)."""
    from odsd.collect.config import load_config
    from odsd.daemon.service import load_resume

    overrides: dict[str, Any] = {
        "device": device,
        "max_episodes": max_episodes,
        "max_iterations": max_iterations,
        "duration_s": duration,
    }
    if config is not None or set_:
        file_cfg = load_config(config, None, set_).model_dump(exclude_unset=True)
        overrides = {**file_cfg, **{k: v for k, v in overrides.items() if v is not None}}
    cfg, state = load_resume(store, run, overrides)
    _run_service(cfg, state, metrics_textfile, json_logs)


def _print_summary(summary: Any, store: Path, *, json_logs: bool = False) -> None:
    if json_logs:
        record = {"kind": "summary", **summary.__dict__, "store": str(store)}
        print(json_line(record), flush=True)
        return
    table = Table(title=f"odsd: run {summary.run_id} ({summary.stop_reason})")
    for col in ("iteration", "beta", "policy", "episodes", "committed", "success", "steps/s"):
        table.add_column(col, justify="right")
    for it in summary.per_iteration:
        sr = it.get("collection_success_rate")
        table.add_row(
            str(it["iteration"]),
            f"{it['beta']:.3f}",
            "-" if it["policy_version"] < 0 else f"v{it['policy_version']}",
            str(it["episodes_finished"]),
            str(it["episodes_committed"]),
            "-" if sr is None else f"{sr:.0%}",
            f"{it['env_steps_per_s']:.0f}",
        )
    console.print(table)
    console.print(
        f"store {store}: watermark {summary.watermark}, {summary.episodes_committed} episodes / "
        f"{summary.frames_committed} frames committed in {summary.elapsed_s:.1f}s"
    )


def eval_cmd(
    policy: Annotated[
        Path,
        typer.Option(
            help="Policy snapshot (vNNNNNN dir), a directory of snapshots, or lerobot:<pretrained dir>."
        ),
    ],
    task: Annotated[str, typer.Option(help="Task to evaluate on.")] = "pick_place",
    episodes: Annotated[int, typer.Option(min=1, help="Number of episodes.")] = 100,
    num_envs: Annotated[int, typer.Option(min=1, help="Env rows stepped together.")] = 16,
    device: Annotated[str, typer.Option(help="cpu, cuda, cuda:N, mps.")] = "cpu",
    seed: Annotated[int, typer.Option(help="Seed of the evaluation envs.")] = 1000,
    expert: Annotated[
        str,
        typer.Option(
            help="Expert used only to name the segment a failure ended in: auto (the task's planner "
            "when it has one), none, planner, policy:<dir>, module:factory."
        ),
    ] = "auto",
    store: Annotated[
        Path | None, typer.Option(help="Also commit the evaluation episodes to this store.")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """Run the student alone and report student-only success (95% CI), length and failure points."""
    from odsd.collect import CollectConfig, Collector
    from odsd.collect.evaluation import summarize_eval
    from odsd.envs.protocol import reports_success
    from odsd.policies.errors import SnapshotNotFoundError

    if not str(policy).startswith("lerobot:") and not policy.exists():
        raise SnapshotNotFoundError(f"{policy}: no such policy snapshot")
    cfg = CollectConfig(
        mode="eval",
        task=task,
        expert=expert,
        student=str(policy),
        num_envs=min(num_envs, episodes),
        device=device,
        seed=seed,
        max_episodes=episodes,
        store=store or Path("unused"),
        durability="process",
    )
    collector = Collector(cfg, commit_store=store is not None)
    collector.run()
    result = summarize_eval(collector.eval_episodes)
    success_signal = reports_success(collector.env) is not False
    data = {
        **result.__dict__,
        "policy": str(policy),
        "policy_version": collector.policy_version,
        "task": task,
        "success_signal": success_signal,
    }
    if json_out:
        print_json(data)
        return
    if not success_signal:
        err_console.print(
            escape(
                f"odsd: warning: task {task} reports no success signal (no info['is_success']): every "
                "episode counts as failed, so the success rate below is 0 by construction"
            ),
            highlight=False,
        )
    lo, hi = result.ci95
    console.print(
        f"student-only success on {task}: {result.success_rate:.1%} ({result.successes}/{result.episodes}, "
        f"95% CI {lo:.1%}–{hi:.1%}); mean length {result.mean_length:.1f}; policy v{collector.policy_version}"
    )
    if result.failure_points:
        table = Table(title="failed episodes by the segment they ended in")
        table.add_column("segment")
        table.add_column("failures", justify="right")
        for name, count in result.failure_points.items():
            table.add_row(name, str(count))
        console.print(table)


def check_env_cmd(
    task: Annotated[str, typer.Argument(help="Built-in task, gymnasium:<id> or module:factory.")],
    num_envs: Annotated[int, typer.Option(min=1)] = 2,
    device: Annotated[str, typer.Option()] = "cpu",
    steps: Annotated[int, typer.Option(min=1, help="Smoke-test steps.")] = 20,
    json_out: Annotated[bool, typer.Option("--json")] = False,
    task_kwargs: Annotated[
        str | None, typer.Option(help="Task arguments as a JSON object, e.g. '{\"image_size\": 64}'.")
    ] = None,
    images_dir: Annotated[
        Path | None,
        typer.Option(
            help="Where camera frames (row 0 of the first reset) go as PNGs (default: a new temp dir)."
        ),
    ] = None,
) -> int:
    """Build an env, validate its spec, run a reset/step smoke test and print the spec (and camera frames)."""
    from odsd.devices import check_device
    from odsd.envs import check_env
    from odsd.envs.check import parse_task_kwargs, prepare_images_dir
    from odsd.envs.registry import resolve_env_factory

    resolve_env_factory(task)  # an unknown task is a usage error (exit 2), not a failed check
    check_device(device)
    kwargs = parse_task_kwargs(task_kwargs)
    report = check_env(
        task,
        num_envs=num_envs,
        device=device,
        steps=steps,
        images_dir=None if images_dir is None else prepare_images_dir(images_dir),
        images_temp=True,
        **kwargs,
    )
    if json_out:
        print_json(report.to_dict())
    else:
        console.print(report.rich_table())
    return 0 if getattr(report, "ok", True) else 1
