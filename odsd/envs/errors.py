"""Errors raised by environments, their specs and the env registry."""

from __future__ import annotations

from odsd.errors import OdsdError


class EnvError(OdsdError):
    """Base of every environment error."""


class EnvSpecError(EnvError):
    """An :class:`~odsd.envs.spec.EnvSpec` (or part of one) is inconsistent."""

    exit_code = 2


class EnvContractError(EnvError):
    """An environment returned or was given data that breaks its own spec."""


class EnvNotFoundError(EnvError):
    """A task name does not resolve to a registered, importable environment factory."""

    exit_code = 2


class ManiSkillUnavailableError(EnvError):
    """ManiSkill's simulator (SAPIEN) cannot run here: no usable Vulkan device (docs/envs.md)."""
