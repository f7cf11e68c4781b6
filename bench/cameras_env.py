"""Env step rate with rendered cameras (``pick_place_cam``) vs the same physics without (``pick_place``).

::

    python bench/cameras_env.py                          # 64 rows, 96x96, top + wrist, CPU
    python bench/cameras_env.py --rows 256 --image-size 64 --cameras top --device cuda
    python bench/cameras_env.py --threads 1              # torch intra-op threads (default: torch's)
    python bench/cameras_env.py --example-frames docs/img  # the PNGs in docs/envs.md, nothing timed

Both envs are stepped with the same loop (safe-hold actions, finished rows reset as the
collector does) and the same seed, in alternating rounds so that a machine shared with other
work slows both alike; the best round of each is printed as row-steps/s, with their ratio and
the rendering cost per frame. ``bench/cameras.py`` reuses :func:`step_rate` and :func:`compare`.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

from odsd.envs import make_env, safe_hold_action


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def step_rate(
    task: str, *, num_envs: int, steps: int, device: str | torch.device = "cpu", seed: int = 0, **kwargs: Any
) -> float:
    """Row-steps/s of ``task`` over ``steps`` steps (finished rows reset, like the collector).

    >>> step_rate("pick_place_cam", num_envs=64, steps=50, image_size=96)
    """
    env = make_env(task, num_envs=num_envs, device=device, seed=seed, **kwargs)
    dev = env.spec.device
    env.reset(seed=seed)
    hold = safe_hold_action(env)
    for _ in range(3):
        env.step(hold)
    _sync(dev)
    start = time.perf_counter()
    for _ in range(steps):
        _obs, _reward, terminated, truncated, _info = env.step(hold)
        done = terminated | truncated
        if bool(done.any()):
            env.reset(env_ids=torch.nonzero(done).flatten())
    _sync(dev)
    elapsed = time.perf_counter() - start
    env.close()
    return num_envs * steps / elapsed


def compare(
    *,
    num_envs: int = 64,
    steps: int = 40,
    rounds: int = 3,
    device: str | torch.device = "cpu",
    cameras: tuple[str, ...] = ("top", "wrist"),
    image_size: int = 96,
    depth: bool = False,
) -> dict[str, Any]:
    """``pick_place_cam`` vs ``pick_place`` row-steps/s, best of ``rounds`` alternating rounds each."""
    cam_kwargs = {"cameras": cameras, "image_size": image_size, "depth": depth}
    with_cameras, without = [], []
    for _ in range(rounds):
        with_cameras.append(
            step_rate("pick_place_cam", num_envs=num_envs, steps=steps, device=device, **cam_kwargs)
        )
        without.append(step_rate("pick_place", num_envs=num_envs, steps=steps, device=device))
    cam, bare = max(with_cameras), max(without)
    frames_per_s = cam * len(cameras)
    return {
        "rows": num_envs,
        "device": str(torch.device(device)),
        "torch_threads": torch.get_num_threads(),
        "cameras": list(cameras),
        "image_size": image_size,
        "depth": depth,
        "pick_place_cam_row_steps_per_s": cam,
        "pick_place_row_steps_per_s": bare,
        "ratio": cam / bare,
        "camera_frames_per_s": frames_per_s,
        "render_us_per_frame": max(1e6 / cam - 1e6 / bare, 0.0) / len(cameras),
        "raw_MB_per_s": cam * sum(image_size * image_size * 3 for _ in cameras) / 1e6,
    }


def save_example_frames(directory: Path, *, seed: int = 0, lift: float = 0.03) -> list[Path]:
    """One frame per camera of row 0 under the planner, on the first step the cube is ``lift`` m up."""
    from odsd.envs.check import write_frame_pngs
    from odsd.experts import make_expert

    env = make_env("pick_place_cam", num_envs=1, seed=seed)
    expert = make_expert("planner", env.spec)
    obs, _ = env.reset(seed=seed)
    rows = torch.arange(1)
    for _ in range(env.spec.max_episode_steps):
        if float(obs["cube_pos"][0, 2]) >= env.spec.params["cube_rest_z"] + lift:
            break
        obs, *_ = env.step(expert.act(obs, env_ids=rows).action)
    return list(write_frame_pngs(obs, env.spec, directory).values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--cameras", nargs="+", default=["top", "wrist"])
    parser.add_argument("--image-size", type=int, default=96)
    parser.add_argument("--depth", action="store_true")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--example-frames", type=Path, help="only write example PNGs (docs/img) there")
    args = parser.parse_args()
    if args.example_frames:
        for path in save_example_frames(args.example_frames):
            print(path)
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    result = compare(
        num_envs=args.rows,
        steps=args.steps,
        rounds=args.rounds,
        device=args.device,
        cameras=tuple(args.cameras),
        image_size=args.image_size,
        depth=args.depth,
    )
    if args.json:
        print(json.dumps(result))
        return
    size = f"{args.image_size}x{args.image_size}"
    print(
        f"{result['rows']} rows on {result['device']} ({result['torch_threads']} torch threads), "
        f"cameras {'+'.join(result['cameras'])} at {size}{' + depth' if args.depth else ''}"
    )
    print(f"  pick_place_cam: {result['pick_place_cam_row_steps_per_s']:10,.0f} row-steps/s")
    print(f"  pick_place:     {result['pick_place_row_steps_per_s']:10,.0f} row-steps/s")
    print(
        f"  ratio {result['ratio']:.3f}; {result['camera_frames_per_s']:,.0f} frames/s "
        f"({result['raw_MB_per_s']:.1f} MB/s raw RGB); rendering ≈ {result['render_us_per_frame']:.0f} µs/frame"
    )


if __name__ == "__main__":
    main()
