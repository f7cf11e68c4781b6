"""The live view of `odsd collect` on a terminal, and plain lines when its output is redirected."""

from __future__ import annotations

import re
from pathlib import Path

from cli_helpers import odsd, odsd_on_pty, reach_collect_args

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def test_live_view_on_a_pseudo_terminal(tmp_path: Path) -> None:
    """On a terminal: the episode bound (M/120 episodes), ETA and rates in the rich progress view;
    iteration records stay visible as lines with their `[iteration]` tag (not eaten as markup)."""
    args = reach_collect_args(tmp_path / "store", "--set", "metrics_interval_s=0.5", per_iteration=40)
    rc, out = odsd_on_pty(*args)
    text = ANSI.sub("", out)
    assert rc == 0, text[-3000:]
    assert re.search(r"\b\d+/120 episodes\b", text), text[-3000:]
    assert "120/120 episodes" in text, text[-3000:]
    assert re.search(r"ETA \d+:\d\d:\d\d", text), text[-3000:]  # an estimate, not only -:--:--
    assert "ETA" in text and "steps/s" in text and "frames/s" in text and "commit lag" in text
    assert re.search(r"beta \d\.\d{3}", text) and re.search(r"\bit \d\b", text)
    assert text.count("[iteration] it=") == 3, text[-3000:]
    assert "\x1b[" in out  # it really is the live rendering (cursor movement / colour)


def test_plain_lines_when_redirected(tmp_path: Path) -> None:
    proc = odsd(*reach_collect_args(tmp_path / "store", "--set", "metrics_interval_s=0.5"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "\x1b[" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("[")]
    assert sum(line.startswith("[iteration] it=") for line in lines) == 3, proc.stderr
    assert all(line.startswith(("[rolling] it=", "[iteration] it=")) for line in lines), lines
    assert "ETA" not in proc.stderr and "episodes" in proc.stderr


def test_record_line_for_a_run_without_a_student() -> None:
    """expert_demo has no student: its records say `policy=-`, not `policy=v-1`."""
    from odsd.cli.progress import record_line

    line = record_line("rolling", {"iteration": 0, "beta": 1.0, "policy_version": -1, "env_steps_per_s": 10})
    assert "policy=-" in line and "v-1" not in line
