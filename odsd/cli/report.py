"""``odsd report STORE --out DIR``: PNG plots and a markdown summary of a store's runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from odsd.cli.output import console


def report_cmd(
    store: Annotated[Path, typer.Argument(help="Store directory.")],
    out: Annotated[Path, typer.Option("--out", help="Directory for summary.md and the PNG plots.")],
    run: Annotated[str | None, typer.Option("--run", help="Only this run (default: every run).")] = None,
) -> None:
    """Plots (student and collection success, beta, invalid labels, disagreement, throughput,
    failure segments) and a short markdown summary, from runs/*/metrics.jsonl and the store."""
    from odsd.report import build_report

    result = build_report(store, out, run)
    console.print(
        f"odsd report: {result.runs} run(s); wrote {result.summary} and {len(result.images)} plot(s) in {result.out}",
        highlight=False,
    )
