"""Synthetic camera frames that compress like rendered ones: flat shaded regions, edges, a little noise.

>>> frames = rendered_frames(100, 96, 96, seed=0)  # uint8 [100, 96, 96, 3]
>>> depth = rendered_depth(100, 96, 96, seed=0)  # uint16 [100, 96, 96, 1], millimetres

A table with a vertical shading gradient, a goal disc, a cube and a gripper bar that move a few
pixels per frame, and ±``noise`` of per-pixel sensor noise: what a small torch rasterizer of
``pick_place`` produces, so codec figures measured on these frames carry over.
"""

from __future__ import annotations

import numpy as np


def rendered_frames(
    n: int, height: int = 96, width: int = 96, channels: int = 3, *, seed: int = 0, noise: int = 2
) -> np.ndarray:
    """``[n, height, width, channels]`` uint8 frames of a moving cube, gripper and goal on a table."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    table = np.stack(
        [120 + 40 * yy / height, 100 + 30 * yy / height, 80 + 20 * yy / height][:channels]
        + [np.full_like(yy, 255)] * max(0, channels - 3),
        axis=-1,
    )
    colors = rng.integers(30, 255, size=(3, max(channels, 1))).astype(np.float32)
    goal = rng.uniform(0.2, 0.8, size=2) * (height, width)
    cube = rng.uniform(0.2, 0.8, size=2) * (height, width)
    grip = rng.uniform(0.2, 0.8, size=2) * (height, width)
    step = rng.normal(0, 0.8, size=(n, 2, 2))
    out = np.empty((n, height, width, channels), dtype=np.uint8)
    size = max(3.0, height / 10)
    for i in range(n):
        cube = np.clip(cube + step[i, 0], size, (height - size, width - size))
        grip = np.clip(grip + step[i, 1], size, (height - size, width - size))
        img = table.copy()
        disc = (yy - goal[0]) ** 2 + (xx - goal[1]) ** 2 < (size * 1.2) ** 2
        img[disc] = colors[0][:channels]
        box = (np.abs(yy - cube[0]) < size) & (np.abs(xx - cube[1]) < size)
        img[box] = colors[1][:channels] * (0.8 + 0.2 * (yy[box] - cube[0] + size) / (2 * size))[:, None]
        bar = (np.abs(yy - grip[0]) < size / 3) & (np.abs(xx - grip[1]) < size * 1.5)
        img[bar] = colors[2][:channels]
        if noise:
            img += rng.integers(-noise, noise + 1, size=img.shape)
        out[i] = np.clip(img, 0, 255).astype(np.uint8)
    return out


def rendered_depth(n: int, height: int = 96, width: int = 96, *, seed: int = 0) -> np.ndarray:
    """``[n, height, width, 1]`` uint16 depth in millimetres of the same kind of scene."""
    frames = rendered_frames(n, height, width, 1, seed=seed, noise=0).astype(np.uint16)
    return (600 + frames * 4).astype(np.uint16)
