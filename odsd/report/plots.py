"""PNG plots of a store's runs (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from odsd.report.data import RunData, eval_failure_points

try:  # the ``report`` extra
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator
except ImportError:  # pragma: no cover - exercised only without the extra
    plt = None  # type: ignore[assignment]

DPI = 110


def require_matplotlib() -> None:
    if plt is None:
        from odsd.errors import ConfigError

        raise ConfigError("odsd report needs matplotlib: pip install 'odsd[report]'")


def _label(rd: RunData, many: bool) -> str:
    short = rd.run_id if len(rd.run_id) <= 24 else rd.run_id[:24] + "…"
    return f"{short} ({rd.mode})" if many else rd.mode


def _finish(fig: Any, ax: Any, path: Path, title: str, ylabel: str, *, legend: bool = True) -> Path:
    ax.set_title(title)
    ax.set_xlabel("iteration")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if legend and ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def _series(ax: Any, pts: Sequence[tuple[int, float]], label: str, **kw: Any) -> bool:
    if not pts:
        return False
    xs, ys = zip(*pts, strict=True)
    ax.plot(xs, ys, marker="o", label=label, **kw)
    return True


def plot_success(runs: list[RunData], path: Path) -> Path:
    """Student-only success (with its Wilson 95% CI) and collection success, per iteration."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    many = len(runs) > 1
    for i, rd in enumerate(runs):
        color = f"C{i % 10}"
        coll = [(k, v) for k, v in rd.metric("collection_success_rate")]
        if rd.mode != "eval":
            _series(
                ax, coll, f"collection success — {_label(rd, many)}", color=color, linestyle="--", alpha=0.7
            )
        ev = [(int(e["iteration"]), float(e["success_rate"])) for e in rd.evals if "success_rate" in e]
        if ev:
            _series(ax, ev, f"student-only success — {_label(rd, many)}", color=color)
            lo = [float(e["ci95"][0]) for e in rd.evals if e.get("ci95")]
            hi = [float(e["ci95"][1]) for e in rd.evals if e.get("ci95")]
            if len(lo) == len(ev):
                ax.fill_between([x for x, _ in ev], lo, hi, color=color, alpha=0.15)
    ax.set_ylim(-0.02, 1.02)
    return _finish(fig, ax, path, "Success per iteration", "success rate")


def plot_metric(runs: list[RunData], key: str, path: Path, title: str, ylabel: str) -> Path:
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    many = len(runs) > 1
    for i, rd in enumerate(runs):
        _series(ax, rd.metric(key), _label(rd, many), color=f"C{i % 10}")
    return _finish(fig, ax, path, title, ylabel, legend=many)


def plot_throughput(runs: list[RunData], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    many = len(runs) > 1
    for i, rd in enumerate(runs):
        color = f"C{i % 10}"
        _series(ax, rd.metric("env_steps_per_s"), f"env frames/s — {_label(rd, many)}", color=color)
        _series(
            ax,
            rd.metric("frames_committed_per_s"),
            f"committed frames/s — {_label(rd, many)}",
            color=color,
            linestyle="--",
        )
    return _finish(
        fig,
        ax,
        path,
        "Throughput per iteration (wall clock, incl. time blocked at the boundary)",
        "frames / s",
    )


def plot_failures(runs: list[RunData], path: Path) -> Path | None:
    """Stacked bars: where failed episodes ended (segment), per iteration.

    Student-only evaluation failures when the runs carry them, else collected-episode failures.
    """
    rows: list[tuple[str, dict[str, int]]] = []
    source = "student-only eval"
    for rd in runs:
        for k, points in sorted(eval_failure_points(rd).items()):
            rows.append((f"{rd.run_id[:6]}:{k}" if len(runs) > 1 else str(k), points))
    if not rows:
        source = "collected episodes"
        for rd in runs:
            for k, counter in sorted(rd.failure_points_by_iteration.items()):
                rows.append((f"{rd.run_id[:6]}:{k}" if len(runs) > 1 else str(k), dict(counter)))
    if not rows:
        return None
    names = sorted({n for _, pts in rows for n in pts})
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    bottom = [0] * len(rows)
    for j, name in enumerate(names):
        vals = [pts.get(name, 0) for _, pts in rows]
        ax.bar(range(len(rows)), vals, bottom=bottom, label=name, color=f"C{j % 10}")
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.set_xticks(range(len(rows)), [r for r, _ in rows], rotation=45 if len(rows) > 12 else 0, fontsize=8)
    return _finish(fig, ax, path, f"Failed episodes by the segment they ended in ({source})", "episodes")
