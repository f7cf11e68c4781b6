"""Errors raised while publishing or loading policy snapshots."""

from __future__ import annotations

from odsd.errors import OdsdError


class SnapshotError(OdsdError):
    """Base of every policy-snapshot error."""

    exit_code = 3


class SnapshotNotFoundError(SnapshotError):
    """No snapshot directory (or no complete one) at the given path."""


class SnapshotIncompleteError(SnapshotError):
    """The snapshot has no ``COMPLETE`` marker (still being written, or abandoned)."""


class SnapshotCorruptError(SnapshotError):
    """``policy.json`` is unreadable/invalid or the weights do not match their recorded sha256."""


class LayoutMismatchError(SnapshotError):
    """The snapshot's observation/action layout hash differs from the environment's."""


class UnknownArchitectureError(SnapshotError):
    """``policy.json`` names an architecture with no registered factory."""
