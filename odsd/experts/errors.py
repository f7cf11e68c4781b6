"""Errors raised by experts and expert-query validation."""

from __future__ import annotations

from odsd.errors import OdsdError


class ExpertError(OdsdError):
    """Base of every expert error."""


class ExpertContractError(ExpertError):
    """A whole expert query breaks the contract (batch size, action dim, dtype, device, ...)."""


class ExpertNotFoundError(ExpertError):
    """An expert name does not resolve to a known or importable expert."""

    exit_code = 2
