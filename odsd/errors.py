"""The exception hierarchy every odsd error derives from.

The CLI prints any :class:`OdsdError` as one line and exits with its ``exit_code``.
"""

from __future__ import annotations


class OdsdError(Exception):
    """Base of every error odsd reports as one line."""

    exit_code: int = 1


class ConfigError(OdsdError):
    """A user-supplied configuration value or flag is invalid."""

    exit_code = 2
