"""Registry of policy architectures: ``name → factory(**arch_kwargs) -> nn.Module``.

::

    register_architecture("my_net", lambda **kw: MyNet(**kw))
    model = build_model("my_net", {"hidden": 64})

A registered module must map ``observation.state`` ``[n, D]`` float32 to raw actions ``[n, A]``
and keep everything it needs (normalization included) in its state dict, so a snapshot is
just ``arch_kwargs`` plus safetensors weights.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from odsd.policies.errors import SnapshotError, UnknownArchitectureError

ArchitectureFactory = Callable[..., nn.Module]

_ARCHITECTURES: dict[str, ArchitectureFactory] = {}


def register_architecture(name: str, factory: ArchitectureFactory, *, overwrite: bool = False) -> None:
    """Register ``factory`` under ``name``."""
    if name in _ARCHITECTURES and not overwrite and _ARCHITECTURES[name] is not factory:
        raise SnapshotError(f"architecture {name!r} is already registered")
    _ARCHITECTURES[name] = factory


def list_architectures() -> list[str]:
    """Registered architecture names."""
    return sorted(_ARCHITECTURES)


def build_model(name: str, kwargs: dict[str, Any]) -> nn.Module:
    """Instantiate a registered architecture."""
    factory = _ARCHITECTURES.get(name)
    if factory is None:
        raise UnknownArchitectureError(
            f"unknown policy architecture {name!r}; registered: {list_architectures()}"
        )
    try:
        return factory(**kwargs)
    except TypeError as exc:
        raise SnapshotError(f"architecture {name!r} rejected its arguments: {exc}") from exc
