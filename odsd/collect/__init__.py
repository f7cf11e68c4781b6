"""Collection: the DAgger / expert-demo loop, beta schedules, episode assembly and commits.

>>> from odsd.collect import CollectConfig, Collector
>>> summary = Collector(CollectConfig(task="reach", store="data.odsd", max_iterations=2)).run()
"""

from importlib import import_module
from typing import Any

_LAZY = {
    "BetaSchedule": "beta",
    "Collector": "collector",
    "Progress": "collector",
    "RunSummary": "collector",
    "new_run_id": "collector",
    "CollectConfig": "config",
    "load_config": "config",
    "SOURCE_EXPERT": "frames",
    "SOURCE_HOLD": "frames",
    "SOURCE_NAMES": "frames",
    "SOURCE_STUDENT": "frames",
    "frame_features": "frames",
    "BetaMixer": "mixing",
}


def __getattr__(name: str) -> Any:
    # The writer process imports odsd.collect.commit_process: keep torch out of that import.
    if name in _LAZY:
        return getattr(import_module(f"odsd.collect.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'odsd.collect' has no attribute {name!r}")


__all__ = [
    "SOURCE_EXPERT",
    "SOURCE_HOLD",
    "SOURCE_NAMES",
    "SOURCE_STUDENT",
    "BetaMixer",
    "BetaSchedule",
    "CollectConfig",
    "Collector",
    "Progress",
    "RunSummary",
    "frame_features",
    "load_config",
    "new_run_id",
]
