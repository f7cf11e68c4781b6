"""Collection: the DAgger / expert-demo loop, beta schedules, episode assembly and commits.

>>> from odsd.collect import CollectConfig, Collector
>>> summary = Collector(CollectConfig(task="reach", store="data.odsd", max_iterations=2)).run()
"""

from odsd.collect.beta import BetaSchedule
from odsd.collect.collector import Collector, Progress, RunSummary, new_run_id
from odsd.collect.config import CollectConfig, load_config
from odsd.collect.frames import SOURCE_EXPERT, SOURCE_HOLD, SOURCE_NAMES, SOURCE_STUDENT, frame_features
from odsd.collect.mixing import BetaMixer

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
