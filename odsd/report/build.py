"""``build_report``: plots plus a short markdown summary for a store (``odsd report``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from odsd.report.data import ReportData, RunData, iteration_table, load_report_data


@dataclass
class ReportResult:
    out: Path
    summary: Path
    images: dict[str, Path] = field(default_factory=dict)
    runs: int = 0


def _pct(v: Any) -> str:
    return "–" if v is None else f"{float(v):.0%}"


def _num(v: Any, fmt: str = ".3f") -> str:
    return "–" if v is None else format(float(v), fmt)


def _run_section(rd: RunData) -> list[str]:
    lines = [
        f"### Run `{rd.run_id}`",
        "",
        f"mode `{rd.mode}`, task `{rd.task}`, expert `{rd.expert}`; in the store: {rd.episodes} episodes, "
        f"{rd.frames} frames, success {_pct(rd.successes / rd.episodes if rd.episodes else None)}.",
        "",
    ]
    table = iteration_table(rd)
    if table:
        lines += [
            "| iteration | beta | collected with | collection success | student-only success (95% CI) "
            "| labels | invalid labels | disagreement (L2) | env frames/s (wall, incl. boundary) |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in table:
            ci = r.get("student_ci95")
            student = _pct(r.get("student_success"))
            if ci and r.get("student_success") is not None:
                student += f" ({float(ci[0]):.0%}–{float(ci[1]):.0%}, n={r.get('student_episodes', '?')})"
            pv = r.get("policy_version")
            lines.append(
                f"| {r['iteration']} | {_num(r.get('beta'))} | {'–' if pv is None else f'v{pv}'} "
                f"| {_pct(r.get('collection_success'))} | {student} | {r.get('labels') or '–'} "
                f"| {_pct(r.get('invalid_label_rate'))} | {_num(r.get('disagreement'))} "
                f"| {_num(r.get('env_steps_per_s'), '.0f')} |"
            )
        lines.append("")
    if rd.segments:
        lines += [
            "Per segment (task phase), over the episodes in the store:",
            "",
            "| segment | episodes reaching it | mean frames | failed episodes ending in it | failure rate once reached "
            "| reasons |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for name, s in rd.segments.items():
            reasons = ", ".join(f"{k} {v}" for k, v in s.reasons.most_common()) or "–"
            lines.append(
                f"| {name} | {s.reached} | {s.mean_frames:.1f} | {s.failed_in} | {s.failure_rate:.1%} | {reasons} |"
            )
        lines.append("")
    return lines


def render_summary(data: ReportData, images: dict[str, Path], out: Path) -> str:
    lines = [
        "# odsd report",
        "",
        f"Store `{data.store}`: watermark {data.watermark}, {data.episodes} episodes, {data.frames} frames, "
        f"{len(data.runs)} run(s).",
        "",
    ]
    for name, path in images.items():
        lines += [f"![{name}]({path.relative_to(out).as_posix()})", ""]
    if not data.runs:
        lines += ["No runs in this store.", ""]
    for rd in data.runs:
        lines += _run_section(rd)
    return "\n".join(lines)


def build_report(store: Path, out: Path, run: str | None = None) -> ReportResult:
    """Write ``out/summary.md`` and ``out/*.png`` for ``store`` (one run or all of them)."""
    from odsd.report import plots

    plots.require_matplotlib()
    data = load_report_data(store, run)
    out.mkdir(parents=True, exist_ok=True)
    runs = data.runs
    images: dict[str, Path] = {}
    if runs:
        images["success"] = plots.plot_success(runs, out / "success.png")
        images["beta"] = plots.plot_metric(
            runs, "beta", out / "beta.png", "Beta (expert share) per iteration", "beta"
        )
        images["invalid labels"] = plots.plot_metric(
            runs,
            "invalid_label_rate",
            out / "invalid_labels.png",
            "Invalid expert labels per iteration",
            "rate",
        )
        images["disagreement"] = plots.plot_metric(
            runs,
            "disagreement_l2",
            out / "disagreement.png",
            "Expert/student disagreement per iteration",
            "mean L2 (raw action)",
        )
        images["throughput"] = plots.plot_throughput(runs, out / "throughput.png")
        failures = plots.plot_failures(runs, out / "failures.png")
        if failures is not None:
            images["failures"] = failures
    summary = out / "summary.md"
    summary.write_text(render_summary(data, images, out))
    return ReportResult(out=out, summary=summary, images=images, runs=len(runs))
