"""Collector throughput against the bare DAgger loop, in the same process and run.

::

    python bench/collect.py                    # pick_place, 64 and 1024 rows, 3 rounds x 5 s
    python bench/collect.py --quick            # smoke run: 16 and 128 rows, 2 s each
    python bench/collect.py --rows 64 --profile   # + cProfile of Collector._step (top costs)
    python bench/collect.py --threads 1       # one intra-op thread (see docs/performance.md)
    python bench/collect.py --device cuda --rows 1024 4096

The *bare loop* is what the collector cannot avoid: flatten the observation, student forward,
expert query + ``validate_query``, per-row beta mixing, env step, partial resets. The
*collector* (``dagger_sync``, beta 0.5, per-frame recording into the episode buffers, finished
episodes copied out and committed by the writer thread to a temp store) runs the same task,
rows, seed and student for the same wall-clock budget, once per durability (``process`` and
``fsync``; ``none`` is a diagnostic variant that records and copies out episodes but commits
nothing). Frames/s = env rows x steps per second (every step records one frame per row);
``committed/s`` counts frames of finished, committed episodes. Target: collector >= 0.8x bare.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import logging
import pstats
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from odsd.collect import BetaMixer, BetaSchedule, CollectConfig, Collector
from odsd.collect.student import initial_student
from odsd.envs import STATE_KEY, make_env
from odsd.experts import make_expert, validate_query

TARGET = 0.8


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bare_loop(task: str, rows: int, device: torch.device, seconds: float, seed: int = 0) -> dict[str, Any]:
    """Env step + student forward + expert query + validate + mixing; no recording, no commits."""
    env = make_env(task, num_envs=rows, device=device, seed=seed)
    spec = env.spec
    expert = make_expert("planner", spec)
    student = initial_student(spec, seed=seed).to(device).eval()
    mixer = BetaMixer(rows, seed=seed + 7919)
    all_rows = torch.arange(rows, device=device)
    low, high = spec.action.low_tensor(device), spec.action.high_tensor(device)
    obs, info = env.reset(seed=seed)
    expert.reset(all_rows, obs, info)

    def step(obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        frozen = {k: v.clone() for k, v in obs.items()}
        state = spec.flatten_observation(frozen)[STATE_KEY]
        with torch.inference_mode():
            s_act = student(state)
        s_ok = torch.isfinite(s_act).all(1) & ((s_act >= low) & (s_act <= high)).all(1)
        query = validate_query(expert.act(frozen, env_ids=all_rows), spec, rows)
        use = mixer.use_expert(0.5, device)
        take_expert = (use & query.valid) | (~use & ~s_ok & query.valid)
        behavior = torch.where(take_expert[:, None], query.action, s_act)
        obs, _, terminated, truncated, _ = env.step(behavior)
        done = terminated | truncated
        if bool(done.any()):
            ids = done.nonzero().squeeze(1)
            obs, info = env.reset(env_ids=ids)
            expert.reset(ids, obs, info)
        return obs

    for _ in range(5):
        obs = step(obs)
    _sync(device)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        obs = step(obs)
        steps += 1
    _sync(device)
    elapsed = time.perf_counter() - start
    return {"steps": steps, "elapsed_s": elapsed, "frames_per_s": rows * steps / elapsed}


def collector_run(
    task: str,
    rows: int,
    device: torch.device,
    seconds: float,
    durability: str,
    *,
    profile: bool = False,
    seed: int = 0,
    commit_max_episodes: int | None = None,
) -> dict[str, Any]:
    """The real collector for ``seconds`` of collection into a temp store."""
    with tempfile.TemporaryDirectory(prefix="odsd-bench-") as tmp:
        cfg = CollectConfig(
            mode="dagger_sync",
            task=task,
            num_envs=rows,
            device=str(device),
            seed=seed,
            store=Path(tmp) / "store",
            durability="process" if durability == "none" else durability,  # type: ignore[arg-type]
            episodes_per_iteration=10**9,
            duration_s=seconds,
            beta=BetaSchedule(kind="constant", init_beta=0.5),
            metrics_interval_s=3600.0,
            commit_max_episodes=commit_max_episodes,
        )
        collector = Collector(cfg, commit_store=durability != "none")
        step_timer = {"t": 0.0, "n": 0, "first": 0.0}
        original = collector._step
        profiler = cProfile.Profile() if profile else None

        def timed_step(obs: dict[str, torch.Tensor], all_rows: torch.Tensor) -> dict[str, torch.Tensor]:
            t0 = time.perf_counter()
            if not step_timer["n"]:
                step_timer["first"] = t0
            if profiler is not None:
                profiler.enable()
            try:
                return original(obs, all_rows)
            finally:
                if profiler is not None:
                    profiler.disable()
                step_timer["t"] += time.perf_counter() - t0
                step_timer["n"] += 1

        collector._step = timed_step  # type: ignore[method-assign]
        summary = collector.run()
        # From the first step to the end of run(): includes recording, copy-out, the writer
        # thread and the final drain; excludes one-time setup (store creation, student v0).
        elapsed = time.perf_counter() - step_timer["first"]
        frames = collector.progress.env_steps
        out: dict[str, Any] = {
            "durability": durability,
            "steps": step_timer["n"],
            "elapsed_s": elapsed,
            "frames_per_s": frames / elapsed,
            "step_only_frames_per_s": frames / step_timer["t"] if step_timer["t"] else 0.0,
            "committed_frames_per_s": summary.frames_committed / elapsed,
            "episodes_committed": summary.episodes_committed,
        }
        if profiler is not None:
            buf = io.StringIO()
            pstats.Stats(profiler, stream=buf).sort_stats("tottime").print_stats(18)
            out["profile"] = buf.getvalue()
        return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--task", default="pick_place")
    parser.add_argument("--rows", type=int, nargs="+", default=None)
    parser.add_argument("--seconds", type=float, default=None, help="wall-clock budget per measurement")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--durability",
        nargs="+",
        default=["none", "process", "fsync"],
        choices=["none", "process", "fsync"],
        help="'none' = collector recording episodes without committing them (diagnostic)",
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 16 and 128 rows, 2 s each")
    parser.add_argument(
        "--profile", action="store_true", help="cProfile Collector._step (process durability)"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument(
        "--commit-max-episodes",
        type=int,
        default=None,
        help="episodes per commit (default: the config's, max(32, rows))",
    )
    parser.add_argument("--repeat", type=int, default=None, help="interleaved rounds; medians are reported")
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    args = parser.parse_args()
    logging.getLogger("odsd").setLevel(logging.ERROR)  # "no student snapshot: starting from v0" per run
    rows_list = args.rows or ([16, 128] if args.quick else [64, 1024])
    seconds = args.seconds or (2.0 if args.quick else 5.0)
    repeat = args.repeat or (1 if args.quick else 3)
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)

    results = []
    print(
        f"task={args.task} device={device} torch_threads={torch.get_num_threads()} "
        f"commit_max_episodes={args.commit_max_episodes} {repeat} interleaved round(s) of {seconds:.0f}s; medians"
    )
    print(f"{'rows':>6} {'loop':>20} {'frames/s':>12} {'vs bare':>8} {'step-only':>10} {'committed/s':>12}")
    for rows in rows_list:
        bares: list[dict[str, Any]] = []
        cols: dict[str, list[dict[str, Any]]] = {d: [] for d in args.durability}
        for _ in range(repeat):  # interleaved so that background load hits every variant alike
            bares.append(bare_loop(args.task, rows, device, seconds))
            for durability in args.durability:
                cols[durability].append(
                    collector_run(
                        args.task,
                        rows,
                        device,
                        seconds,
                        durability,
                        commit_max_episodes=args.commit_max_episodes,
                    )
                )
        bare = {"frames_per_s": statistics.median(b["frames_per_s"] for b in bares), "runs": bares}
        print(f"{rows:>6} {'bare':>20} {bare['frames_per_s']:>12,.0f} {'1.00x':>8}")
        row: dict[str, Any] = {"rows": rows, "bare": bare, "collector": []}
        for durability, runs in cols.items():
            col = {
                "durability": durability,
                **{
                    k: statistics.median(r[k] for r in runs)
                    for k in ("frames_per_s", "step_only_frames_per_s", "committed_frames_per_s")
                },
                "runs": runs,
            }
            col["ratio"] = col["frames_per_s"] / bare["frames_per_s"]
            col["step_only_ratio"] = col["step_only_frames_per_s"] / bare["frames_per_s"]
            flag = "" if col["ratio"] >= TARGET else "  < target"
            print(
                f"{rows:>6} {'collector/' + durability:>20} {col['frames_per_s']:>12,.0f} "
                f"{col['ratio']:>7.2f}x {col['step_only_ratio']:>9.2f}x {col['committed_frames_per_s']:>12,.0f}{flag}"
            )
            row["collector"].append(col)
        if args.profile:
            prof = collector_run(
                args.task,
                rows,
                device,
                seconds,
                "process",
                profile=True,
                commit_max_episodes=args.commit_max_episodes,
            )
            print(f"\ncProfile of Collector._step at {rows} rows (tottime, top 18):\n{prof['profile']}")
        results.append(row)
    if args.json:
        print(json.dumps(results, indent=1, default=float))


if __name__ == "__main__":
    main()
