"""Camera reading and export against LeRobot on the same frames (docs/performance.md, "cameras").

    python bench/reader_images.py [--episodes 24] [--size 96] [--cameras 2] [--seconds 3]

Builds a store of episodes with ``--cameras`` RGB cameras of ``--size``² pixels (rendered-like
frames from ``odsd.testing.frames``), exports it as LeRobot video (SVT-AV1, LeRobot's defaults),
and measures side by side in one run, printing ratios:

- reader: ``OdsdLeRobotDataset`` items/s (item path) and camera frames/s (``get_batch``, batch
  64) against ``LeRobotDataset`` items/s on the exported video (its own decoder: pyav here, as
  torchcodec cannot load without system FFmpeg libraries), with a 16-step action chunk; in one
  process and through a DataLoader with 2 workers;
- export: ``export_lerobot`` frames/s against LeRobot's own ``add_frame`` / ``save_episode`` with
  video encoding (``use_videos=True``, 4 image-writer threads per camera as ``lerobot-record``
  uses) on the same episodes.

``bench/cameras.py`` imports :func:`build_store`, :func:`measure_reader` and :func:`measure_export`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("SVT_LOG", "1")

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reader import loader_rate, rate  # bench/reader.py: the same timing loops

DEFAULT_KEYS = ("timestamp", "frame_index", "episode_index", "index", "task_index")


def build_store(root: Path, episodes: int, *, size: int = 96, cameras: int = 2, fps: int = 20, seed: int = 0):
    """A store of ``episodes`` episodes (40..110 frames) with state, actions and ``cameras`` cameras."""
    from odsd.schema import EpisodeMeta
    from odsd.store import Episode, EpisodeStore
    from odsd.testing.frames import rendered_frames

    names = ["top", "wrist", "side", "front"][:cameras]
    features: dict[str, dict[str, Any]] = {
        "observation.state": {"dtype": "float32", "shape": [17]},
        "action.expert": {"dtype": "float32", "shape": [4]},
        "action.expert_valid": {"dtype": "bool", "shape": []},
        "reward": {"dtype": "float32", "shape": []},
        "terminated": {"dtype": "bool", "shape": []},
        "episode_step": {"dtype": "int32", "shape": []},
    }
    for cam in names:
        features[f"observation.images.{cam}"] = {
            "dtype": "uint8",
            "shape": [size, size, 3],
            "names": ["height", "width", "channels"],
            "kind": "image",
        }
    store = EpisodeStore.create(root, features=features, fps=fps, durability="process")
    rng = np.random.default_rng(seed)
    writer = store.writer(run_id="bench")
    batch = []
    for i in range(episodes):
        n = int(rng.integers(40, 110))
        frames: dict[str, np.ndarray] = {
            "observation.state": rng.standard_normal((n, 17)).astype(np.float32),
            "action.expert": rng.uniform(-1, 1, (n, 4)).astype(np.float32),
            "action.expert_valid": np.ones(n, dtype=bool),
            "reward": np.zeros(n, dtype=np.float32),
            "terminated": np.arange(n) == n - 1,
            "episode_step": np.arange(n, dtype=np.int32),
        }
        for c, cam in enumerate(names):
            frames[f"observation.images.{cam}"] = rendered_frames(n, size, size, seed=seed * 1000 + i * 8 + c)
        batch.append(Episode(frames=frames, meta=EpisodeMeta(length=n, success=True, task="pick")))
        if len(batch) == 8:
            writer.commit(batch)
            batch = []
    if batch:
        writer.commit(batch)
    return store


def measure_reader(store, export_dir: Path, *, seconds: float = 3.0, batch: int = 64) -> dict[str, float]:
    """Items/s and camera frames/s of the reader vs ``LeRobotDataset`` on the exported video."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from odsd.lerobot import OdsdLeRobotDataset, batch_loader, compat

    fps = float(store.manifest.fps)
    dt = {"action": [i / fps for i in range(16)]}
    ods = OdsdLeRobotDataset(store, delta_timestamps=dt)
    backend = compat.video_backend()
    lds = LeRobotDataset("bench/odsd", root=export_dir, delta_timestamps=dt, video_backend=backend)
    cams = len(ods.camera_keys)
    rng = np.random.default_rng(0)
    n = len(ods)
    res: dict[str, Any] = {"cameras": cams, "video_backend": backend}
    res["odsd_items_s"] = rate(lambda: ods[int(rng.integers(n))], 1, seconds)
    res["lerobot_items_s"] = rate(lambda: lds[int(rng.integers(len(lds)))], 1, seconds)
    res["odsd_batch_frames_s"] = cams * rate(lambda: ods.get_batch(rng.integers(0, n, batch)), batch, seconds)
    res["lerobot_frames_s"] = cams * res["lerobot_items_s"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:

        def dl(d):
            return torch.utils.data.DataLoader(d, batch_size=batch, shuffle=True, num_workers=2)

        res["odsd_items_dl2_s"] = loader_rate(dl(ods), batch, seconds)
        res["lerobot_items_dl2_s"] = loader_rate(dl(lds), batch, seconds)
        res["odsd_batch_frames_dl2_s"] = cams * loader_rate(
            batch_loader(ods, batch, num_workers=2), batch, seconds
        )
    finally:
        torch.set_num_threads(threads)
    res["lerobot_frames_dl2_s"] = cams * res["lerobot_items_dl2_s"]
    res["ratio_items"] = res["odsd_items_s"] / res["lerobot_items_s"]
    res["ratio_batch_frames"] = res["odsd_batch_frames_s"] / res["lerobot_frames_s"]
    res["ratio_items_dl2"] = res["odsd_items_dl2_s"] / res["lerobot_items_dl2_s"]
    res["ratio_batch_frames_dl2"] = res["odsd_batch_frames_dl2_s"] / res["lerobot_frames_dl2_s"]
    return res


def measure_export(store, tmp: Path, *, episodes: int = 6) -> dict[str, float]:
    """Export frames/s (video) vs LeRobot's ``add_frame``/``save_episode`` with video, same episodes."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from odsd.lerobot import OdsdLeRobotDataset, Selection, export_lerobot

    ods = OdsdLeRobotDataset(store, decode_cache_bytes=0)
    view = ods.view
    k = min(episodes, len(view.entries))
    stop = int(view.to_index[k - 1])
    res: dict[str, float] = {"export_frames": stop, "export_episodes": k}
    t0 = time.perf_counter()
    result = export_lerobot(
        store, tmp / "odsd-small", selection=Selection(episodes=view.episode_ids[:k].tolist()), durable=False
    )
    res["odsd_export_frames_s"] = stop / (time.perf_counter() - t0)
    res["odsd_export_workers_video_files"] = result.video_files

    feats = {
        name: {key: v for key, v in ft.items() if key != "info"}
        for name, ft in ods.meta.features.items()
        if name not in DEFAULT_KEYS
    }
    cams = list(ods.camera_keys)
    lr = LeRobotDataset.create(
        "bench/lerobot",
        fps=int(store.manifest.fps),
        features=feats,
        root=tmp / "lr-writer",
        use_videos=True,
        image_writer_threads=4 * len(cams),
    )
    frames = ods.camera_frames(view)
    cols = {name: view.columns[name] for name in feats if name not in cams}
    t0 = time.perf_counter()
    for e in range(k):
        lo, hi = int(view.from_index[e]), int(view.to_index[e])
        images = {key: frames.read(key, np.arange(lo, hi)) for key in cams}
        for f in range(lo, hi):
            frame: dict[str, Any] = {name: (c[f] if c.ndim > 1 else c[f : f + 1]) for name, c in cols.items()}
            frame.update({key: images[key][f - lo] for key in cams})
            frame["task"] = "pick"
            lr.add_frame(frame)
        lr.save_episode()
    lr.finalize()
    res["lerobot_writer_frames_s"] = stop / (time.perf_counter() - t0)
    res["ratio_export"] = res["odsd_export_frames_s"] / res["lerobot_writer_frames_s"]
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=24)
    ap.add_argument("--size", type=int, default=96)
    ap.add_argument("--cameras", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--writer-episodes", type=int, default=6)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="odsd-bench-cameras-"))
    os.environ.setdefault("HF_DATASETS_CACHE", str(tmp / "hf-cache"))
    try:
        import lerobot.datasets.lerobot_dataset  # noqa: F401  (import cost excluded from every figure)

        from odsd.lerobot import export_lerobot

        store = build_store(tmp / "store", args.episodes, size=args.size, cameras=args.cameras)
        snap = store.snapshot()
        res: dict[str, Any] = {"episodes": snap.num_episodes, "frames": snap.num_frames, "size": args.size}
        t0 = time.perf_counter()
        export_lerobot(store, tmp / "export", repo_id="bench/odsd", durable=False)
        res["odsd_export_full_frames_s"] = snap.num_frames / (time.perf_counter() - t0)
        res |= measure_export(store, tmp, episodes=args.writer_episodes)
        res |= measure_reader(store, tmp / "export", seconds=args.seconds)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(res, indent=1))
        return
    print(
        f"data: {res['episodes']} episodes, {res['frames']} frames, {res['cameras']} cameras of "
        f"{res['size']}x{res['size']}, 16-step action chunk; LeRobot decodes with {res['video_backend']}"
    )
    rows = [
        ("items/s, 1 process", "odsd_items_s", "lerobot_items_s", "ratio_items"),
        ("camera frames/s, batch path (64)", "odsd_batch_frames_s", "lerobot_frames_s", "ratio_batch_frames"),
        ("items/s, DataLoader 2 workers", "odsd_items_dl2_s", "lerobot_items_dl2_s", "ratio_items_dl2"),
        (
            "camera frames/s, batch path, 2 workers",
            "odsd_batch_frames_dl2_s",
            "lerobot_frames_dl2_s",
            "ratio_batch_frames_dl2",
        ),
        ("export frames/s (video)", "odsd_export_frames_s", "lerobot_writer_frames_s", "ratio_export"),
    ]
    print(f"{'':40s} {'odsd':>10s} {'LeRobot':>10s} {'ratio':>8s}")
    for label, a, b, r in rows:
        print(f"{label:40s} {res[a]:10,.0f} {res[b]:10,.0f} {res[r]:7.1f}x")
    print(
        f"(export of the same {res['export_episodes']} episodes, {res['export_frames']} frames; "
        f"full store: {res['odsd_export_full_frames_s']:,.0f} frames/s)"
    )


if __name__ == "__main__":
    main()
