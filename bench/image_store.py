"""Image storage of the episode store: bytes per frame per codec, and commit throughput vs the disk.

::

    python bench/image_store.py                      # 96x96 RGB, 3 commits of 16 episodes x 200 frames
    python bench/image_store.py --size 224 --commits 2
    python bench/image_store.py --frames pick_place_cam   # frames rendered by the built-in camera task

Side by side in one run, printing ratios:

1. **bytes per frame** of every codec odsd knows (lossless and lossy at their stated quality) vs
   the raw frame, with encode and decode MB/s of raw frames on one thread and on all cores;
2. **commit throughput**: MB/s of raw frames committed through ``EpisodeStore.writer().commit``
   (durability ``fsync``, the default lossless codec, frames encoded on all cores) vs a plain
   sequential ``write`` + ``fsync`` of the same raw bytes to a file on the same disk.

``bench/cameras.py`` imports :func:`codec_table` and :func:`commit_throughput`. Results go to
``bench/out/image_store-<time>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from odsd.schema import EpisodeMeta, ImageEncoding  # noqa: E402
from odsd.store import Episode, EpisodeStore  # noqa: E402
from odsd.store.frame_codecs import CODECS, DEFAULT_IMAGE_ENCODING, decode_frame, encode_frame  # noqa: E402
from odsd.store.image_arrays import parallel_map, threads  # noqa: E402
from odsd.testing.frames import rendered_frames  # noqa: E402

CAMERA = "observation.images.top"


def encodings() -> list[ImageEncoding]:
    """Every codec at its stated default quality (lossless ones take none)."""
    return [ImageEncoding(codec=name, quality=info.default_quality) for name, info in CODECS.items()]


def label(encoding: ImageEncoding) -> str:
    return encoding.codec + (f":{encoding.quality}" if encoding.quality is not None else "")


def codec_table(frames: np.ndarray, codecs: list[ImageEncoding] | None = None) -> list[dict[str, Any]]:
    """Per codec: bytes per frame, ratio to raw, mean abs error, encode/decode MB/s (1 thread, all cores)."""
    raw = frames[0].nbytes
    rows = []
    for enc in codecs or encodings():
        t0 = time.perf_counter()
        data = [encode_frame(f, enc) for f in frames]
        t1 = time.perf_counter()
        parallel_map(lambda f, enc=enc: encode_frame(f, enc), list(frames))
        t2 = time.perf_counter()
        decoded = np.stack([decode_frame(d, enc, frames.shape[1:], frames.dtype) for d in data])
        t3 = time.perf_counter()
        per = float(np.mean([len(d) for d in data]))
        rows.append(
            {
                "codec": label(enc),
                "lossy": CODECS[enc.codec].lossy,
                "bytes_per_frame": per,
                "raw_bytes_per_frame": raw,
                "ratio": raw / per,
                "mean_abs_error": float(np.abs(decoded.astype(np.int16) - frames).mean()),
                "encode_MBps": frames.nbytes / (t1 - t0) / 1e6,
                "encode_MBps_all_cores": frames.nbytes / (t2 - t1) / 1e6,
                "decode_MBps": frames.nbytes / (t3 - t2) / 1e6,
            }
        )
    return rows


def _episodes(frames: np.ndarray, per_commit: int, length: int) -> list[Episode]:
    out = []
    for i in range(per_commit):
        lo = (i * length) % max(1, len(frames) - length + 1)
        top = frames[lo : lo + length]
        state = np.zeros((length, 4), np.float32)
        out.append(Episode(frames={CAMERA: top, "observation.state": state}, meta=EpisodeMeta(length=length)))
    return out


def commit_throughput(
    directory: Path,
    frames: np.ndarray,
    *,
    commits: int = 3,
    episodes_per_commit: int = 16,
    length: int = 200,
    encoding: ImageEncoding = DEFAULT_IMAGE_ENCODING,
) -> dict[str, Any]:
    """Raw-frame MB/s through the store's writer (fsync) vs plain write+fsync of the same bytes."""
    store_dir = directory / "store"
    features = {
        CAMERA: {
            "dtype": "uint8",
            "shape": list(frames.shape[1:]),
            "kind": "image",
            "encoding": encoding.model_dump(),
        },
        "observation.state": {"dtype": "float32", "shape": [4]},
    }
    store = EpisodeStore.create(store_dir, features=features, fps=20, durability="fsync")
    writer = store.writer(writer_id="bench")
    writer.commit(_episodes(frames, 1, min(length, len(frames))))  # warm-up: metadata templates, zarr import
    batches = [_episodes(frames, episodes_per_commit, length) for _ in range(commits)]
    raw_bytes = sum(e.frames[CAMERA].nbytes for batch in batches for e in batch)
    t0 = time.perf_counter()
    for batch in batches:
        writer.commit(batch)
    store_s = time.perf_counter() - t0
    disk_bytes = sum(info.nbytes for info in list(store.refresh().segments.values())[1:])

    plain = directory / "plain.bin"
    t0 = time.perf_counter()
    for batch in batches:
        fd = os.open(plain, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            for e in batch:
                os.write(fd, memoryview(np.ascontiguousarray(e.frames[CAMERA])).cast("B"))
            os.fsync(fd)
        finally:
            os.close(fd)
    plain_s = time.perf_counter() - t0
    return {
        "codec": label(encoding),
        "frames": commits * episodes_per_commit * length,
        "raw_MB": raw_bytes / 1e6,
        "disk_MB": disk_bytes / 1e6,
        "store_raw_MBps": raw_bytes / store_s / 1e6,
        "plain_write_fsync_MBps": raw_bytes / plain_s / 1e6,
        "ratio_store_vs_plain": (raw_bytes / store_s) / (raw_bytes / plain_s),
        "threads": threads(),
    }


def _load_frames(kind: str, n: int, size: int) -> np.ndarray:
    if kind == "synthetic":
        return rendered_frames(n, size, size, seed=0)
    import torch

    from odsd.envs.registry import make_env

    env = make_env(kind, num_envs=8, device="cpu", seed=0, image_size=size)
    env.reset(torch.arange(8), seed=0)
    key = env.spec.cameras[0].key
    low, high = torch.tensor(env.spec.action.low), torch.tensor(env.spec.action.high)
    out = []
    while sum(len(o) for o in out) < n:
        action = torch.rand(8, env.spec.action.dim) * (high - low) + low
        obs = env.step(action)[0]
        out.append(obs[key].cpu().numpy())
    return np.concatenate(out)[:n]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--frames", default="synthetic", help="'synthetic' or a camera task name")
    parser.add_argument("--size", type=int, default=96)
    parser.add_argument("--codec-frames", type=int, default=200)
    parser.add_argument("--commits", type=int, default=3)
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--length", type=int, default=200)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()

    frames = _load_frames(args.frames, max(args.codec_frames, args.length), args.size)
    print(f"frames: {args.frames} {frames.shape[1:]} uint8, {frames[0].nbytes} B raw; {threads()} threads")
    rows = codec_table(frames[: args.codec_frames])
    print(
        f"{'codec':14s} {'B/frame':>9s} {'vs raw':>7s} {'MAE':>5s} {'enc MB/s':>9s} {'enc all':>8s} {'dec MB/s':>9s}"
    )
    for r in rows:
        print(
            f"{r['codec']:14s} {r['bytes_per_frame']:9.0f} {r['ratio']:6.1f}x {r['mean_abs_error']:5.2f} "
            f"{r['encode_MBps']:9.0f} {r['encode_MBps_all_cores']:8.0f} {r['decode_MBps']:9.0f}"
        )
    base = Path(tempfile.mkdtemp(prefix="odsd-image-bench-", dir=args.dir))
    try:
        commit = commit_throughput(
            base, frames, commits=args.commits, episodes_per_commit=args.episodes, length=args.length
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(
        f"commit ({commit['codec']}, fsync): {commit['store_raw_MBps']:.0f} MB/s of raw frames vs plain "
        f"write+fsync {commit['plain_write_fsync_MBps']:.0f} MB/s = {commit['ratio_store_vs_plain']:.2f}x "
        f"({commit['raw_MB']:.0f} MB raw -> {commit['disk_MB']:.1f} MB on disk)"
    )
    out = ROOT / "bench" / "out"
    out.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    result = {"frames": args.frames, "shape": list(frames.shape[1:]), "codecs": rows, "commit": commit}
    (out / f"image_store-{stamp}.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
