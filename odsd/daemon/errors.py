"""Errors of run lifecycle management."""

from __future__ import annotations

from odsd.errors import OdsdError


class LockHeldError(OdsdError):
    """Another live process owns the run."""

    exit_code = 5


class RunLockIOError(OdsdError):
    """The run lock cannot be created: a read-only or full filesystem, a file in the way."""

    exit_code = 3


class RunStateError(OdsdError):
    """A run cannot be resumed: missing run, no complete manifest, or incompatible changes."""

    exit_code = 2
