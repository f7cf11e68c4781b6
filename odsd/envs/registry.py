"""Resolve task names to environments: built-ins, ``gymnasium:<id>``, ``maniskill:<id>`` and
``module:factory``.

::

    env = make_env("pick_place", num_envs=64, device="cpu", seed=0)
    env = make_env("gymnasium:FetchPickAndPlace-v4", num_envs=4, seed=0)
    env = make_env("maniskill:PickCube-v1", num_envs=4, seed=0)            # ManiSkill3 (odsd[maniskill])
    env = make_env("my_pkg.tasks:make_door", num_envs=8)   # factory(num_envs=, device=, seed=, **kw)
    register_env("door", my_factory)                        # then make_env("door", ...)

Every factory is called as ``factory(num_envs=..., device=..., seed=..., **kwargs)`` and must
return a :class:`~odsd.envs.protocol.VecEnv`; the result is checked against the request.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

import torch

from odsd.envs.errors import EnvContractError, EnvNotFoundError, EnvSpecError
from odsd.envs.protocol import VecEnv
from odsd.envs.spec import EnvSpec, same_device

EnvFactory = Callable[..., VecEnv]
GYMNASIUM_PREFIX = "gymnasium:"
MANISKILL_PREFIX = "maniskill:"

_REGISTRY: dict[str, EnvFactory] = {}


def register_env(name: str, factory: EnvFactory, *, overwrite: bool = False) -> None:
    """Register ``factory`` under ``name`` (names containing ``:`` are reserved for paths)."""
    if ":" in name:
        raise EnvSpecError(f"env name {name!r} may not contain ':' (reserved for module:factory)")
    if name in _REGISTRY and not overwrite and _REGISTRY[name] is not factory:
        raise EnvSpecError(f"env {name!r} is already registered")
    _REGISTRY[name] = factory


def list_envs() -> list[str]:
    """Registered task names (built-ins included), sorted."""
    _register_builtins()
    return sorted(_REGISTRY)


def import_object(path: str) -> Any:
    """Import ``"package.module:attr"`` (``attr`` may be dotted)."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise EnvNotFoundError(f"{path!r} is not of the form 'module:factory'")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise EnvNotFoundError(f"cannot import module {module_name!r} for {path!r}: {exc}") from exc
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise EnvNotFoundError(f"module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def resolve_env_factory(task: str) -> EnvFactory:
    """The factory for ``task`` without calling it."""
    _register_builtins()
    if task in _REGISTRY:
        return _REGISTRY[task]
    if task.startswith(GYMNASIUM_PREFIX):
        from odsd.envs.gymnasium_adapter import make_gymnasium_env

        env_id = task[len(GYMNASIUM_PREFIX) :]
        return lambda **kw: make_gymnasium_env(env_id, **kw)
    if task.startswith(MANISKILL_PREFIX):
        return _maniskill_factory(task[len(MANISKILL_PREFIX) :])
    if ":" in task:
        factory = import_object(task)
        if not callable(factory):
            raise EnvNotFoundError(f"{task!r} is not callable")
        return factory
    raise EnvNotFoundError(
        f"unknown task {task!r}; known: {', '.join(list_envs())}, gymnasium:<id>, maniskill:<id>, module:factory"
    )


def _maniskill_factory(env_id: str) -> EnvFactory:
    """``make_maniskill_env`` bound to ``env_id``, with its signature (so task kwargs are checked)."""
    import functools

    from odsd.envs.maniskill_adapter import make_maniskill_env

    if not env_id:
        raise EnvNotFoundError("maniskill:<EnvId> needs an env id, e.g. maniskill:PickCube-v1")
    return functools.partial(make_maniskill_env, env_id)


def make_env(
    task: str,
    *,
    num_envs: int,
    device: str | torch.device = "cpu",
    seed: int | None = None,
    **kwargs: Any,
) -> VecEnv:
    """Build a validated vectorized environment for ``task`` (see module docstring)."""
    if int(num_envs) <= 0:
        raise EnvSpecError(f"num_envs must be positive, got {num_envs}")
    device = torch.device(device)
    factory = resolve_env_factory(task)
    _check_arguments(task, factory, kwargs)
    env = factory(num_envs=int(num_envs), device=device, seed=seed, **kwargs)
    if not isinstance(env, VecEnv) or not isinstance(getattr(env, "spec", None), EnvSpec):
        raise EnvContractError(
            f"factory for {task!r} returned {type(env).__name__}, not a VecEnv with an EnvSpec"
        )
    if env.spec.num_envs != int(num_envs):
        raise EnvContractError(f"{task}: asked for {num_envs} rows, env has {env.spec.num_envs}")
    if not same_device(env.spec.device, device):
        raise EnvContractError(f"{task}: asked for device {device}, env runs on {env.spec.device}")
    return env


def _check_arguments(task: str, factory: Callable[..., Any], kwargs: dict[str, Any]) -> None:
    """A one-line error for task arguments the factory does not take (before calling it)."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # no introspectable signature: let the call decide
        return
    try:
        signature.bind(num_envs=1, device=None, seed=None, **kwargs)
    except TypeError as exc:
        raise EnvSpecError(f"{task}: bad task arguments {sorted(kwargs)}: {exc}") from None


def _register_builtins() -> None:
    if "reach" in _REGISTRY:
        return
    from odsd.envs.tasks import PickPlaceCamEnv, PickPlaceEnv, ReachEnv

    _REGISTRY["reach"] = ReachEnv
    _REGISTRY["pick_place"] = PickPlaceEnv
    _REGISTRY["pick_place_cam"] = PickPlaceCamEnv
