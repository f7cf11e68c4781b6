"""``odsd replay`` and ``odsd store verify``: reproduce recorded episodes and check determinism.

Registered by the application as::

    app.command("replay")(replay_cmd)
    store_app.command("verify")(verify_cmd)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from odsd.cli.output import console, print_json
from odsd.devices import check_device
from odsd.replay.defaults import DEFAULT_ATOL, DEFAULT_ENV_ROWS, MODES
from odsd.replay.errors import ReplayError
from odsd.store import EpisodeStore

if TYPE_CHECKING:
    from odsd.replay.replay import ReplayReport

StorePath = Annotated[Path, typer.Argument(help="Store directory.")]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
AtolOpt = Annotated[float, typer.Option(help="Largest |replayed - recorded| still counted as reproduced.")]
TaskOpt = Annotated[
    str | None, typer.Option(help="Replay in this task instead of the recorded one (spec still checked).")
]
DeviceOpt = Annotated[
    str, typer.Option(callback=check_device, help="Device of the replay env (cpu, cuda, cuda:N).")
]
VERIFY_FAILED_EXIT = 4


def _fmt(value: float) -> str:
    return "0" if value == 0 else f"{value:.2e}"


def _table(report: ReplayReport, title: str) -> Table:
    table = Table(title=title)
    for col in ("episode", "length", "frames", "max obs dev", "max state dev", "recorded", "replayed", "ok"):
        table.add_column(col, justify="right")
    for e in report.episodes:
        table.add_row(
            str(e.episode_id),
            str(e.length),
            str(e.frames_compared),
            _fmt(e.max_obs_dev),
            _fmt(e.max_state_dev) if report.mode == "dynamic" else "-",
            e.recorded_terminal or "-",
            e.replayed_terminal or "-",
            "[green]yes[/]" if e.reproduced else "[red]no[/]",
        )
    return table


def _print_failures(report: ReplayReport) -> None:
    for e in report.failed:
        console.print(f"[red]episode {e.episode_id}[/]: {e.explanation}", highlight=False)


def replay_cmd(
    store: StorePath,
    episode: Annotated[
        list[int], typer.Option("--episode", "-e", help="Episode id to replay; repeat for several.")
    ],
    mode: Annotated[str, typer.Option(help="kinematic (set recorded state) | dynamic (re-simulate).")] = (
        "kinematic"
    ),
    env_rows: Annotated[
        int | None, typer.Option(min=1, help="Env rows replayed in parallel (default: one per episode).")
    ] = None,
    gif: Annotated[
        Path | None, typer.Option(help="Write a top/side view GIF (one per episode: OUT-<id>.gif).")
    ] = None,
    task: TaskOpt = None,
    device: DeviceOpt = "cpu",
    atol: AtolOpt = DEFAULT_ATOL,
    watermark: Annotated[int | None, typer.Option(help="Replay the view at this watermark.")] = None,
    json_out: JsonFlag = False,
) -> None:
    """Replay episodes: kinematic sets the recorded state each step; dynamic feeds the recorded
    actions through env.step from the recorded initial state and reports the per-step deviation."""
    if mode not in MODES:
        raise ReplayError(f"--mode must be one of {', '.join(MODES)}, got {mode!r}")
    snap = EpisodeStore.open(store).snapshot(watermark)
    try:
        from odsd.replay.replay import replay_episodes

        report = replay_episodes(
            snap, episode, mode=mode, env_rows=env_rows, device=device, task=task, atol=atol
        )  # type: ignore[arg-type]
        gifs: list[str] = []
        if gif is not None:
            from odsd.replay.render import gif_paths, render_gif

            for e, path in zip(report.episodes, gif_paths(gif, episode), strict=True):
                replayed = e.replayed_observation if mode == "dynamic" else None
                gifs.append(str(render_gif(snap, e.episode_id, path, replayed=replayed)))
    finally:
        snap.close()
    if json_out:
        print_json({**report.to_json(), "gifs": gifs})
        return
    console.print(_table(report, f"{mode} replay of {len(report.episodes)} episode(s) from {store}"))
    _print_failures(report)
    summary = f"max observation deviation {_fmt(report.max_obs_dev)}"
    if mode == "dynamic":
        summary += f", max state deviation {_fmt(report.max_state_dev)}"
    console.print(f"{summary}; {len(report.failed)} of {len(report.episodes)} not reproduced (atol {atol:g})")
    for path in gifs:
        console.print(f"wrote {path}")


def verify_cmd(
    path: StorePath,
    replay: Annotated[
        bool, typer.Option("--replay", help="Re-simulate dynamically (default: kinematic state check).")
    ] = False,
    sample: Annotated[
        int | None, typer.Option(min=1, help="Verify this many randomly chosen episodes (default all).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the episode sample.")] = 0,
    env_rows: Annotated[int, typer.Option(min=1, help="Env rows replayed in parallel.")] = DEFAULT_ENV_ROWS,
    task: TaskOpt = None,
    device: DeviceOpt = "cpu",
    atol: AtolOpt = DEFAULT_ATOL,
    json_out: JsonFlag = False,
) -> int:
    """Replay a sample of episodes and report determinism; exit 4 if any does not reproduce."""
    from odsd.replay.verify import verify_store

    result = verify_store(
        EpisodeStore.open(path),
        replay=replay,
        sample=sample,
        seed=seed,
        env_rows=env_rows,
        atol=atol,
        device=device,
        task=task,
    )
    report = result.replay
    if json_out:
        print_json(result.to_json())
    else:
        if report.episodes:
            console.print(_table(report, f"{report.mode} verify of {path} (watermark {result.watermark})"))
        _print_failures(report)
        for eid, reason in result.skipped.items():
            console.print(f"[yellow]skipped episode {eid}[/]: {reason}", highlight=False)
        verdict = "ok" if result.ok else f"{len(report.failed)} not reproduced, {len(result.skipped)} skipped"
        detail = f"max observation deviation {_fmt(report.max_obs_dev)}"
        if report.mode == "dynamic":
            detail += f", max state deviation {_fmt(report.max_state_dev)}"
        console.print(
            f"verify {path}: {verdict}; {len(result.sampled)} of {result.episodes_total} episodes "
            f"{'re-simulated' if replay else 'checked'}, {detail}"
        )
    return 0 if result.ok else VERIFY_FAILED_EXIT
