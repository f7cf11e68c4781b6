"""``lazy_exports``: a package ``__getattr__`` that imports a submodule on first use (PEP 562).

Keeps heavy imports (torch, simulators) out of ``import odsd.<package>`` until a name needs them::

    __getattr__ = lazy_exports(__name__, {"Collector": "collector", "BetaMixer": "mixing"})
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_exports(package: str, table: Mapping[str, str]) -> Callable[[str], Any]:
    """``__getattr__`` for ``package``: ``table`` maps an exported name to its submodule."""

    def __getattr__(name: str) -> Any:
        if name in table:
            return getattr(import_module(f"{package}.{table[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
