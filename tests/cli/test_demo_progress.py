"""`odsd demo` shows its training rounds: a progress bar on a terminal, lines when redirected."""

from __future__ import annotations

import re
from pathlib import Path

from cli_helpers import odsd, odsd_on_pty

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def demo_args(out: Path) -> list[str]:
    return [
        *("demo", "--out", str(out), "--task", "reach", "--iterations", "1", "--num-envs", "4"),
        *("--episodes-per-iteration", "8", "--train-steps", "200", "--eval-episodes", "4"),
    ]


def test_demo_prints_training_progress_when_redirected(tmp_path: Path) -> None:
    proc = odsd(*demo_args(tmp_path / "demo"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("training v1: step")]
    assert [line.split(",")[0] for line in lines] == [
        f"training v1: step {s}/200" for s in (50, 100, 150, 200)
    ]
    assert "evaluating v000001 alone on 4 episodes" in proc.stdout


def test_demo_shows_a_training_bar_on_a_terminal(tmp_path: Path) -> None:
    rc, out = odsd_on_pty(*demo_args(tmp_path / "demo"))
    text = ANSI.sub("", out)
    assert rc == 0, text[-3000:]
    assert re.search(r"training v1 .*200/200 steps · loss \d\.\d{4}", text), text[-3000:]
