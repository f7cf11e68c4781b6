"""Collection: the DAgger / expert-demo loop, beta schedules, episode assembly and commits.

>>> from odsd.collect import CollectConfig, Collector
>>> summary = Collector(CollectConfig(task="reach", store="data.odsd", max_iterations=2)).run()
"""

from odsd.lazy import lazy_exports

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


# The writer process imports odsd.collect.commit_process: keep torch out of that import.
__getattr__ = lazy_exports(__name__, _LAZY)

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
