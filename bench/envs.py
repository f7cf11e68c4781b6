"""Env step throughput and expert query latency per row count, side by side.

::

    python bench/envs.py                      # reach + pick_place at 1 / 64 / 1024 rows on CPU
    python bench/envs.py --device cuda --rows 1 64 1024 4096 --fetch

Prints env-steps/s (rows x steps per second) and p50/p95 latency of one batched expert query
(planner and a reference-MLP PolicyExpert) per row count.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from odsd.envs import make_env, safe_hold_action
from odsd.experts import PolicyExpert, make_expert
from odsd.policies import LoadedPolicy, ReferenceMLP, reference_meta


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def bench_task(task: str, rows: int, device: torch.device, steps: int) -> dict[str, float]:
    env = make_env(task, num_envs=rows, device=device, seed=0)
    obs, _ = env.reset(seed=0)
    ids = torch.arange(rows, device=device)
    hold = safe_hold_action(env)
    for _ in range(3):
        env.step(hold)
    _sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        obs, _, terminated, truncated, _ = env.step(hold)
        done = terminated | truncated
        if bool(done.any()):
            obs, _ = env.reset(env_ids=torch.nonzero(done).flatten())
    _sync(device)
    steps_per_s = rows * steps / (time.perf_counter() - start)

    model = ReferenceMLP(env.spec.state_dim, env.spec.action.dim).to(device)
    policy = PolicyExpert(
        LoadedPolicy(model, reference_meta(model, env.spec), Path("bench"), device), env.spec
    )
    out = {"rows": rows, "env_steps_per_s": steps_per_s}
    for name, expert in (("planner", make_expert("planner", env.spec)), ("policy", policy)):
        latencies = []
        for _ in range(max(20, steps // 2)):
            _sync(device)
            t0 = time.perf_counter()
            expert.act(obs, env_ids=ids)
            _sync(device)
            latencies.append((time.perf_counter() - t0) * 1e3)
        out[f"{name}_p50_ms"] = statistics.median(latencies)
        out[f"{name}_p95_ms"] = percentile(latencies, 0.95)
    env.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 64, 1024])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--tasks", nargs="+", default=["reach", "pick_place"])
    parser.add_argument(
        "--fetch", action="store_true", help="also gymnasium:FetchPickAndPlace-v4 (CPU, <=16 rows)"
    )
    args = parser.parse_args()
    device = torch.device(args.device)
    runs = [(t, r) for t in args.tasks for r in args.rows]
    if args.fetch:
        runs += [("gymnasium:FetchPickAndPlace-v4", r) for r in args.rows if r <= 16]
    header = f"{'task':<34}{'rows':>6}{'env steps/s':>14}{'planner p50/p95 ms':>22}{'policy p50/p95 ms':>22}"
    print(f"device={device} torch={torch.__version__} threads={torch.get_num_threads()}")
    print(header)
    print("-" * len(header))
    for task, rows in runs:
        steps = args.steps if not task.startswith("gymnasium:") else 50
        r = bench_task(
            task, rows, device if not task.startswith("gymnasium:") else torch.device("cpu"), steps
        )
        print(
            f"{task:<34}{rows:>6}{r['env_steps_per_s']:>14,.0f}"
            f"{r['planner_p50_ms']:>12.3f} / {r['planner_p95_ms']:<7.3f}"
            f"{r['policy_p50_ms']:>12.3f} / {r['policy_p95_ms']:<7.3f}"
        )


if __name__ == "__main__":
    main()
