"""``odsd demo``: the README's main job."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeRemainingColumn
from rich.table import Table

from odsd.cli.output import console
from odsd.devices import check_device

if TYPE_CHECKING:
    from odsd.learn.demo import TrainProgress


@contextmanager
def training_progress(console: Console) -> Iterator[TrainProgress]:
    """A progress bar per training round on a terminal; otherwise a line at every quarter."""
    if not console.is_terminal:
        printed: dict[str, int] = {}

        def line(name: str, step: int, total: int, loss: float) -> None:
            quarter = 4 * step // max(total, 1)  # one line per quarter of the round
            if quarter > printed.get(name, 0):
                printed[name] = quarter
                console.print(f"training {name}: step {step}/{total}, loss {loss:.4f}", highlight=False)

        yield line
        return
    bars = Progress(
        TextColumn("training {task.fields[name]}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("steps · loss {task.fields[loss]}"),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )
    tasks: dict[str, TaskID] = {}

    def update(name: str, step: int, total: int, loss: float) -> None:
        if name not in tasks:
            tasks[name] = bars.add_task(name, total=total, name=name, loss="-")
        bars.update(tasks[name], completed=step, loss=f"{loss:.4f}")

    with bars:
        yield update


def demo_cmd(
    out: Annotated[
        Path, typer.Option(help="Directory for the demo store (replaced on each demo run).")
    ] = Path("odsd-demo"),
    task: Annotated[str, typer.Option(help="Built-in task.")] = "pick_place",
    iterations: Annotated[int, typer.Option(min=1, help="DAgger iterations.")] = 5,
    num_envs: Annotated[int, typer.Option(min=1)] = 16,
    episodes_per_iteration: Annotated[int, typer.Option(min=1)] = 32,
    train_steps: Annotated[int, typer.Option(min=1, help="Learner steps per iteration.")] = 1500,
    eval_episodes: Annotated[int, typer.Option(min=1, help="Student-only evaluation episodes.")] = 48,
    seed: Annotated[int, typer.Option()] = 0,
    device: Annotated[str, typer.Option(callback=check_device, help="cpu, cuda, cuda:N, mps.")] = "cpu",
) -> None:
    """A short DAgger run: collect, train the reference MLP, evaluate the student, repeat."""
    from odsd.cli.store import summarize
    from odsd.learn.demo import DemoConfig, run_demo
    from odsd.store import EpisodeStore

    cfg = DemoConfig(
        out=out,
        task=task,
        num_envs=num_envs,
        episodes_per_iteration=episodes_per_iteration,
        iterations=iterations,
        train_steps=train_steps,
        eval_episodes=eval_episodes,
        seed=seed,
        device=device,
    )
    console.print(f"odsd demo: DAgger on {task}, {iterations} iterations x {episodes_per_iteration} episodes")
    with training_progress(console) as on_train_step:
        result = run_demo(
            cfg,
            progress=lambda line: console.print(escape(line), highlight=False),
            on_train_step=on_train_step,
        )
    table = Table(title="DAgger demo summary")
    for col in (
        "iteration",
        "beta",
        "collected with",
        "collection success",
        "episodes in store",
        "student-only success (95% CI)",
    ):
        table.add_column(col, justify="right")
    for r in result.rows:
        cs = "-" if r.collection_success is None else f"{r.collection_success:.0%}"
        lo, hi = r.student_ci95
        table.add_row(
            str(r.iteration),
            f"{r.beta:.3f}",
            f"v{r.policy_version}",
            cs,
            str(r.episodes_committed),
            f"{r.student_success:.0%} ({lo:.0%}–{hi:.0%})",
        )
    console.print(table)
    info = summarize(EpisodeStore.open(result.store))
    console.print(
        f"initial student success {result.initial_student_success:.0%}; store {result.store}: watermark "
        f"{info['watermark']}, {info['episodes']} episodes, {info['frames']} frames, "
        f"{info['bytes_per_frame']:.0f} B/frame. Inspect it with `odsd store inspect {result.store}`."
    )
