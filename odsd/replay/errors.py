"""Errors of record/replay; the CLI prints each as one line with its exit code."""

from __future__ import annotations

from odsd.errors import OdsdError


class ReplayError(OdsdError):
    """An episode cannot be replayed as asked (unknown episode, no recorded state, bad flags)."""

    exit_code = 2


class SpecMismatchError(ReplayError):
    """The episode's recorded env spec (action layout, joint order, state layout) differs from the env."""

    exit_code = 3
