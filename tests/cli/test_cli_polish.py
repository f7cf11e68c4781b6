"""What a new user meets first: no command, --version, flag help, eval defaults, the command list in docs/cli.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cli_helpers import odsd

from odsd import __version__
from odsd.cli import app

DOCS = Path(__file__).resolve().parents[2] / "docs"


def one_error_line(stderr: str) -> str:
    errors = [line for line in stderr.splitlines() if line.startswith("odsd: error:")]
    assert len(errors) == 1, stderr
    return errors[0]


@pytest.mark.parametrize(("args", "path"), [((), "odsd"), (("store",), "odsd store")])
def test_no_command_says_so(args: tuple[str, ...], path: str) -> None:
    proc = odsd(*args)
    assert proc.returncode == 2
    assert one_error_line(proc.stderr) == f"odsd: error: missing command (see `{path} --help`)"
    assert "Usage:" in proc.stdout + proc.stderr


def test_version_flag_and_command() -> None:
    for args in (("--version",), ("version",)):
        proc = odsd(*args)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == __version__


def test_flags_show_no_value_placeholder() -> None:
    """`--json <bool>` in the help reads as if `--json true` were accepted; flags take no value."""
    for args in (("--help",), ("eval", "--help"), ("collect", "--help"), ("store", "fsck", "--help")):
        proc = odsd(*args, env={"COLUMNS": "200"})
        assert proc.returncode == 0, proc.stderr
        assert "<bool>" not in proc.stdout, proc.stdout
    assert re.search(
        r"--json-logs\s+Progress as JSON", odsd("collect", "--help", env={"COLUMNS": "200"}).stdout
    )


def test_docs_cli_lists_every_command() -> None:
    text = (DOCS / "cli.md").read_text()
    import typer.main

    group = typer.main.get_command(app)
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        if hasattr(command, "commands"):
            for sub in command.commands:
                assert f"`odsd {name} {sub}" in text, f"docs/cli.md lacks `odsd {name} {sub}`"
        else:
            assert f"`odsd {name}" in text, f"docs/cli.md lacks `odsd {name}`"
    assert "`odsd --version`" in text


def test_expert_demo_lines_do_not_show_policy_v_minus_1(tmp_path: Path) -> None:
    proc = odsd(
        "collect", "--mode", "expert_demo", "--task", "reach", "--num-envs", "4", "--max-episodes", "8",
        "--store", tmp_path / "store", "--durability", "process", "--set", "metrics_interval_s=0.2",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "v-1" not in proc.stdout + proc.stderr
    assert "policy=-" in proc.stderr
