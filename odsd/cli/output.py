"""Shared output helpers for CLI commands: JSON for scripts, rich tables for people."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console

# Piped output (logs, `| less`, CI) gets wide tables instead of rich's 80-column default.
_PIPE_WIDTH = 160
console = Console(width=None if sys.stdout.isatty() else _PIPE_WIDTH)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else _PIPE_WIDTH)


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
