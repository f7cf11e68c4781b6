"""The registry of per-row expert failure reasons (``ExpertQuery.failure`` codes).

::

    from odsd.experts.failures import Failure, failure_name, register_failure_reason
    failure_name(Failure.NON_FINITE)                # "non_finite"
    register_failure_reason(100, "ik_no_solution")  # third-party codes start at 100

Code 0 means "no failure". Codes are stable: they are stored per frame and per segment.
"""

from __future__ import annotations

from enum import IntEnum

from odsd.experts.errors import ExpertError


class Failure(IntEnum):
    """Built-in failure reasons."""

    NONE = 0
    NON_FINITE = 1
    OUT_OF_BOUNDS = 2
    CONTRACT = 3
    UNREACHABLE = 4
    TIMEOUT = 5
    PLANNER_FAILED = 6
    DEMO_EXHAUSTED = 7
    INVALID_OBSERVATION = 8
    UNSPECIFIED = 9


_DESCRIPTIONS = {
    Failure.NONE: "no failure",
    Failure.NON_FINITE: "the action has NaN or infinite values",
    Failure.OUT_OF_BOUNDS: "the action is outside the env's action bounds",
    Failure.CONTRACT: "the row breaks the expert contract (wrong shape or type)",
    Failure.UNREACHABLE: "the target is outside the reachable workspace",
    Failure.TIMEOUT: "the expert ran out of time or steps",
    Failure.PLANNER_FAILED: "the planner found no solution",
    Failure.DEMO_EXHAUSTED: "the open-loop demonstration has no action for this step",
    Failure.INVALID_OBSERVATION: "the observation given to the expert is not finite",
    Failure.UNSPECIFIED: "the expert marked the row invalid without a reason",
}

_REGISTRY: dict[int, tuple[str, str]] = {int(c): (c.name.lower(), d) for c, d in _DESCRIPTIONS.items()}


def register_failure_reason(code: int, name: str, description: str = "") -> None:
    """Register a new reason; re-registering the same (code, name) is a no-op."""
    code = int(code)
    if code < 0 or code > 2**31 - 1:
        raise ExpertError(f"failure code must be a non-negative int32, got {code}")
    existing = _REGISTRY.get(code)
    if existing is not None and existing[0] != name:
        raise ExpertError(f"failure code {code} is already registered as {existing[0]!r}")
    if existing is None and name in {n for n, _ in _REGISTRY.values()}:
        raise ExpertError(f"failure name {name!r} is already registered under another code")
    _REGISTRY[code] = (name, description)


def failure_name(code: int) -> str:
    """Name of a registered code (``"unknown_<code>"`` otherwise)."""
    entry = _REGISTRY.get(int(code))
    return entry[0] if entry else f"unknown_{int(code)}"


def is_registered(code: int) -> bool:
    """True when ``code`` has been registered."""
    return int(code) in _REGISTRY


def failure_reasons() -> dict[int, str]:
    """``code → name`` for every registered reason."""
    return {code: name for code, (name, _) in sorted(_REGISTRY.items())}
