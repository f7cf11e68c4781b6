"""``odsd status``: what the runs of a store are doing."""

from __future__ import annotations

import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from odsd.cli.output import console, print_json
from odsd.daemon.errors import RunStateError
from odsd.daemon.lock import pid_alive
from odsd.daemon.status import read_status
from odsd.schema.run import RunStatus
from odsd.store import EpisodeStore


def _liveness(status: RunStatus) -> str:
    if status.state in ("stopped", "failed"):
        return status.state
    if status.host == socket.gethostname() and not pid_alive(status.pid):
        return "dead (process gone)"
    return status.state


def run_rows(store: EpisodeStore, run: str | None) -> list[dict[str, Any]]:
    runs_dir = store.root / "runs"
    names = [run] if run else sorted(p.name for p in runs_dir.iterdir()) if runs_dir.is_dir() else []
    rows: list[dict[str, Any]] = []
    now = datetime.now(UTC)
    for name in names:
        run_dir = runs_dir / name
        if not run_dir.is_dir():
            raise RunStateError(f"{run_dir}: no such run in this store")
        status = read_status(run_dir)
        if status is None:
            rows.append({"run_id": name, "state": "unknown (no status.json)"})
            continue
        age = (now - datetime.fromisoformat(status.heartbeat)).total_seconds()
        rows.append(
            {**status.model_dump(mode="json"), "state": _liveness(status), "heartbeat_age_s": round(age, 1)}
        )
    return rows


def status_cmd(
    store: Annotated[Path, typer.Argument(help="Store directory.")],
    run: Annotated[str | None, typer.Option("--run", help="Only this run.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """Runs with state, heartbeat age, iteration, beta, policy version, counts, rates and last error."""
    opened = EpisodeStore.open(store)
    rows = run_rows(opened, run)
    watermark = opened.watermark
    if json_out:
        print_json({"store": str(opened.root), "watermark": watermark, "runs": rows})
        return
    console.print(f"store {opened.root}: watermark {watermark}")
    if not rows:
        console.print("no runs")
        return
    table = Table()
    for col in (
        "run",
        "state",
        "heartbeat",
        "iteration",
        "beta",
        "policy",
        "episodes",
        "frames",
        "steps/s",
        "success",
        "last error",
    ):
        table.add_column(col)
    for r in rows:
        counters = r.get("counters") or {}
        sr = r.get("collection_success_rate")
        steps = r.get("env_steps_per_s")
        table.add_row(
            r["run_id"],
            r["state"],
            f"{r['heartbeat_age_s']}s ago" if "heartbeat_age_s" in r else "-",
            str(r.get("iteration", "-")),
            "-" if r.get("beta") is None else f"{r['beta']:.3f}",
            "-" if r.get("policy_version") is None else f"v{r['policy_version']}",
            str(counters.get("episodes_committed", "-")),
            str(counters.get("frames_committed", "-")),
            "-" if steps is None else f"{steps:.0f}",
            "-" if sr is None else f"{sr:.0%}",
            r.get("last_error") or "-",
        )
    console.print(table)
