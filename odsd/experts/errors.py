"""Errors raised by experts and expert-query validation."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from odsd.errors import ConfigError, OdsdError


class ExpertError(OdsdError):
    """Base of every expert error."""


class ExpertContractError(ExpertError):
    """A whole expert query breaks the contract (batch size, action dim, dtype, device, ...)."""


class ExpertNotFoundError(ExpertError):
    """An expert name does not resolve to a known or importable expert."""

    exit_code = 2


class ExpertArgumentsError(ExpertError, ConfigError):
    """``expert_kwargs`` the expert does not take (exit 2)."""

    exit_code = 2


class ExpertFailedError(ExpertError):
    """A plugged-in expert raised while being built or queried: one line naming it (exit 1)."""


def expert_name(expert: Any) -> str:
    spec = getattr(expert, "spec", None)
    return str(getattr(spec, "name", None) or type(expert).__name__)


@contextlib.contextmanager
def expert_failures(name: str, doing: str) -> Iterator[None]:
    """Re-raise an exception of an expert's own code as one :class:`ExpertFailedError` line."""
    try:
        yield
    except OdsdError:
        raise
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else ""
        detail = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
        raise ExpertFailedError(f"expert {name!r} failed {doing}: {detail}") from exc
