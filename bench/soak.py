"""Long-run soak of ``odsd collect``: RSS of the collector and its writer, and the store's file count.

::

    python bench/soak.py                         # 600 s, pick_place, dagger_sync, 64 rows
    python bench/soak.py --duration 120          # a shorter look while investigating
    python bench/soak.py --set compaction.enabled=false   # the same run with auto-compaction off

Runs the real CLI (``odsd collect --mode dagger_sync --task pick_place --num-envs 64 --duration
D``, the defaults otherwise) into a fresh store, samples every ``--interval`` seconds the resident
set size of the collector and of its writer process (the ``multiprocessing`` spawn child; psutil
when installed, else ``/proc/<pid>/status``) and the number of files and directories under the
store. The RSS slope (MB/min) is a least-squares fit over the samples after ``--warmup`` seconds;
the target for a daemon is <= 1 MB/min for each process. The file count is compared at every sample
with the bound of the auto-compaction settings (:func:`odsd.collect.auto_compact.file_bound`).
Prints a table and the slopes and writes ``bench/out/soak-<time>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

TARGET_MB_PER_MIN = 1.0
ROOT = Path(__file__).resolve().parent.parent

try:  # psutil when the venv has it; /proc otherwise
    import psutil
except ImportError:  # pragma: no cover - depends on the environment
    psutil = None


def rss_mb(pid: int) -> float | None:
    """Resident set size of ``pid`` in MB (None once it is gone)."""
    if psutil is not None:
        try:
            return psutil.Process(pid).memory_info().rss / 1e6
        except psutil.Error:
            return None
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024 / 1e6
    except OSError:
        return None
    return None


def _children(pid: int) -> list[int]:
    if psutil is not None:
        try:
            return [c.pid for c in psutil.Process(pid).children()]
        except psutil.Error:
            return []
    found: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                found.extend(int(p) for p in fh.read().split())
    except OSError:
        pass
    return found


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def writer_pid(collector: int) -> int | None:
    """The collector's writer process: its ``multiprocessing`` spawn child (not the resource tracker)."""
    for child in _children(collector):
        if "spawn_main" in _cmdline(child):
            return child
    return None


def count_entries(root: Path) -> int:
    """Files and directories under ``root`` (the figure the issue counted)."""
    total = 0
    for _dirpath, dirnames, filenames in os.walk(root):
        total += len(dirnames) + len(filenames)
    return total


def log_files(store: Path) -> tuple[int, int]:
    """(commit record files, log archives) under ``_log/`` (log compaction bounds both)."""
    try:
        names = os.listdir(store / "_log")
    except OSError:
        return 0, 0
    records = sum(1 for n in names if n.endswith(".json") and n[:1].isdigit())
    return records, sum(1 for n in names if n.startswith("_archive.") and n.endswith(".jsonl"))


def slope_mb_per_min(samples: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, MB) samples, in MB per minute."""
    if len(samples) < 2:
        return None
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_y = sum(y for _, y in samples) / n
    var = sum((t - mean_t) ** 2 for t, _ in samples)
    if var == 0:
        return None
    cov = sum((t - mean_t) * (y - mean_y) for t, y in samples)
    return cov / var * 60.0


def _bound(store: Path, sets: list[str]) -> tuple[int | None, dict[str, Any]]:
    """The file-count bound of the auto-compaction settings for the store as it is now."""
    from odsd.collect import load_config

    try:
        from odsd.collect.auto_compact import file_bound
    except ImportError:  # a checkout without auto-compaction (the "before" figures)
        return None, {}

    cfg = load_config(None, {"store": store}, sets)
    if not cfg.compaction.enabled:
        return None, cfg.compaction.model_dump()
    return file_bound(store, cfg.compaction), cfg.compaction.model_dump()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=600.0)
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--task", default="pick_place")
    parser.add_argument("--mode", default="dagger_sync")
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--warmup", type=float, default=120.0, help="seconds left out of the slope")
    parser.add_argument("--store", type=Path, default=None, help="default: a fresh temporary store")
    parser.add_argument("--set", dest="sets", action="append", default=[], help="passed to odsd collect")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    parser.add_argument("--keep-store", action="store_true")
    args = parser.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="odsd-soak-"))
    store = args.store or tmp / "store"
    odsd = Path(sys.executable).with_name("odsd")
    cmd = [
        str(odsd) if odsd.exists() else "odsd",
        "collect",
        "--mode",
        args.mode,
        "--task",
        args.task,
        "--num-envs",
        str(args.num_envs),
        "--duration",
        str(args.duration),
        "--store",
        str(store),
        "--json-logs",
        *[f"--set={item}" for item in args.sets],
    ]
    log_path = tmp / "collect.log"
    print("$", " ".join(cmd), flush=True)
    samples: list[dict[str, Any]] = []
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        started = time.monotonic()
        writer: int | None = None
        next_at = started
        while proc.poll() is None:
            now = time.monotonic()
            if now < next_at:
                time.sleep(min(0.2, next_at - now))
                continue
            next_at += args.interval
            writer = writer or writer_pid(proc.pid)
            entries = count_entries(store) if store.exists() else 0
            bound = _bound(store, args.sets)[0] if (store / "odsd.json").exists() else None
            records, archives = log_files(store)
            sample = {
                "t_s": round(now - started, 1),
                "collector_mb": rss_mb(proc.pid),
                "writer_mb": rss_mb(writer) if writer else None,
                "store_entries": entries,
                "entries_bound": bound,
                "log_records": records,
                "log_archives": archives,
            }
            if sample["collector_mb"] is not None:
                samples.append(sample)
        rc = proc.wait()
    tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
    final = next((json.loads(line) for line in reversed(tail) if line.startswith("{")), None)
    bound, settings = _bound(store, args.sets) if (store / "odsd.json").exists() else (None, {})

    print(
        f"\n{'t/s':>6} {'collector MB':>13} {'writer MB':>10} {'store entries':>14} {'bound':>8}"
        f" {'records':>8} {'archives':>8}"
    )
    for s in samples:
        wmb = "-" if s["writer_mb"] is None else f"{s['writer_mb']:.1f}"
        b = "-" if s["entries_bound"] is None else str(s["entries_bound"])
        print(
            f"{s['t_s']:>6.0f} {s['collector_mb']:>13.1f} {wmb:>10} {s['store_entries']:>14} {b:>8}"
            f" {s['log_records']:>8} {s['log_archives']:>8}"
        )
    late = [s for s in samples if s["t_s"] >= args.warmup]
    slopes = {
        name: slope_mb_per_min([(s["t_s"], s[key]) for s in late if s[key] is not None])
        for name, key in (("collector", "collector_mb"), ("writer", "writer_mb"))
    }
    over = [s for s in samples if s["entries_bound"] is not None and s["store_entries"] > s["entries_bound"]]
    final_entries = count_entries(store) if store.exists() else 0
    print(f"\nexit code {rc}; RSS slope after {args.warmup:.0f} s (target <= {TARGET_MB_PER_MIN} MB/min):")
    for name, value in slopes.items():
        text = "n/a" if value is None else f"{value:+.2f} MB/min"
        print(f"  {name:<9} {text}")
    print(f"store entries at the end: {final_entries} (bound {bound}); samples over the bound: {len(over)}")
    if final:
        print(
            f"episodes committed {final.get('episodes_committed')}, frames {final.get('frames_committed')}, "
            f"stop {final.get('stop_reason')}"
        )
    result = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": cmd,
        "exit_code": rc,
        "interval_s": args.interval,
        "warmup_s": args.warmup,
        "slopes_mb_per_min": slopes,
        "target_mb_per_min": TARGET_MB_PER_MIN,
        "final_entries": final_entries,
        "final_bound": bound,
        "samples_over_bound": len(over),
        "compaction": settings,
        "final": final,
        "samples": samples,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"soak-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")
    if not args.keep_store:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
