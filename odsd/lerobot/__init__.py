"""LeRobot-compatible reading and export of odsd stores (docs/lerobot.md).

- :class:`OdsdLeRobotDataset` — a live store read as a ``LeRobotDataset`` (items, ``meta``,
  ``delta_timestamps`` windows), plus a vectorized ``get_batch`` path;
- :class:`Selection` — which episodes and anchor frames a view shows;
- :func:`export_lerobot` — a LeRobot v3.0 dataset directory written in bulk (needs the
  ``odsd[lerobot]`` extra).

Importing this package never imports lerobot; only :func:`export_lerobot` needs it.
"""

from odsd.lerobot.batch import IndexBatchSampler, batch_loader, window_positions
from odsd.lerobot.dataset import OdsdLeRobotDataset, check_delta_timestamps
from odsd.lerobot.export import ExportResult, export_lerobot
from odsd.lerobot.meta import EpisodeTable, OdsdDatasetMeta
from odsd.lerobot.selection import Selection, parse_episode_list
from odsd.lerobot.stats import compute_stats, stats_version

__all__ = [
    "EpisodeTable",
    "ExportResult",
    "IndexBatchSampler",
    "OdsdDatasetMeta",
    "OdsdLeRobotDataset",
    "Selection",
    "batch_loader",
    "check_delta_timestamps",
    "compute_stats",
    "export_lerobot",
    "parse_episode_list",
    "stats_version",
    "window_positions",
]
