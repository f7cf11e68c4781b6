"""Every `odsd …` command line in cli/ (systemd units, crontab) parses with the real CLI."""

from __future__ import annotations

import configparser
import re
import shlex
from pathlib import Path

import pytest
import typer

from odsd.cli import app

CLI_DIR = Path(__file__).resolve().parents[2] / "cli"
UNITS = sorted((CLI_DIR / "systemd").glob("*.service"))


def odsd_commands() -> list[tuple[str, list[str]]]:
    found: list[tuple[str, list[str]]] = []
    for unit in UNITS:
        parser = configparser.ConfigParser(strict=False, interpolation=None)
        parser.optionxform = str  # type: ignore[assignment,method-assign]
        parser.read(unit)
        for key in ("ExecStart", "ExecStartPre", "ExecStop"):
            if parser.has_option("Service", key):
                found.append((f"{unit.name}:{key}", shlex.split(parser.get("Service", key).lstrip("-"))))
    for line in (CLI_DIR / "cron" / "odsd.crontab").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        command = " ".join(line.split()[5:])
        for part in command.split("&&"):
            found.append(("odsd.crontab", shlex.split(part.split(">>")[0])))
    return found


def substitute(arg: str) -> str:
    return re.sub(r"\$\{\w+\}", "/var/lib/odsd/stores/x", arg.replace("%i", "pick_place"))


def parse(argv: list[str]) -> None:
    """Parse (without running) like the console script would."""
    group = typer.main.get_command(app)
    ctx = group.make_context("odsd", list(argv))
    with ctx:
        args = [*ctx._protected_args, *ctx.args] if hasattr(ctx, "_protected_args") else list(ctx.args)
        while True:
            name, command, rest = group.resolve_command(ctx, args)
            sub = command.make_context(name, rest, parent=ctx)
            if not hasattr(command, "resolve_command"):
                return
            group, ctx = command, sub
            args = [*sub._protected_args, *sub.args] if hasattr(sub, "_protected_args") else list(sub.args)


def test_units_exist() -> None:
    assert any(u.name == "odsd-collect@.service" for u in UNITS)
    text = (CLI_DIR / "systemd" / "odsd-collect@.service").read_text()
    assert "Type=notify" in text and "WatchdogSec=" in text and "Restart=on-failure" in text


@pytest.mark.parametrize(("where", "argv"), odsd_commands(), ids=lambda v: v if isinstance(v, str) else None)
def test_command_line_parses(where: str, argv: list[str]) -> None:
    assert Path(argv[0]).name == "odsd", f"{where}: expected an odsd command, got {argv[0]}"
    parse([substitute(a) for a in argv[1:]])


def test_parser_rejects_unknown_flags() -> None:
    with pytest.raises(Exception, match="bogus"):
        parse(["collect", "--bogus"])


def test_parser_descends_into_subcommands() -> None:
    with pytest.raises(Exception, match="bogus"):
        parse(["store", "compact", "/tmp/x", "--bogus"])
