"""``OdsdDatasetMeta``: the attributes of LeRobot's ``LeRobotDatasetMetadata``, without lerobot.

LeRobot's training code reads ``features``, ``stats``, ``fps``, ``robot_type``, ``camera_keys``,
``total_episodes``, ``total_frames``, ``tasks`` and ``episodes`` (``dataset_from_index`` /
``dataset_to_index``) from a dataset's ``meta``; ``make_policy(cfg, ds_meta=meta)`` and the
normalization processors accept this object in its place.

``episodes`` is an :class:`EpisodeTable` that indexes like the ``datasets.Dataset`` LeRobot
uses (``meta.episodes[i]`` → a row dict, ``meta.episodes["dataset_from_index"]`` → a column);
``tasks`` is a pandas DataFrame indexed by task string (built on first access; pandas comes with
lerobot), ``task_names`` the plain list.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

CODEBASE_VERSION = "v3.0"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"


class EpisodeTable:
    """Column-oriented episode metadata with ``datasets.Dataset``-like indexing."""

    def __init__(self, columns: Mapping[str, list]) -> None:
        self._columns = {k: list(v) for k, v in columns.items()}
        lengths = {len(v) for v in self._columns.values()}
        if len(lengths) > 1:
            raise ValueError(f"episode table columns differ in length: {lengths}")
        self._n = lengths.pop() if lengths else 0

    @property
    def column_names(self) -> list[str]:
        return list(self._columns)

    @property
    def num_rows(self) -> int:
        return self._n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, key: int | str) -> Any:
        if isinstance(key, str):
            return self._columns[key]
        i = int(key)
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(f"episode {key} out of range (0..{self._n - 1})")
        return {k: v[i] for k, v in self._columns.items()}

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for i in range(self._n):
            yield self[i]

    def to_pandas(self) -> Any:
        import pandas as pd

        return pd.DataFrame(self._columns)

    def __repr__(self) -> str:
        return f"EpisodeTable(features={self.column_names}, num_rows={self._n})"


class OdsdDatasetMeta:
    """LeRobot-compatible dataset metadata for one pinned view of an odsd store.

    Extra attributes: ``watermark`` (the snapshot), ``stats_version`` (the id of the frozen
    statistics), ``stats_watermark``, ``label``, ``selection`` and ``store_id``.
    """

    def __init__(
        self,
        *,
        repo_id: str,
        root: Path,
        info: InfoDict,
        provenance: dict[str, Any],
        stats: dict[str, dict[str, np.ndarray]],
        task_names: list[str],
        episodes: EpisodeTable,
        watermark: int,
        stats_version: str,
        stats_watermark: int,
        label: str,
        selection: dict[str, Any],
        store_id: str,
    ) -> None:
        self.repo_id = repo_id
        self.root = root
        self.revision = None
        self.info = info
        self.provenance = provenance
        """Where these frames come from (store, watermark, label, selection, statistics version):
        what an export writes to ``meta/odsd.json``."""
        self.stats = stats
        self.task_names = task_names
        self.episodes = episodes
        self.subtasks = None
        self.watermark = watermark
        self.stats_version = stats_version
        self.stats_watermark = stats_watermark
        self.label = label
        self.selection = selection
        self.store_id = store_id
        self._tasks_df: Any = None

    # LeRobotDatasetMetadata's properties -------------------------------------------------------

    @property
    def fps(self) -> int | float:
        return self.info["fps"]

    @property
    def robot_type(self) -> str | None:
        return self.info["robot_type"]

    @property
    def features(self) -> dict[str, dict]:
        return self.info["features"]

    @property
    def image_keys(self) -> list[str]:
        return [k for k, ft in self.features.items() if ft["dtype"] == "image"]

    @property
    def video_keys(self) -> list[str]:
        return [k for k, ft in self.features.items() if ft["dtype"] == "video"]

    @property
    def camera_keys(self) -> list[str]:
        return [k for k, ft in self.features.items() if ft["dtype"] in ("video", "image")]

    @property
    def names(self) -> dict[str, list | None]:
        return {k: ft["names"] for k, ft in self.features.items()}

    @property
    def shapes(self) -> dict[str, tuple]:
        return {k: tuple(ft["shape"]) for k, ft in self.features.items()}

    @property
    def total_episodes(self) -> int:
        return self.info["total_episodes"]

    @property
    def total_frames(self) -> int:
        return self.info["total_frames"]

    @property
    def total_tasks(self) -> int:
        return self.info["total_tasks"]

    @property
    def chunks_size(self) -> int:
        return self.info["chunks_size"]

    @property
    def data_files_size_in_mb(self) -> int:
        return self.info["data_files_size_in_mb"]

    @property
    def video_files_size_in_mb(self) -> int:
        return self.info["video_files_size_in_mb"]

    @property
    def data_path(self) -> str:
        return self.info["data_path"]

    @property
    def video_path(self) -> str | None:
        return self.info["video_path"]

    @property
    def tasks(self) -> Any:
        """A pandas DataFrame indexed by task string with a ``task_index`` column (LeRobot's layout)."""
        if self._tasks_df is None:
            import pandas as pd

            self._tasks_df = pd.DataFrame(
                {"task_index": np.arange(len(self.task_names), dtype=np.int64)}, index=self.task_names
            )
        return self._tasks_df

    def get_task_index(self, task: str) -> int | None:
        try:
            return self.task_names.index(task)
        except ValueError:
            return None

    def __bool__(self) -> bool:  # make_policy tests `bool(ds_meta)`
        return True

    def __repr__(self) -> str:
        return (
            f"OdsdDatasetMeta(repo_id={self.repo_id!r}, watermark={self.watermark}, "
            f"episodes={self.total_episodes}, frames={self.total_frames}, stats={self.stats_version})"
        )


class InfoDict(dict[str, Any]):
    """``info.json`` as a dict that also reads like LeRobot 0.6's ``DatasetInfo``.

    >>> info["fps"] == info.fps
    True
    """

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def make_info(
    *,
    fps: float,
    robot_type: str | None,
    features: dict[str, dict],
    total_episodes: int,
    total_frames: int,
    total_tasks: int,
    chunks_size: int = 1000,
    data_files_size_in_mb: int = 100,
) -> InfoDict:
    """``meta/info.json`` content in LeRobot v3.0 layout (``create_empty_dataset_info`` plus totals).

    Only fields that every supported LeRobot line knows: odsd's own provenance lives in
    ``OdsdDatasetMeta.provenance`` and an export's ``meta/odsd.json``.
    """
    return InfoDict(
        {
            "codebase_version": CODEBASE_VERSION,
            "robot_type": robot_type,
            "total_episodes": total_episodes,
            "total_frames": total_frames,
            "total_tasks": total_tasks,
            "chunks_size": chunks_size,
            "data_files_size_in_mb": data_files_size_in_mb,
            "video_files_size_in_mb": 200,
            "fps": int(fps) if float(fps).is_integer() else fps,
            "splits": {"train": f"0:{total_episodes}"} if total_episodes else {},
            "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
            "video_path": VIDEO_PATH if any(f["dtype"] == "video" for f in features.values()) else None,
            "features": features,
        }
    )
