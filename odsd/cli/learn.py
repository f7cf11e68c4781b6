"""``odsd learn``: the reference learner process."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from odsd.cli.output import console
from odsd.devices import check_device


def learn_cmd(
    store: Annotated[Path, typer.Argument(help="Store the collector writes.")],
    policies: Annotated[
        Path | None, typer.Option(help="Snapshot directory (default <store>/policies).")
    ] = None,
    task: Annotated[
        str | None, typer.Option(help="Task of the policy (default: the store's newest run).")
    ] = None,
    min_new_episodes: Annotated[
        int, typer.Option(min=1, help="Newly committed episodes before a round.")
    ] = 32,
    steps: Annotated[int, typer.Option(min=1, help="Optimizer steps per round.")] = 2000,
    batch_size: Annotated[int, typer.Option(min=1)] = 256,
    lr: Annotated[float, typer.Option(min=0.0)] = 3e-3,
    recent: Annotated[int | None, typer.Option(min=1, help="Favour the K newest episodes ...")] = None,
    recent_fraction: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="... for this share of a batch.")
    ] = 0.0,
    segment: Annotated[
        list[str] | None,
        typer.Option("--segment", help="Train only on frames of segments with this name (repeatable)."),
    ] = None,
    warm_start: Annotated[bool, typer.Option(help="Continue from the newest snapshot.")] = True,
    max_rounds: Annotated[int | None, typer.Option(min=1, help="Stop after this many rounds.")] = None,
    once: Annotated[
        bool, typer.Option("--once", help="One round on what is committed now, then exit.")
    ] = False,
    poll: Annotated[float, typer.Option(min=0.05, help="Seconds between readiness checks.")] = 1.0,
    device: Annotated[str, typer.Option(callback=check_device, help="cpu, cuda, cuda:N, mps.")] = "cpu",
    seed: Annotated[int, typer.Option()] = 0,
    torch_threads: Annotated[int | None, typer.Option(min=1, help="torch intra-op threads.")] = None,
) -> None:
    """Train the reference MLP on committed data and publish snapshots; SIGTERM stops after the round."""
    from odsd.daemon.signals import SignalHandlers
    from odsd.learn.bc import BCConfig
    from odsd.learn.learner import Learner, LearnerConfig, wait_for_store

    if torch_threads is not None:
        import torch

        torch.set_num_threads(torch_threads)
    cfg = LearnerConfig(
        store=store,
        policies_dir=policies,
        task=task,
        min_new_episodes=min_new_episodes,
        bc=BCConfig(steps=steps, batch_size=batch_size, lr=lr, seed=seed, device=device),
        recent=recent,
        recent_fraction=recent_fraction,
        segments=tuple(segment) if segment else None,
        warm_start=warm_start,
        max_rounds=1 if once else max_rounds,
        poll_interval_s=poll,
    )
    if once:
        path = Learner(cfg).round()
        console.print(f"published {path}")
        return
    with SignalHandlers() as signals:
        if not wait_for_store(cfg, signals.stop):
            return
        rounds = Learner(cfg).run(signals.stop)
    console.print(f"odsd learn: {rounds} round(s); newest snapshot in {cfg.policies}")
