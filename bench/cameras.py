"""Cameras end to end, side by side in one run, printing ratios (issue targets in brackets).

::

    python bench/cameras.py              # pick_place_cam, 64 rows, two 96x96 cameras
    python bench/cameras.py --quick      # shorter measurements, for a smoke run
    python bench/cameras.py --only collect storage

1. **collect** [>= 0.8x]: ``odsd``'s collector (``dagger_sync``, frames recorded, committed by the
   writer process with the default lossless codec, durability ``process`` and ``fsync``) against
   the bare DAgger loop that renders the same cameras (env step + student + expert + mixing, no
   recording, no commits): ``bench/collect.py``'s two loops on ``pick_place_cam``; each collector
   run against the mean of the bare runs just before and after it (``--rounds``, ``--seconds``).
2. **storage**: bytes per frame of every store codec against the raw frame and against LeRobot's
   own AV1 mp4 (``encode_video_frames`` with its defaults) of the same rendered frames; commit
   throughput of raw frames through the store writer (fsync) against a plain sequential write +
   fsync of the same bytes to the same disk (``bench/image_store.py``).
3. **reader / export** [>= 5x]: ``OdsdLeRobotDataset`` items/s and batch frames/s against
   ``LeRobotDataset`` on the exported video; ``odsd export-lerobot`` frames/s against LeRobot's
   ``add_frame``/``save_episode`` with video encoding on the same episodes
   (``bench/reader_images.py``).

Results go to ``bench/out/cameras-<time>.json``. The machine matters: run it on a quiet one.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("SVT_LOG", "1")

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

TASK = "pick_place_cam"


def rendered(n: int, size: int) -> np.ndarray:
    """``n`` top-camera frames of ``pick_place_cam`` under the planner (what the store really gets)."""
    from odsd.envs import make_env
    from odsd.experts import make_expert

    rows = 8
    env = make_env(TASK, num_envs=rows, device="cpu", seed=0, image_size=size)
    expert = make_expert("planner", env.spec)
    all_rows = torch.arange(rows)
    obs, info = env.reset(seed=0)
    expert.reset(all_rows, obs, info)
    out = []
    while sum(len(o) for o in out) < n:
        out.append(obs[env.spec.cameras[0].key].numpy().copy())
        obs, _, terminated, truncated, _ = env.step(expert.act(obs, env_ids=all_rows).action)
        done = terminated | truncated
        if bool(done.any()):
            ids = done.nonzero().squeeze(1)
            obs, info = env.reset(env_ids=ids)
            expert.reset(ids, obs, info)
    return np.concatenate(out)[:n]


def lerobot_mp4_bytes_per_frame(frames: np.ndarray, tmp: Path, fps: int = 20) -> float:
    """Bytes per frame of LeRobot's own video encoding (its defaults) of ``frames``."""
    from lerobot.datasets.video_utils import encode_video_frames
    from PIL import Image

    images = tmp / "frames"
    images.mkdir(parents=True)
    for i, frame in enumerate(frames):
        Image.fromarray(frame).save(images / f"frame-{i:06d}.png")
    video = tmp / "video.mp4"
    encode_video_frames(images, video, fps)
    return video.stat().st_size / len(frames)


def section_collect(rows: int, seconds: float, rounds: int) -> list[dict[str, Any]]:
    """Rounds of bare loop, collector ``process``, collector ``fsync``, then a closing bare loop.

    Each collector run is compared with the mean of the bare runs just before and just after it
    (this machine's speed drifts by up to 2x within minutes; bracketing cancels most of it).
    """
    from collect import bare_loop, collector_run

    device = torch.device("cpu")
    bares = [bare_loop(TASK, rows, device, seconds)["frames_per_s"]]
    runs = []
    for _ in range(rounds):
        runs.append({d: collector_run(TASK, rows, device, seconds, d) for d in ("process", "fsync")})
        bares.append(bare_loop(TASK, rows, device, seconds)["frames_per_s"])
    out = []
    for r, run in enumerate(runs):
        bare = (bares[r] + bares[r + 1]) / 2
        row: dict[str, Any] = {"round": r, "bare_frames_s": bare, "bare_before_after": bares[r : r + 2]}
        for durability, result in run.items():
            row[f"collector_{durability}_frames_s"] = result["frames_per_s"]
            row[f"collector_{durability}_committed_s"] = result["committed_frames_per_s"]
            row[f"ratio_{durability}"] = result["frames_per_s"] / bare
        out.append(row)
        print(
            f"  round {r}: bare {bares[r]:7.0f} / {bares[r + 1]:7.0f} frames/s | collector process "
            f"{row['collector_process_frames_s']:7.0f} ({row['ratio_process']:.2f}x) fsync "
            f"{row['collector_fsync_frames_s']:7.0f} ({row['ratio_fsync']:.2f}x)"
        )
    return out


def section_storage(tmp: Path, size: int, quick: bool) -> dict[str, Any]:
    from image_store import codec_table, commit_throughput

    frames = rendered(120 if quick else 400, size)
    raw = frames[0].nbytes
    mp4 = lerobot_mp4_bytes_per_frame(frames, tmp / "mp4")
    table = codec_table(frames)
    print(f"  frames: {TASK} top camera {frames.shape[1:]}, {raw} B raw; LeRobot AV1 mp4 {mp4:,.0f} B/frame")
    print(f"  {'codec':14s} {'B/frame':>9s} {'vs raw':>8s} {'vs mp4':>8s} {'MAE':>5s} {'enc MB/s':>9s}")
    for row in table:
        row["vs_lerobot_mp4"] = row["bytes_per_frame"] / mp4
        print(
            f"  {row['codec']:14s} {row['bytes_per_frame']:9,.0f} {row['ratio']:7.1f}x "
            f"{row['vs_lerobot_mp4']:7.2f}x {row['mean_abs_error']:5.2f} {row['encode_MBps']:9.0f}"
        )
    commit = commit_throughput(
        tmp / "commit", frames, commits=2 if quick else 3, episodes_per_commit=16, length=len(frames) // 2
    )
    print(
        f"  commit ({commit['codec']}, fsync): {commit['store_raw_MBps']:.0f} MB/s of raw frames vs plain "
        f"write+fsync {commit['plain_write_fsync_MBps']:.0f} MB/s = {commit['ratio_store_vs_plain']:.2f}x"
    )
    return {"raw_bytes_per_frame": raw, "lerobot_mp4_bytes_per_frame": mp4, "codecs": table, "commit": commit}


def section_reader(tmp: Path, size: int, quick: bool) -> dict[str, Any]:
    from reader_images import build_store, measure_export, measure_reader

    from odsd.lerobot import export_lerobot

    store = build_store(tmp / "store", 8 if quick else 24, size=size, cameras=2)
    export_lerobot(store, tmp / "export", repo_id="bench/odsd", durable=False)
    res: dict[str, Any] = measure_export(store, tmp, episodes=3 if quick else 6)
    res |= measure_reader(store, tmp / "export", seconds=1.5 if quick else 3.0)
    for label, a, b, r in (
        ("reader items/s", "odsd_items_s", "lerobot_items_s", "ratio_items"),
        ("reader batch frames/s", "odsd_batch_frames_s", "lerobot_frames_s", "ratio_batch_frames"),
        ("reader items/s, 2 workers", "odsd_items_dl2_s", "lerobot_items_dl2_s", "ratio_items_dl2"),
        ("export frames/s (video)", "odsd_export_frames_s", "lerobot_writer_frames_s", "ratio_export"),
    ):
        print(f"  {label:28s} odsd {res[a]:9,.0f}  LeRobot {res[b]:9,.0f}  {res[r]:6.1f}x")
    return res


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--size", type=int, default=96)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", nargs="+", choices=["collect", "storage", "reader"], default=None)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--rounds", type=int, default=5, help="collect: rounds (default 5)")
    parser.add_argument("--seconds", type=float, default=12.0, help="collect: seconds per run (default 12)")
    args = parser.parse_args()
    logging.getLogger("odsd").setLevel(logging.ERROR)
    torch.set_num_threads(args.threads)
    sections = args.only or ["collect", "storage", "reader"]
    results: dict[str, Any] = {"rows": args.rows, "size": args.size, "threads": args.threads}
    tmp = Path(tempfile.mkdtemp(prefix="odsd-bench-cameras-"))
    os.environ.setdefault("HF_DATASETS_CACHE", str(tmp / "hf-cache"))
    try:
        if "collect" in sections:
            print(f"1. collect: {TASK}, {args.rows} rows, torch threads {args.threads} [target >= 0.8x]")
            results["collect"] = section_collect(
                args.rows, 8.0 if args.quick else args.seconds, 1 if args.quick else args.rounds
            )
        if "storage" in sections:
            print("2. storage")
            results["storage"] = section_storage(tmp, args.size, args.quick)
        if "reader" in sections:
            print("3. reader and export vs LeRobot [target >= 5x]")
            results["reader"] = section_reader(tmp, args.size, args.quick)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if "collect" in results:
        for key in ("process", "fsync"):
            ratios = sorted(r[f"ratio_{key}"] for r in results["collect"])
            print(f"collector/{key} vs bare, median of {len(ratios)}: {ratios[len(ratios) // 2]:.2f}x")
    out = BENCH / "out"
    out.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    (out / f"cameras-{stamp}.json").write_text(json.dumps(results, indent=1, default=float))


if __name__ == "__main__":
    main()
