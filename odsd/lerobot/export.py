"""``export_lerobot``: a snapshot of an odsd store as a LeRobot v3.0 dataset directory.

Written in bulk, never frame by frame: every data file is one ``pyarrow`` table built from whole
columns (the reader's own columns, so an export holds exactly what :class:`OdsdLeRobotDataset`
serves), metadata through LeRobot's helpers (``write_info``, ``write_stats``, ``write_tasks``, by
way of :mod:`odsd.lerobot.compat`)::

    OUT/meta/info.json  meta/stats.json  meta/tasks.parquet  meta/odsd.json
    OUT/meta/episodes/chunk-000/file-000.parquet
    OUT/data/chunk-000/file-000.parquet ...
    OUT/videos/observation.images.top/chunk-000/file-000.mp4 ...   (camera fields)

Camera fields (``kind="image"``) are written as LeRobot ``video`` features by default (mp4 with
LeRobot's encoder defaults, :class:`~odsd.lerobot.video.VideoEncoder`; ``video_encoder`` to
choose the codec and quality), or as ``image`` features (PNG cells in the data files) with
``images=True``; encoding runs on ``workers`` threads (default: every core) and reads frames
lazily (:mod:`odsd.lerobot.export_cameras`). Depth fields (``kind="depth"``) are skipped with one
warning (``ExportResult.skipped``): LeRobot 0.4 has no depth features and 0.6's quantize to
12 bits.

Data files roll over at ``data_files_size_in_mb`` (uncompressed, LeRobot's measure) and chunks at
``chunks_size`` files, with whole episodes per file. The directory is built under a hidden
temporary name next to ``OUT`` and renamed into place only when complete, so an interrupted
export leaves no loadable dataset at ``OUT`` (and, with ``overwrite``, the old one stays until
the new one is complete). Temporaries carry the exporting pid in their name; the next export of
the same ``OUT`` removes those whose process is gone.

Provenance (store id, watermark, label, selection, statistics version) goes to ``meta/odsd.json``
and per-episode ``odsd/*`` columns, where both LeRobot lines keep it: ``info.json`` holds only the
fields LeRobot's ``DatasetInfo`` knows.

The exported episodes are the selected episodes, or with ``Selection(segments=...)`` and/or
``failure_focused`` one LeRobot episode per matching segment clip (:mod:`odsd.lerobot.units`).

Needs the ``odsd[lerobot]`` extra (pyarrow, pandas and LeRobot's metadata helpers).
"""

from __future__ import annotations

import glob
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from odsd.errors import ConfigError, OdsdError
from odsd.lerobot import compat
from odsd.lerobot.export_cameras import default_workers, encode_videos, image_column, png_cells
from odsd.lerobot.selection import Selection
from odsd.lerobot.stats import STAT_KEYS, episode_sample, episode_stats, image_stats
from odsd.lerobot.units import Unit, export_unit
from odsd.lerobot.video import VideoEncoder
from odsd.lerobot.view import video_info
from odsd.store import EpisodeStore
from odsd.store.fsio import fsync_dir, fsync_tree

PARTIAL_MARK = ".odsd-export-partial"
OLD_MARK = ".odsd-export-old"
PROVENANCE_PATH = "meta/odsd.json"
log = logging.getLogger("odsd.lerobot")


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
    cameras: tuple[str, ...] = ()
    camera_dtype: str | None = None
    """``"video"`` or ``"image"`` when there are cameras."""
    video_files: int = 0
    skipped: tuple[str, ...] = ()
    """Store fields not exported (depth)."""

    @property
    def frames_per_s(self) -> float:
        return self.frames / self.seconds if self.seconds > 0 else float("inf")


def _arrow_column(values: np.ndarray, field_type: Any, pa: Any) -> Any:
    """A column of ``values`` in the layout of LeRobot's schema (shape ``(1,)`` is a plain value)."""
    if values.ndim == 1 or not pa.types.is_fixed_size_list(field_type):
        return pa.array(values.reshape(len(values)))
    flat = pa.array(np.ascontiguousarray(values).reshape(-1))
    return pa.FixedSizeListArray.from_arrays(flat, int(np.prod(values.shape[1:])))


def _list_column(rows: np.ndarray, pa: Any) -> Any:
    """``[E, D]`` → ``list<…>`` column (what LeRobot's episode metadata writer produces)."""
    rows = np.ascontiguousarray(rows)
    offsets = np.arange(0, rows.size + 1, rows.shape[1], dtype=np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(rows.reshape(-1)))


def read_provenance(root: str | Path) -> dict[str, Any]:
    """The ``meta/odsd.json`` of an export: store id, watermark, label, selection, statistics version."""
    return json.loads((Path(root) / PROVENANCE_PATH).read_text())


def _temporary_owner(path: Path, out: Path) -> int | None:
    """The pid in a temporary's name ``.OUT.<pid>.<hex><mark>``, or None if ``path`` is not OUT's."""
    for mark in (PARTIAL_MARK, OLD_MARK):
        prefix = f".{out.name}."
        if path.name.startswith(prefix) and path.name.endswith(mark):
            pid = path.name[len(prefix) : -len(mark)].split(".")[0]
            return int(pid) if pid.isdigit() else 0
    return None


def remove_stale_temporaries(out: Path) -> list[Path]:
    """Remove what killed exports of ``out`` left beside it; an export still running keeps its own.

    A temporary is stale when the process named in it is gone (or it predates pids in names). The
    previous dataset renamed aside by an export killed just before publishing stays while ``out``
    does not exist, so that it is never the only copy removed.
    """
    from odsd.daemon.lock import pid_alive

    removed: list[Path] = []
    for path in out.parent.glob(f".{glob.escape(out.name)}.*"):
        pid = _temporary_owner(path, out)
        if pid is None or (pid and pid_alive(pid)):
            continue
        if path.name.endswith(OLD_MARK) and not out.exists():
            log.warning("%s holds the dataset that was at %s before an interrupted export; kept", path, out)
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


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
    images: bool = False,
    video_encoder: VideoEncoder | None = None,
    video_files_size_in_mb: float = 200,
    workers: int | None = None,
) -> ExportResult:
    """Write the selected episodes at ``watermark`` as a LeRobot v3.0 dataset at ``out``.

    With ``selection.segments`` and/or ``selection.failure_focused`` each matching segment clip is
    exported as its own episode (see :mod:`odsd.lerobot.units`); window modes are refused.

    Cameras: ``video`` features encoded with ``video_encoder`` (LeRobot's defaults), or ``image``
    features with ``images=True``; ``workers`` encoder threads (default: every core).

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
    if chunks_size < 1 or data_files_size_in_mb <= 0 or video_files_size_in_mb <= 0:
        raise ConfigError("chunks_size, data_files_size_in_mb and video_files_size_in_mb must be positive")
    if workers is not None and workers < 1:
        raise ConfigError(f"workers must be >= 1, not {workers}")
    workers = workers or default_workers()
    encoder = video_encoder or VideoEncoder()
    compat.require()
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from odsd.lerobot.dataset import OdsdLeRobotDataset

    ds = OdsdLeRobotDataset(
        store,
        watermark=watermark,
        selection=selection,
        label=label,
        repo_id=repo_id,
        cameras="image" if images else "video",
        decode_cache_bytes=0,
    )
    meta = ds.meta
    store_features = ds.snapshot.store.manifest.features
    cameras = tuple(ds.camera_keys)
    skipped = tuple(k for k, spec in store_features.items() if spec.kind == "depth")
    for key in skipped:
        log.warning("%s: depth is not exported (LeRobot has no lossless depth feature); skipped", key)
    if not images:
        for key in cameras:
            if store_features[key].shape[-1] != 3:
                raise ConfigError(f"{key}: video export needs 3-channel frames; use --images")
    fps = float(meta.fps)
    if not fps.is_integer():
        raise ConfigError(f"LeRobot datasets need an integer fps; this store records at {fps:g}")
    if ds.view.num_frames == 0:
        raise ConfigError("nothing to export: the selection holds no episodes")
    unit = export_unit(ds)
    view = unit.view
    features = {k: {**v, "shape": list(v["shape"])} for k, v in meta.features.items()}
    if not images:
        for key in cameras:
            features[key]["info"] = video_info(store_features[key], fps, encoder)
    schema = compat.hf_features(features).arrow_schema
    cols = view.columns
    frames = ds.camera_frames(view)

    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(out)
    tmp = out.parent / f".{out.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}{PARTIAL_MARK}"
    tmp.mkdir()
    bar: Any = None
    try:
        frame_bytes = sum(int(c.dtype.itemsize * np.prod(c.shape[1:], dtype=np.int64)) for c in cols.values())
        if images:
            frame_bytes += sum(int(np.prod(store_features[k].shape)) for k in cameras)
        groups = _plan_files(view.lengths, frame_bytes, data_files_size_in_mb, chunks_size)
        encoded = 0 if images else len(cameras)
        total = view.num_frames * (1 + encoded)
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
        camera_stats: dict[str, list[dict[str, np.ndarray]]] = {k: [] for k in cameras}
        pool = ThreadPoolExecutor(max_workers=workers) if images and cameras else None
        for chunk, file, a, b in groups:
            lo, hi = int(view.from_index[a]), int(view.to_index[b - 1])
            cells: dict[str, Any] = {}
            for key in cameras if images else ():
                values = frames.read(key, np.arange(lo, hi, dtype=np.int64))
                assert pool is not None
                cells[key] = image_column(png_cells(values, pool), pa)
                for e in range(a, b):
                    start = int(view.from_index[e]) - lo
                    sample = values[start + episode_sample(int(view.lengths[e]))]
                    camera_stats[key].append(image_stats(sample))
            arrays = [
                cells[f.name] if f.name in cells else _arrow_column(cols[f.name][lo:hi], f.type, pa)
                for f in schema
            ]
            table = pa.Table.from_arrays(arrays, schema=schema)
            path = tmp / compat.DATA_PATH.format(chunk_index=chunk, file_index=file)
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, path, compression="snappy")
            data_chunk[a:b], data_file[a:b] = chunk, file
            if callback:
                callback(hi, total)
        if pool is not None:
            pool.shutdown()

        # -- videos -------------------------------------------------------------------------
        done = view.num_frames

        def advance(n: int) -> None:
            nonlocal done
            done += n
            if callback:
                callback(done, total)

        plans = encode_videos(
            frames,
            view,
            () if images else cameras,
            tmp,
            fps=int(fps),
            encoder=encoder,
            workers=workers,
            chunks_size=chunks_size,
            file_size_mb=video_files_size_in_mb,
            progress=advance if callback else None,
        )

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
        for plan in plans.values():
            ep_cols.update({k: pa.array(v) for k, v in plan.columns().items()})
            camera_stats[plan.key] = [{k: plan.stats[k][e] for k in STAT_KEYS} for e in range(n_ep)]
        for name in features:
            if name in camera_stats:
                for stat in STAT_KEYS:
                    rows = [s[stat].tolist() for s in camera_stats[name]]
                    ep_cols[f"stats/{name}/{stat}"] = pa.array(rows)
                continue
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
        ep_path = tmp / compat.EPISODES_PATH.format(chunk_index=0, file_index=0)
        ep_path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(ep_cols), ep_path, compression="snappy")

        # -- info, stats, tasks -------------------------------------------------------------
        compat.write_tasks(
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
        info["chunks_size"] = int(chunks_size)
        info["data_files_size_in_mb"] = data_files_size_in_mb
        info["video_files_size_in_mb"] = video_files_size_in_mb
        info["fps"] = int(fps)
        compat.write_info(info, tmp)
        compat.write_stats(unit.stats, tmp)
        (tmp / PROVENANCE_PATH).write_text(json.dumps(unit.provenance, indent=1, sort_keys=True))
        if durable:
            fsync_tree(tmp)

        # -- publish ------------------------------------------------------------------------
        old = None
        if out.exists():
            old = out.parent / f".{out.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}{OLD_MARK}"
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
        cameras=cameras,
        camera_dtype=("image" if images else "video") if cameras else None,
        video_files=sum(len(p.files) for p in plans.values()),
        skipped=skipped,
    )
