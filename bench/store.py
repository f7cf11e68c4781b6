"""Episode-store benchmark: commit throughput/latency against plain zarr appends, random gathers.

    .venv/bin/python bench/store.py            # full run (a few minutes on 2 cores)
    .venv/bin/python bench/store.py --quick    # smoke run (~20 s)

Commit: state-sized episodes (100 frames x 40 float32 values per frame by default, split over
6 fields: observation.state[24], observation.environment_state[6], action.expert[4],
action.behavior[4], reward, action.expert_confidence; ``--schema scalar`` uses 40 scalar
fields instead). Each commit holds ``--episodes-per-commit`` episodes (default 1). Measured side
by side in one run against plain zarr: one growing array per field, ``resize`` + write of the
new rows per episode, with the same codecs (zstd level 1 + crc32c) and one chunk per episode
(the best case for plain appends: no read-modify-write). Both without fsync; our ``fsync``
durability is reported separately.

Gather: a snapshot of N frames (built with batched commits), warmed with ``snap.load()``,
then batches of ``--batch`` random global frame positions, every field per batch; reported
before and after compaction.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.codecs import Crc32cCodec, ZstdCodec
from zarr.storage import LocalStore

from odsd.schema import EpisodeMeta
from odsd.store import Episode, EpisodeStore, compact
from odsd.testing.store import SCALAR_FEATURES, STATE_FEATURES, as_specs, make_frames

SCHEMAS = {"state": STATE_FEATURES, "scalar": SCALAR_FEATURES}


def _episodes(features: dict[str, Any], n: int, length: int, seed: int) -> list[Episode]:
    return [
        Episode(
            frames=make_frames(features, length, seed + i), meta=EpisodeMeta(length=length, seed=seed + i)
        )
        for i in range(n)
    ]


def _timings(latencies: list[float], elapsed: float, frames: int) -> dict[str, Any]:
    return {"latencies": latencies, "elapsed": elapsed, "frames": frames}


def summarize(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Throughput over all rounds together, latency percentiles over all commits."""
    latencies = np.concatenate([r["latencies"] for r in runs]) * 1e3
    elapsed = sum(r["elapsed"] for r in runs)
    return {
        "commits_per_s": len(latencies) / elapsed,
        "frames_per_s": sum(r["frames"] for r in runs) / elapsed,
        "latency_p50_ms": float(np.percentile(latencies, 50)),
        "latency_p95_ms": float(np.percentile(latencies, 95)),
    }


def bench_commit(
    root: Path, features: dict[str, Any], commits: int, per_commit: int, length: int, durability: str
) -> dict[str, float]:
    store = EpisodeStore.create(root, features=features, fps=20, durability=durability)  # type: ignore[arg-type]
    writer = store.writer(run_id="bench")
    batches = [_episodes(features, per_commit, length, seed=i * per_commit) for i in range(min(commits, 16))]
    writer.commit(batches[0])  # warm-up (imports, first zarr calls)
    latencies = []
    start = time.perf_counter()
    for i in range(commits):
        t0 = time.perf_counter()
        writer.commit(batches[i % len(batches)])
        latencies.append(time.perf_counter() - t0)
    return _timings(latencies, time.perf_counter() - start, commits * per_commit * length)


def bench_plain_zarr(
    root: Path, features: dict[str, Any], commits: int, per_commit: int, length: int
) -> dict[str, float]:
    specs = as_specs(features)
    group = zarr.create_group(store=LocalStore(root), zarr_format=3)
    arrays = {
        name: group.create_array(
            name=name,
            shape=(0, *spec.shape),
            dtype=spec.dtype,
            chunks=(length, *spec.shape),
            compressors=[ZstdCodec(level=1), Crc32cCodec()],
            fill_value=0,
        )
        for name, spec in specs.items()
    }
    batches = [_episodes(features, per_commit, length, seed=i * per_commit) for i in range(min(commits, 16))]
    n = 0
    latencies = []
    start = time.perf_counter()
    for i in range(commits):
        t0 = time.perf_counter()
        for ep in batches[i % len(batches)]:
            for name, arr in arrays.items():
                arr.resize((n + length, *arr.shape[1:]))
                arr[n : n + length] = ep.frames[name]
            n += length
        latencies.append(time.perf_counter() - t0)
    return _timings(latencies, time.perf_counter() - start, commits * per_commit * length)


def build_store(
    root: Path, features: dict[str, Any], frames: int, length: int, per_commit: int
) -> EpisodeStore:
    store = EpisodeStore.create(root, features=features, fps=20, durability="process")
    writer = store.writer(run_id="bench")
    batch = _episodes(features, per_commit, length, seed=0)
    for _ in range(max(1, frames // (per_commit * length))):
        writer.commit(batch)
    return store


def bench_gather(store: EpisodeStore, batch: int, seconds: float) -> dict[str, float]:
    t0 = time.perf_counter()
    snap = store.snapshot().load()
    load_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    fields = list(store.features)
    done = 0
    idx_all = rng.integers(0, snap.num_frames, size=(256, batch))
    start = time.perf_counter()
    multi = hasattr(snap, "gather_fields")  # one position -> row mapping per batch for all fields
    while True:
        for idx in idx_all:
            if multi:
                snap.gather_fields(fields, idx)
            else:
                for name in fields:
                    snap.gather(name, idx)
            done += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            break
    return {
        "frames": snap.num_frames,
        "segments": len(snap.segments),
        "load_s": load_s,
        "frames_per_s": done * batch / elapsed,
        "batches_per_s": done / elapsed,
    }


def profile_commit(root: Path, features: dict[str, Any], commits: int, length: int) -> str:
    import cProfile
    import io
    import pstats

    store = EpisodeStore.create(root, features=features, fps=20, durability="process")
    writer = store.writer()
    batch = _episodes(features, 1, length, seed=0)
    writer.commit(batch)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(commits):
        writer.commit(batch)
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(25)
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small smoke run")
    parser.add_argument("--schema", choices=sorted(SCHEMAS), default="state")
    parser.add_argument("--commits", type=int, default=None, help="commits per commit benchmark")
    parser.add_argument("--episodes-per-commit", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5, help="alternating plain/odsd rounds of commits")
    parser.add_argument("--length", type=int, default=100, help="frames per episode")
    parser.add_argument("--gather-frames", type=int, nargs="*", default=None, help="store sizes for gathers")
    parser.add_argument("--batch", type=int, default=256, help="random positions per gather batch")
    parser.add_argument(
        "--build-episodes-per-commit",
        type=int,
        default=10,
        help="episodes per commit when building the gather stores (1 is realistic but slow at 1e6 frames)",
    )
    parser.add_argument("--profile", action="store_true", help="print a cProfile of our commit path")
    parser.add_argument("--json", type=Path, default=None, help="also write results to this file")
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp dir)")
    args = parser.parse_args(argv)
    features = SCHEMAS[args.schema]
    commits = args.commits or (100 if args.quick else 500)
    sizes = args.gather_frames or ([10_000, 100_000] if args.quick else [100_000, 1_000_000])
    seconds = 1.0 if args.quick else 3.0
    work = Path(tempfile.mkdtemp(prefix="odsd-bench-", dir=args.dir))
    per = args.episodes_per_commit
    results: dict[str, Any] = {"schema": args.schema, "length": args.length, "episodes_per_commit": per}
    values = sum(int(np.prod(s.shape)) for s in as_specs(features).values())
    print(
        f"schema {args.schema}: {len(features)} fields, {values} float32 values/frame; "
        f"{args.length} frames/episode, {per} episode(s)/commit, {commits} commits"
    )
    try:
        # Rounds alternate plain zarr and odsd so that load from other processes hits both alike.
        per_round = max(commits // args.rounds, 10)
        plain_runs, ours_runs, fsync_runs, ratios = [], [], [], []
        for r in range(args.rounds):
            plain_runs.append(
                bench_plain_zarr(work / f"plain-{r}.zarr", features, per_round, per, args.length)
            )
            ours_runs.append(
                bench_commit(work / f"ours-process-{r}", features, per_round, per, args.length, "process")
            )
            fsync_runs.append(
                bench_commit(
                    work / f"ours-fsync-{r}", features, max(per_round // 4, 5), per, args.length, "fsync"
                )
            )
            ratios.append(
                (ours_runs[-1]["frames"] / ours_runs[-1]["elapsed"])
                / (plain_runs[-1]["frames"] / plain_runs[-1]["elapsed"])
            )
        plain, ours, ours_fsync = summarize(plain_runs), summarize(ours_runs), summarize(fsync_runs)
        results["commit"] = {"plain_zarr": plain, "odsd_process": ours, "odsd_fsync": ours_fsync}
        print(f"{'':24}{'commits/s':>12}{'frames/s':>12}{'p50 ms':>10}{'p95 ms':>10}")
        for name, r in (
            ("plain zarr append", plain),
            ("odsd commit (process)", ours),
            ("odsd commit (fsync)", ours_fsync),
        ):
            print(
                f"{name:24}{r['commits_per_s']:12.1f}{r['frames_per_s']:12.0f}"
                f"{r['latency_p50_ms']:10.2f}{r['latency_p95_ms']:10.2f}"
            )
        ratio = float(statistics.median(ratios))
        results["commit_ratio_vs_plain_zarr"] = ratio
        results["commit_ratio_per_round"] = ratios
        print(
            f"odsd/plain zarr throughput ratio: {ratio:.2f}x median of {args.rounds} alternating rounds "
            f"({', '.join(f'{x:.2f}' for x in ratios)}); target >= 0.7x"
        )
        results["gather"] = {}
        for n in sizes:
            store = build_store(
                work / f"gather-{n}", features, n, args.length, per_commit=args.build_episodes_per_commit
            )
            before = bench_gather(store, args.batch, seconds)
            t0 = time.perf_counter()
            compact(store)
            compact_s = time.perf_counter() - t0
            after = bench_gather(store, args.batch, seconds)
            results["gather"][str(n)] = {
                "before_compaction": before,
                "after_compaction": after,
                "compact_s": compact_s,
            }
            for label, r in (("before compaction", before), ("after compaction", after)):
                print(
                    f"gather {n:>9} frames, {label:18}: {r['frames_per_s']:12.0f} frames/s "
                    f"({r['segments']} segments, load {r['load_s']:.2f}s)"
                )
            print(f"  compaction of {n} frames took {compact_s:.2f}s")
            shutil.rmtree(work / f"gather-{n}", ignore_errors=True)
        if args.profile:
            print(profile_commit(work / "profile", features, min(commits, 200), args.length))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
