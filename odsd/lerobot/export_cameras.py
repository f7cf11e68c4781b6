"""Camera features of an export: mp4 files per LeRobot v3.0 (``video``) or PNG cells (``image``).

**Video** (the default). Each camera's episodes are split into contiguous *shards* balanced by
frame count, one per worker thread (``workers`` defaults to every core; encoders release the
GIL). A shard reads its frames through the store's ``read_frames`` (a block at a time, never a
whole camera), encodes them into one mp4 and starts a new file when the current one reaches
``video_files_size_in_mb`` at an episode boundary. The files are then numbered in episode order
``videos/<key>/chunk-CCC/file-FFF.mp4``; episode ``e`` of a file starts at frame ``k`` of it, so
``from_timestamp = k / fps`` and ``to_timestamp = (k + length) / fps``, the metadata LeRobot's
decoders read::

    plans = encode_videos(frames, view, keys, tmp, fps=20, encoder=VideoEncoder(), workers=8)
    plans[key].columns()   # videos/<key>/chunk_index, file_index, from_timestamp, to_timestamp

**Images** (``--images``). Each frame becomes a PNG (zlib level 1) in the data files' ``image``
column (``{"bytes": png, "path": None}``, the cell LeRobot's ``datasets.Image`` feature holds),
encoded by a thread pool per data file.

Per-episode camera statistics (the ``stats/<key>/*`` columns) are computed on each episode's
LeRobot sample of frames (``sample_indices``), from the frames the encoder already holds.
"""

from __future__ import annotations

import io
import itertools
import math
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from odsd.lerobot.frames import CameraFrames
from odsd.lerobot.meta import VIDEO_PATH
from odsd.lerobot.stats import STAT_KEYS, episode_sample, image_stats
from odsd.lerobot.video import Mp4Writer, VideoEncoder
from odsd.lerobot.view import View

BLOCK_FRAMES = 256
"""Frames read (and held) at a time per encoder."""
PNG_LEVEL = 1


def default_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


@dataclass
class VideoPlan:
    """Where each exported episode of one camera lies: file number and first frame in that file."""

    key: str
    fps: int
    file_of_episode: np.ndarray
    first_frame: np.ndarray
    lengths: np.ndarray
    files: list[Path] = field(default_factory=list)
    """Final relative paths, in file-number order."""
    chunk_of_file: list[int] = field(default_factory=list)
    index_of_file: list[int] = field(default_factory=list)
    stats: dict[str, np.ndarray] = field(default_factory=dict)
    """Per-episode stats, each ``[E, C, 1, 1]`` (``count``: ``[E, 1]``)."""

    def columns(self) -> dict[str, np.ndarray]:
        f = self.file_of_episode
        return {
            f"videos/{self.key}/chunk_index": np.asarray(self.chunk_of_file, dtype=np.int64)[f],
            f"videos/{self.key}/file_index": np.asarray(self.index_of_file, dtype=np.int64)[f],
            f"videos/{self.key}/from_timestamp": self.first_frame / self.fps,
            f"videos/{self.key}/to_timestamp": (self.first_frame + self.lengths) / self.fps,
        }


def shards(lengths: np.ndarray, parts: int) -> list[tuple[int, int]]:
    """Contiguous episode ranges ``[a, b)`` (at most ``parts``, none empty) of about equal frames."""
    n = len(lengths)
    parts = max(1, min(parts, n))
    ends = np.cumsum(lengths)
    total = int(ends[-1]) if n else 0
    cuts = [0]
    for k in range(1, parts):
        cut = int(np.searchsorted(ends, total * k / parts, side="left")) + 1
        if cuts[-1] < cut < n:
            cuts.append(cut)
    cuts.append(n)
    return [(a, b) for a, b in itertools.pairwise(cuts) if b > a]


def episode_frame_stats(frames: np.ndarray) -> dict[str, np.ndarray]:
    """One episode's camera stats, LeRobot's way: its ``sample_indices`` frames, ``(C, 1, 1)`` in [0, 1]."""
    return image_stats(frames[episode_sample(len(frames))])


def _stack_stats(per_episode: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {k: np.stack([s[k] for s in per_episode]) for k in STAT_KEYS}


def encode_videos(
    frames: CameraFrames,
    view: View,
    keys: Sequence[str],
    out: Path,
    *,
    fps: int,
    encoder: VideoEncoder,
    workers: int,
    chunks_size: int,
    file_size_mb: float,
    progress: Callable[[int], None] | None = None,
) -> dict[str, VideoPlan]:
    """Encode every camera of ``view`` under ``out/videos``; one :class:`VideoPlan` per camera."""
    if not keys:
        return {}
    encoder.check_available()
    limit = file_size_mb * 1024**2
    per_camera = max(1, math.ceil(workers / len(keys)))
    ranges = shards(view.lengths, per_camera)
    n_ep = len(view.lengths)

    def run(key: str, shard: int, a: int, b: int) -> tuple[list[Path], list[tuple[int, int]], list[dict]]:
        height, width, _ = frames.features[key].shape
        tmp_files: list[Path] = []
        where: list[tuple[int, int]] = []  # (local file, first frame) per episode
        ep_stats: list[dict] = []
        writer: Mp4Writer | None = None
        try:
            for e in range(a, b):
                if writer is None or writer.bytes >= limit:
                    if writer is not None:
                        writer.close()
                    path = out / f"videos/{key}/.shard-{shard:04d}-{len(tmp_files):04d}.mp4"
                    tmp_files.append(path)
                    writer = Mp4Writer(path, fps=fps, width=width, height=height, encoder=encoder)
                where.append((len(tmp_files) - 1, writer.frames))
                lo, n = int(view.from_index[e]), int(view.lengths[e])
                sample = set((lo + episode_sample(n)).tolist())
                sampled: list[np.ndarray] = []
                for start in range(lo, lo + n, BLOCK_FRAMES):
                    pos = np.arange(start, min(lo + n, start + BLOCK_FRAMES), dtype=np.int64)
                    block = frames.read(key, pos)
                    writer.write(block)
                    sampled.extend(block[i] for i, p in enumerate(pos.tolist()) if p in sample)
                    if progress:
                        progress(len(pos))
                ep_stats.append(image_stats(np.stack(sampled)))
        finally:
            if writer is not None:
                writer.close()
        return tmp_files, where, ep_stats

    tasks = [(key, s, a, b) for key in keys for s, (a, b) in enumerate(ranges)]
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(tasks)))) as pool:
        results = list(pool.map(lambda t: run(*t), tasks))

    plans: dict[str, VideoPlan] = {}
    for key in keys:
        plan = VideoPlan(
            key=key,
            fps=fps,
            file_of_episode=np.zeros(n_ep, dtype=np.int64),
            first_frame=np.zeros(n_ep, dtype=np.int64),
            lengths=np.asarray(view.lengths, dtype=np.int64),
        )
        stats: list[dict] = []
        chunk = number = 0
        for (k, _s, a, _b), (tmp_files, where, ep_stats) in zip(tasks, results, strict=True):
            if k != key:
                continue
            base = len(plan.files)
            for path in tmp_files:
                rel = Path(VIDEO_PATH.format(video_key=key, chunk_index=chunk, file_index=number))
                (out / rel).parent.mkdir(parents=True, exist_ok=True)
                os.rename(path, out / rel)
                plan.files.append(rel)
                plan.chunk_of_file.append(chunk)
                plan.index_of_file.append(number)
                number += 1
                if number == chunks_size:
                    chunk, number = chunk + 1, 0
            for i, (local, first) in enumerate(where):
                plan.file_of_episode[a + i] = base + local
                plan.first_frame[a + i] = first
            stats.extend(ep_stats)
        plan.stats = _stack_stats(stats)
        plans[key] = plan
    return plans


def png_cells(frames: np.ndarray, pool: ThreadPoolExecutor) -> list[bytes]:
    """PNG bytes of ``[n, H, W, C]`` uint8 frames (C = 1 or 3), encoded on ``pool``."""
    from PIL import Image

    def encode(img: np.ndarray) -> bytes:
        buf = io.BytesIO()
        Image.fromarray(img[..., 0] if img.shape[-1] == 1 else img).save(
            buf, format="PNG", compress_level=PNG_LEVEL
        )
        return buf.getvalue()

    return list(pool.map(encode, frames))


def image_column(png: list[bytes], pa: Any) -> Any:
    """The ``struct<bytes, path>`` column of a ``datasets.Image`` feature."""
    return pa.StructArray.from_arrays(
        [pa.array(png, type=pa.binary()), pa.nulls(len(png), type=pa.string())], names=["bytes", "path"]
    )
