"""``export_lerobot``: a snapshot of an odsd store as a LeRobot v3.0 dataset directory.

Written in bulk, never frame by frame: every data file is one ``pyarrow`` table built from whole
columns (the reader's own columns, so an export holds exactly what :class:`OdsdLeRobotDataset`
serves), metadata through LeRobot's helpers (``write_info``, ``write_stats``, ``write_tasks``)::

    OUT/meta/info.json  meta/stats.json  meta/tasks.parquet
    OUT/meta/episodes/chunk-000/file-000.parquet
    OUT/data/chunk-000/file-000.parquet ...

Data files roll over at ``data_files_size_in_mb`` (uncompressed, LeRobot's measure) and chunks at
``chunks_size`` files, with whole episodes per file. The directory is built under a hidden
temporary name next to ``OUT`` and renamed into place only when complete, so an interrupted
export leaves no loadable dataset at ``OUT`` (and, with ``overwrite``, the old one stays until
the new one is complete).

The exported episodes are the selected episodes, or with ``Selection(segments=...)`` and/or
``failure_focused`` one LeRobot episode per matching segment clip (:mod:`odsd.lerobot.units`).

Needs the ``odsd[lerobot]`` extra (pyarrow, pandas and LeRobot's metadata helpers).
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from odsd.errors import ConfigError, OdsdError
from odsd.lerobot.selection import Selection
from odsd.lerobot.stats import episode_stats
from odsd.lerobot.units import Unit, export_unit
from odsd.store import EpisodeStore
from odsd.store.fsio import fsync_dir, fsync_tree

PARTIAL_MARK = ".odsd-export-partial"


class ExportExistsError(OdsdError):
    """The export target exists and ``--overwrite`` was not given."""

    exit_code = 2


@dataclass(frozen=True)
class ExportResult:
    out: Path
    repo_id: str
    watermark: int
    episodes: int
    frames: int
    data_files: int
    invalid_labels: int
    stats_version: str
    seconds: float
    unit: Unit = "episodes"
    """``"segments"``: each exported episode is one segment clip."""
    source_episodes: int = 0
    """Store episodes the exported frames come from (``episodes`` when the unit is episodes)."""

    @property
    def frames_per_s(self) -> float:
        return self.frames / self.seconds if self.seconds > 0 else float("inf")


def _require_lerobot() -> Any:
    try:
        import lerobot.datasets.utils as lr_utils
    except ImportError as exc:
        raise ConfigError(
            "export-lerobot needs the lerobot extra (pip install 'odsd[lerobot]'; lerobot 0.4.4 on Python 3.11)"
        ) from exc
    return lr_utils


def _arrow_column(values: np.ndarray, pa: Any) -> Any:
    if values.ndim == 1:
        return pa.array(values)
    flat = pa.array(np.ascontiguousarray(values).reshape(-1))
    return pa.FixedSizeListArray.from_arrays(flat, int(np.prod(values.shape[1:])))


def _list_column(rows: np.ndarray, pa: Any) -> Any:
    """``[E, D]`` → ``list<…>`` column (what LeRobot's episode metadata writer produces)."""
    rows = np.ascontiguousarray(rows)
    offsets = np.arange(0, rows.size + 1, rows.shape[1], dtype=np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(rows.reshape(-1)))


def _plan_files(
    lengths: np.ndarray, frame_bytes: int, limit_mb: float, chunks_size: int
) -> list[tuple[int, int, int, int]]:
    """``(chunk, file, first_episode, stop_episode)`` groups of whole episodes per data file."""
    limit = limit_mb * 1024**2
    groups: list[tuple[int, int, int, int]] = []
    chunk = file = 0
    first, size = 0, 0.0
    for i, n in enumerate(lengths.tolist()):
        ep_bytes = n * frame_bytes
        if i > first and size + ep_bytes >= limit:
            groups.append((chunk, file, first, i))
            file += 1
            if file == chunks_size:
                chunk, file = chunk + 1, 0
            first, size = i, 0.0
        size += ep_bytes
    if len(lengths):
        groups.append((chunk, file, first, len(lengths)))
    return groups


def export_lerobot(
    store: str | Path | EpisodeStore,
    out: str | Path,
    *,
    watermark: int | None = None,
    repo_id: str | None = None,
    label: str = "expert",
    selection: Selection | None = None,
    overwrite: bool = False,
    chunks_size: int = 1000,
    data_files_size_in_mb: float = 100,
    durable: bool = True,
    progress: Callable[[int, int], None] | bool = False,
) -> ExportResult:
    """Write the selected episodes at ``watermark`` as a LeRobot v3.0 dataset at ``out``.

    With ``selection.segments`` and/or ``selection.failure_focused`` each matching segment clip is
    exported as its own episode (see :mod:`odsd.lerobot.units`); window modes are refused.

    ``progress``: True for a rich progress bar, or a callback ``(frames_done, frames_total)``.
    """
    t0 = time.perf_counter()
    out = Path(out)
    if out.exists() and not overwrite:
        raise ExportExistsError(f"{out}: already exists (use --overwrite to replace it)")
    selection = selection or Selection()
    if selection.window_mode is not None:
        raise ConfigError(
            "window modes choose training anchors and apply to readers only; export episodes or segments"
        )
    if chunks_size < 1 or data_files_size_in_mb <= 0:
        raise ConfigError("chunks_size and data_files_size_in_mb must be positive")
    lr = _require_lerobot()
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from odsd.lerobot.dataset import OdsdLeRobotDataset

    ds = OdsdLeRobotDataset(store, watermark=watermark, selection=selection, label=label, repo_id=repo_id)
    meta = ds.meta
    fps = float(meta.fps)
    if not fps.is_integer():
        raise ConfigError(f"LeRobot datasets need an integer fps; this store records at {fps:g}")
    if ds.view.num_frames == 0:
        raise ConfigError("nothing to export: the selection holds no episodes")
    unit = export_unit(ds)
    view = unit.view
    features = {k: {**v, "shape": list(v["shape"])} for k, v in meta.features.items()}
    hf_features = lr.get_hf_features_from_features(
        {k: {**v, "shape": tuple(v["shape"])} for k, v in features.items()}
    )
    schema = hf_features.arrow_schema
    cols = view.columns

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.{uuid.uuid4().hex[:8]}{PARTIAL_MARK}"
    tmp.mkdir()
    bar: Any = None
    try:
        frame_bytes = sum(int(c.dtype.itemsize * np.prod(c.shape[1:], dtype=np.int64)) for c in cols.values())
        groups = _plan_files(view.lengths, frame_bytes, data_files_size_in_mb, chunks_size)
        total = view.num_frames
        callback: Callable[[int, int], None] | None = progress if callable(progress) else None
        if progress is True:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            bar = Progress(TextColumn("export"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
            bar.start()
            task = bar.add_task("frames", total=total)
            callback = lambda done, _total: bar.update(task, completed=done)  # noqa: E731
        n_ep = len(view.entries)
        data_chunk = np.zeros(n_ep, dtype=np.int64)
        data_file = np.zeros(n_ep, dtype=np.int64)
        for chunk, file, a, b in groups:
            lo, hi = int(view.from_index[a]), int(view.to_index[b - 1])
            arrays = [_arrow_column(cols[name][lo:hi], pa) for name in schema.names]
            table = pa.Table.from_arrays(arrays, schema=schema)
            path = tmp / lr.DEFAULT_DATA_PATH.format(chunk_index=chunk, file_index=file)
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, path, compression="snappy")
            data_chunk[a:b], data_file[a:b] = chunk, file
            if callback:
                callback(hi, total)

        # -- meta/episodes ------------------------------------------------------------------
        table = unit.episodes
        ep_cols: dict[str, Any] = {
            "episode_index": pa.array(np.arange(n_ep, dtype=np.int64)),
            "tasks": pa.array(table["tasks"], type=pa.list_(pa.string())),
            "length": pa.array(view.lengths),
            "data/chunk_index": pa.array(data_chunk),
            "data/file_index": pa.array(data_file),
            "dataset_from_index": pa.array(view.from_index),
            "dataset_to_index": pa.array(view.to_index),
        }
        for name in features:
            values = cols[name]
            for stat, arr in episode_stats(values, view.from_index, view.lengths).items():
                ep_cols[f"stats/{name}/{stat}"] = _list_column(
                    arr.astype(np.int64) if stat == "count" else arr, pa
                )
        ep_cols["meta/episodes/chunk_index"] = pa.array(np.zeros(n_ep, dtype=np.int64))
        ep_cols["meta/episodes/file_index"] = pa.array(np.zeros(n_ep, dtype=np.int64))
        for key in table.column_names:
            if key.startswith("odsd/"):
                ep_cols[key] = pa.array(table[key])
        ep_path = tmp / lr.DEFAULT_EPISODES_PATH.format(chunk_index=0, file_index=0)
        ep_path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(ep_cols), ep_path, compression="snappy")

        # -- info, stats, tasks -------------------------------------------------------------
        lr.write_tasks(
            pd.DataFrame(
                {"task_index": np.arange(len(meta.task_names), dtype=np.int64)}, index=meta.task_names
            ),
            tmp,
        )
        info = dict(meta.info)
        info["features"] = features
        info["total_episodes"] = n_ep
        info["total_frames"] = view.num_frames
        info["splits"] = {"train": f"0:{n_ep}"}
        info["odsd"] = unit.provenance
        info["chunks_size"] = int(chunks_size)
        info["data_files_size_in_mb"] = data_files_size_in_mb
        info["fps"] = int(fps)
        lr.write_info(info, tmp)
        lr.write_stats(unit.stats, tmp)
        (tmp / "meta" / "odsd.json").write_text(json.dumps(unit.provenance, indent=1, sort_keys=True))
        if durable:
            fsync_tree(tmp)

        # -- publish ------------------------------------------------------------------------
        old = None
        if out.exists():
            old = out.parent / f".{out.name}.{uuid.uuid4().hex[:8]}.odsd-export-old"
            os.rename(out, old)
        os.rename(tmp, out)
        if durable:
            fsync_dir(out.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if bar is not None:
            bar.stop()
    return ExportResult(
        out=out,
        repo_id=meta.repo_id,
        watermark=meta.watermark,
        episodes=n_ep,
        frames=view.num_frames,
        data_files=len(groups),
        invalid_labels=int((~view.label_valid).sum()),
        stats_version=unit.stats_version,
        seconds=time.perf_counter() - t0,
        unit=unit.unit,
        source_episodes=unit.source_episodes,
    )
