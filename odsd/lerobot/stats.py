"""Normalization statistics in LeRobot's layout, computed exactly over a pinned snapshot.

Per numeric feature: ``min``, ``max``, ``mean``, ``std`` (population), ``count`` (shape ``(1,)``)
and the quantiles ``q01 q10 q50 q90 q99``; vectors give ``(D,)`` arrays, scalars ``(1,)`` —
the shapes ``lerobot.datasets.compute_stats`` produces. Differences from LeRobot's writer:
quantiles are exact (``numpy.quantile``, linear) rather than read off 5000-bin histograms, and
the training label (``action``) is summarized over frames with a valid label only.

Camera features follow LeRobot's image convention: per channel, shape ``(C, 1, 1)``, in
``[0, 1]`` (uint8 / 255), ``count`` the number of frames; they are computed over a bounded
sample of frames (:func:`sample_frames`: LeRobot's per-episode ``sample_indices``, thinned
evenly to at most ``max_frames`` over the view) from exact per-channel histograms.

Statistics are *frozen*: computed once for a snapshot and identified by a version id (a hash of
the store id, watermark, selection, label and feature schema), which a trainer records so that it
knows exactly which normalization a checkpoint was trained with.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

QUANTILES: dict[str, float] = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
STAT_KEYS = ("min", "max", "mean", "std", "count", *QUANTILES)
STATS_FORMAT = 1


def feature_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """Stats of one feature over axis 0 (``values`` is ``[n, *shape]``; scalars may be ``[n]``)."""
    x = np.asarray(values)
    if x.ndim == 1:
        x = x[:, None]
    # Explicit width: reshape(n, -1) is ambiguous when n == 0 (every frame masked out).
    x = x.reshape(x.shape[0], int(np.prod(x.shape[1:]))).astype(np.float64, copy=False)
    n = x.shape[0]
    if n == 0:
        zeros = np.zeros(x.shape[1])
        out = {"min": zeros, "max": zeros, "mean": zeros, "std": zeros.copy()}
        out |= {q: zeros.copy() for q in QUANTILES}
    else:
        out = {
            "min": x.min(axis=0),
            "max": x.max(axis=0),
            "mean": x.mean(axis=0),
            "std": x.std(axis=0),
        }
        if n < 2:  # LeRobot's rule: too few samples for quantiles -> the mean
            out |= {q: out["mean"].copy() for q in QUANTILES}
        else:
            qs = np.quantile(x, list(QUANTILES.values()), axis=0)
            out |= {key: qs[i] for i, key in enumerate(QUANTILES)}
    out["count"] = np.array([n], dtype=np.int64)
    return {k: out[k] for k in STAT_KEYS}


DEFAULT_IMAGE_STATS_FRAMES = 2000
"""Default bound on the frames read to compute one camera's statistics."""


def estimate_num_samples(
    n: int, min_samples: int = 100, max_samples: int = 10_000, power: float = 0.75
) -> int:
    """LeRobot's ``estimate_num_samples``: how many frames of an ``n``-frame episode it samples."""
    if n < min_samples:
        min_samples = n
    return max(min_samples, min(int(n**power), max_samples))


def episode_sample(length: int) -> np.ndarray:
    """LeRobot's ``sample_indices``: evenly spaced frame offsets of one episode."""
    return np.round(np.linspace(0, length - 1, estimate_num_samples(length))).astype(np.int64)


def sample_frames(from_index: np.ndarray, lengths: np.ndarray, max_frames: int) -> np.ndarray:
    """View frame positions for camera statistics: each episode's LeRobot sample, at most ``max_frames``."""
    parts = [int(a) + episode_sample(int(n)) for a, n in zip(from_index, lengths, strict=True) if n > 0]
    if not parts:
        return np.zeros(0, dtype=np.int64)
    pos = np.concatenate(parts)
    if max_frames > 0 and len(pos) > max_frames:
        pos = pos[np.round(np.linspace(0, len(pos) - 1, max_frames)).astype(np.int64)]
    return pos


def image_stats(frames: np.ndarray, scale: float = 255.0) -> dict[str, np.ndarray]:
    """LeRobot's stats of ``[n, H, W, C]`` integer frames: ``(C, 1, 1)`` per channel, divided by ``scale``.

    Exact: quantiles (linear, like ``numpy.quantile``), mean and std come from per-channel
    histograms of the pixel values.
    """
    x = np.asarray(frames)
    n, channels = x.shape[0], x.shape[-1]
    out: dict[str, list[float]] = {k: [] for k in STAT_KEYS if k != "count"}
    for c in range(channels):
        hist = np.bincount(x[..., c].reshape(-1), minlength=1).astype(np.float64)
        total = hist.sum()
        if total == 0:
            for k in out:
                out[k].append(0.0)
            continue
        values = np.arange(len(hist), dtype=np.float64)
        mean = float(hist @ values / total)
        var = max(float(hist @ (values - mean) ** 2 / total), 0.0)
        nz = np.flatnonzero(hist)
        cum = np.cumsum(hist)
        out["min"].append(float(nz[0]))
        out["max"].append(float(nz[-1]))
        out["mean"].append(mean)
        out["std"].append(var**0.5)
        for key, q in QUANTILES.items():
            pos = q * (total - 1)
            lo = int(np.floor(pos))
            v_lo = float(np.searchsorted(cum, lo, side="right"))
            v_hi = float(np.searchsorted(cum, min(lo + 1, total - 1), side="right"))
            out[key].append(v_lo + (v_hi - v_lo) * (pos - lo))
    stats = {k: (np.array(v) / scale).reshape(channels, 1, 1) for k, v in out.items()}
    stats["count"] = np.array([n], dtype=np.int64)
    return {k: stats[k] for k in STAT_KEYS}


def compute_stats(
    columns: Mapping[str, np.ndarray], masks: Mapping[str, np.ndarray] | None = None
) -> dict[str, dict[str, np.ndarray]]:
    """``{feature: stats}`` for every column; ``masks[name]`` restricts which frames count."""
    masks = masks or {}
    out: dict[str, dict[str, np.ndarray]] = {}
    for name, values in columns.items():
        arr = np.asarray(values)
        if name in masks:
            arr = arr[np.asarray(masks[name], dtype=bool)]
        out[name] = feature_stats(arr)
    return out


def stats_version(
    *,
    store_id: str,
    watermark: int,
    selection_key: str,
    label: str,
    features: Mapping[str, Any],
    image_frames: int | None = None,
) -> str:
    """The version id of statistics computed for exactly this view of a store.

    ``image_frames``: the camera statistics' sample bound (stores with cameras only, so the ids of
    statistics without cameras are unchanged).
    """
    payload: dict[str, Any] = {
        "format": STATS_FORMAT,
        "store_id": store_id,
        "watermark": watermark,
        "selection": selection_key,
        "label": label,
        "features": {k: [v["dtype"], list(v["shape"])] for k, v in sorted(features.items())},
    }
    if image_frames is not None:
        payload["image_frames"] = image_frames
    return "st-" + hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def stats_to_json(stats: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, dict[str, list]]:
    """Plain lists (what ``meta/stats.json`` holds)."""
    return {k: {s: np.asarray(v).tolist() for s, v in d.items()} for k, d in stats.items()}


def stats_from_json(data: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, np.ndarray]]:
    return {k: {s: np.array(v) for s, v in d.items()} for k, d in data.items()}


def episode_stats(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> dict[str, np.ndarray]:
    """Per-episode stats of one column, vectorized over episodes: each stat is ``[E, D]``.

    Used by the export for the ``stats/*`` columns of ``meta/episodes``.
    """
    x = np.asarray(values)
    if x.ndim == 1:
        x = x[:, None]
    # Explicit width: reshape(n, -1) is ambiguous when n == 0 (every frame masked out).
    x = x.reshape(x.shape[0], int(np.prod(x.shape[1:]))).astype(np.float64, copy=False)
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    n_ep, d = len(starts), x.shape[1]
    out: dict[str, np.ndarray] = {}
    if n_ep == 0:
        return {k: np.zeros((0, d)) for k in STAT_KEYS}
    out["min"] = np.minimum.reduceat(x, starts, axis=0)
    out["max"] = np.maximum.reduceat(x, starts, axis=0)
    sums = np.add.reduceat(x, starts, axis=0)
    mean = sums / lengths[:, None]
    sq = np.add.reduceat(x * x, starts, axis=0) / lengths[:, None]
    out["mean"] = mean
    out["std"] = np.sqrt(np.maximum(sq - mean**2, 0.0))
    out["count"] = lengths[:, None].copy()
    # exact per-episode quantiles: sort each column within episodes, then interpolate
    ep = np.repeat(np.arange(n_ep), lengths)
    sorted_x = np.empty_like(x)
    for j in range(d):
        order = np.lexsort((x[:, j], ep))
        sorted_x[:, j] = x[order, j]
    for key, q in QUANTILES.items():
        pos = starts + q * (lengths - 1)
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, starts + lengths - 1)
        frac = (pos - lo)[:, None]
        out[key] = sorted_x[lo] * (1 - frac) + sorted_x[hi] * frac
    single = lengths < 2
    if single.any():
        for key in QUANTILES:
            out[key][single] = mean[single]
    return {k: out[k] for k in STAT_KEYS}
