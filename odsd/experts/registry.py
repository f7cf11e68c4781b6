"""Resolve expert names: ``planner``, ``policy:<snapshot dir>``, ``lerobot:<pretrained dir>``,
registered names, ``module:factory``.

::

    expert = make_expert("planner", env.spec)                  # the task's planner
    expert = make_expert("policy:runs/policies", env.spec)     # newest snapshot under a root
    expert = make_expert("lerobot:ckpt/act", env.spec)         # a LeRobot pretrained directory
    expert = make_expert("my_pkg.experts:make", env.spec, k=1) # factory(env_spec, **kwargs)
    register_expert("scripted", factory)                       # then make_expert("scripted", ...)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from odsd.envs.errors import EnvNotFoundError
from odsd.envs.registry import import_object
from odsd.envs.spec import EnvSpec
from odsd.experts.errors import (
    ExpertArgumentsError,
    ExpertContractError,
    ExpertNotFoundError,
    expert_failures,
)
from odsd.experts.protocol import Expert
from odsd.experts.query import ExpertSpec

ExpertFactory = Callable[..., Expert]
POLICY_PREFIX = "policy:"
LEROBOT_PREFIX = "lerobot:"

_REGISTRY: dict[str, ExpertFactory] = {}


def register_expert(name: str, factory: ExpertFactory, *, overwrite: bool = False) -> None:
    """Register ``factory(env_spec, **kwargs) -> Expert`` under ``name``."""
    if ":" in name or name == "planner":
        raise ExpertNotFoundError(f"expert name {name!r} is reserved")
    if name in _REGISTRY and not overwrite and _REGISTRY[name] is not factory:
        raise ExpertNotFoundError(f"expert {name!r} is already registered")
    _REGISTRY[name] = factory


def list_experts() -> list[str]:
    """Registered names plus the built-in ``planner``."""
    return sorted({"planner", *_REGISTRY})


def make_expert(name: str, env_spec: EnvSpec, **kwargs: Any) -> Expert:
    """Build the expert ``name`` for ``env_spec`` and check it satisfies the protocol."""
    if name == "planner":
        from odsd.experts.planners import make_planner

        if kwargs:
            raise ExpertArgumentsError(
                f"expert 'planner' takes no arguments, got expert_kwargs {sorted(kwargs)}"
            )
        expert: Any = make_planner(env_spec)
    elif name.startswith(POLICY_PREFIX):
        from odsd.experts.policy_expert import PolicyExpert

        _check_arguments(name, PolicyExpert.from_snapshot, kwargs, leading=2)
        expert = PolicyExpert.from_snapshot(name[len(POLICY_PREFIX) :], env_spec, **kwargs)
    elif name.startswith(LEROBOT_PREFIX):
        from odsd.experts.lerobot_expert import LeRobotExpert

        _check_arguments(name, LeRobotExpert.from_pretrained, kwargs, leading=2)
        expert = LeRobotExpert.from_pretrained(name[len(LEROBOT_PREFIX) :], env_spec, **kwargs)
    elif name in _REGISTRY or ":" in name:
        if name in _REGISTRY:
            factory = _REGISTRY[name]
        else:
            try:
                factory = import_object(name)
            except EnvNotFoundError as exc:
                raise ExpertNotFoundError(str(exc)) from None
        _check_arguments(name, factory, kwargs)
        with expert_failures(name, "to build"):
            expert = factory(env_spec, **kwargs)
    else:
        raise ExpertNotFoundError(
            f"unknown expert {name!r}; known: {', '.join(list_experts())}, policy:<dir>, lerobot:<dir>, module:factory"
        )
    if not isinstance(expert, Expert) or not isinstance(getattr(expert, "spec", None), ExpertSpec):
        raise ExpertContractError(
            f"expert {name!r} does not implement the Expert protocol with an ExpertSpec"
        )
    return expert


def _check_arguments(
    name: str, factory: Callable[..., Any], kwargs: dict[str, Any], leading: int = 1
) -> None:
    """A one-line error for expert arguments the factory does not take (before calling it)."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # no introspectable signature: let the call decide
        return
    try:
        signature.bind(*([None] * leading), **kwargs)
    except TypeError as exc:
        raise ExpertArgumentsError(f"expert {name!r}: bad expert arguments {sorted(kwargs)}: {exc}") from None
