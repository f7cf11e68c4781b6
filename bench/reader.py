"""Reader and export throughput against LeRobot on the same data (docs/performance.md).

    python bench/reader.py [--episodes 200] [--seconds 3]

Builds a store of collected-shaped episodes (pick_place schema: 17-d state, 6-d environment
state, 4-d actions, odsd extras), exports it, and measures side by side, in one run:

- samples/s: ``OdsdLeRobotDataset`` item path and batch path (``get_batch``, batch 256) against
  ``LeRobotDataset`` on the export, with ``delta_timestamps`` for a 16-step action chunk; single
  process and through a DataLoader with 2 workers;
- export frames/s: ``export_lerobot`` against LeRobot's own ``add_frame`` / ``save_episode`` writer
  on the same episodes (imports excluded from both).
Prints one table and the ratios; ``--json`` prints them as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch


def build_store(root: Path, episodes: int, seed: int = 0):
    from odsd.collect.frames import frame_features
    from odsd.envs import make_env
    from odsd.schema import EpisodeMeta
    from odsd.store import Episode, EpisodeStore

    env = make_env("pick_place", num_envs=1)
    features = frame_features(env.spec)
    store = EpisodeStore.create(
        root, features=features, fps=20, robot_type="pick_place", durability="process"
    )
    rng = np.random.default_rng(seed)
    writer = store.writer(run_id="bench")
    batch = []
    for i in range(episodes):
        n = int(rng.integers(40, 110))
        frames = {}
        for name, spec in features.items():
            shape = (n, *spec["shape"])
            dt = np.dtype(spec["dtype"])
            if dt.kind == "b":
                frames[name] = np.ones(shape, bool) if name.endswith("_valid") else rng.random(shape) < 0.1
            elif dt.kind in "iu":
                frames[name] = rng.integers(0, 5, shape).astype(dt)
            else:
                frames[name] = rng.standard_normal(shape).astype(dt)
        frames["episode_step"] = np.arange(n, dtype=np.int32)
        batch.append(
            Episode(frames=frames, meta=EpisodeMeta(length=n, iteration=i // 50, success=True, task="pick"))
        )
        if len(batch) == 32:
            writer.commit(batch)
            batch = []
    if batch:
        writer.commit(batch)
    return store


def rate(fn, n_per_call: int, seconds: float) -> float:
    fn()  # warm
    t0 = time.perf_counter()
    done = 0
    while time.perf_counter() - t0 < seconds:
        fn()
        done += n_per_call
    return done / (time.perf_counter() - t0)


def loader_rate(loader, n_per_batch: int, seconds: float) -> float:
    it = iter(loader)
    next(it)
    t0 = time.perf_counter()
    done = 0
    for _ in it:
        done += n_per_batch
        if time.perf_counter() - t0 > seconds:
            break
    return done / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--writer-episodes", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="odsd-bench-reader-"))
    os.environ.setdefault("HF_DATASETS_CACHE", str(tmp / "hf-cache"))
    try:
        import lerobot.datasets.utils  # noqa: F401  (import cost excluded from every figure)
        from lerobot.datasets.lerobot_dataset import LeRobotDataset

        from odsd.lerobot import OdsdLeRobotDataset, Selection, batch_loader, export_lerobot

        store = build_store(tmp / "store", args.episodes)
        snap = store.snapshot()
        fps = 20
        dt = {"action": [i / fps for i in range(16)]}
        res: dict[str, float] = {"frames": snap.num_frames, "episodes": snap.num_episodes}

        # -- export ---------------------------------------------------------------------------
        t0 = time.perf_counter()
        export_lerobot(store, tmp / "export", repo_id="bench/odsd", durable=False)
        res["export_fps"] = snap.num_frames / (time.perf_counter() - t0)

        # LeRobot's frame-by-frame writer on the first --writer-episodes episodes (same features)
        ods = OdsdLeRobotDataset(store)
        feats = {
            k: v
            for k, v in ods.meta.features.items()
            if k not in ("timestamp", "frame_index", "episode_index", "index", "task_index")
        }
        view = ods.view
        k = min(args.writer_episodes, len(view.entries))
        stop = int(view.to_index[k - 1])
        lr = LeRobotDataset.create(
            "bench/lerobot", fps=fps, features=feats, root=tmp / "lr-writer", use_videos=False
        )
        cols = {name: view.columns[name] for name in feats}
        t0 = time.perf_counter()
        for e in range(k):
            for f in range(int(view.from_index[e]), int(view.to_index[e])):
                frame = {name: (c[f] if c.ndim > 1 else c[f : f + 1]) for name, c in cols.items()}
                frame["task"] = "pick"
                lr.add_frame(frame)
            lr.save_episode()
        lr.finalize()
        res["lerobot_writer_fps"] = stop / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        export_lerobot(
            store,
            tmp / "export-small",
            selection=Selection(episodes=view.episode_ids[:k].tolist()),
            durable=False,
        )
        res["export_fps_same_episodes"] = stop / (time.perf_counter() - t0)

        # -- reading --------------------------------------------------------------------------
        ods = OdsdLeRobotDataset(store, delta_timestamps=dt)
        lds = LeRobotDataset("bench/odsd", root=tmp / "export", delta_timestamps=dt)
        rng = np.random.default_rng(0)
        n = len(ods)
        res["odsd_item_sps"] = rate(lambda: ods[int(rng.integers(n))], 1, args.seconds)
        res["lerobot_item_sps"] = rate(lambda: lds[int(rng.integers(len(lds)))], 1, args.seconds)
        res["odsd_batch_sps"] = rate(lambda: ods.get_batch(rng.integers(0, n, 256)), 256, args.seconds)
        torch.set_num_threads(1)
        dl = lambda d: torch.utils.data.DataLoader(d, batch_size=256, shuffle=True, num_workers=2)  # noqa: E731
        res["odsd_item_dl2_sps"] = loader_rate(dl(ods), 256, args.seconds)
        res["lerobot_item_dl2_sps"] = loader_rate(dl(lds), 256, args.seconds)
        res["odsd_batch_dl2_sps"] = loader_rate(batch_loader(ods, 256, num_workers=2), 256, args.seconds)
        res["ratio_item"] = res["odsd_item_sps"] / res["lerobot_item_sps"]
        res["ratio_batch"] = res["odsd_batch_sps"] / res["lerobot_item_sps"]
        res["ratio_item_dl2"] = res["odsd_item_dl2_sps"] / res["lerobot_item_dl2_sps"]
        res["ratio_batch_dl2"] = res["odsd_batch_dl2_sps"] / res["lerobot_item_dl2_sps"]
        res["ratio_export"] = res["export_fps_same_episodes"] / res["lerobot_writer_fps"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(res, indent=1))
        return
    print(f"data: {res['episodes']} episodes, {res['frames']} frames, 16-step action chunk")
    rows = [
        ("item path, 1 process", "odsd_item_sps", "lerobot_item_sps", "ratio_item"),
        ("batch path (256), 1 process", "odsd_batch_sps", "lerobot_item_sps", "ratio_batch"),
        ("DataLoader 2 workers, items", "odsd_item_dl2_sps", "lerobot_item_dl2_sps", "ratio_item_dl2"),
        ("DataLoader 2 workers, batch path", "odsd_batch_dl2_sps", "lerobot_item_dl2_sps", "ratio_batch_dl2"),
    ]
    print(f"{'samples/s':34s} {'odsd':>12s} {'LeRobotDataset':>15s} {'ratio':>8s}")
    for label, a, b, r in rows:
        print(f"{label:34s} {res[a]:12,.0f} {res[b]:15,.0f} {res[r]:7.1f}x")
    print(
        f"{'export frames/s':34s} {res['export_fps_same_episodes']:12,.0f} {res['lerobot_writer_fps']:15,.0f} "
        f"{res['ratio_export']:7.1f}x   (full store: {res['export_fps']:,.0f} frames/s)"
    )


if __name__ == "__main__":
    main()
