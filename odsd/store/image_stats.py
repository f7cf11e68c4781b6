"""Bytes per frame of each camera field of a store: on disk (compressed) and raw, and their ratio.

>>> camera_storage(store)["observation.images.top"]
{'codec': 'qoi', 'quality': None, 'frames': 6400, 'bytes': 3046400, 'bytes_per_frame': 476.0,
 'raw_bytes_per_frame': 27648, 'ratio': 58.1}
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from odsd.store.episode_store import EpisodeStore


def camera_storage(store: EpisodeStore, watermark: int | None = None) -> dict[str, dict[str, Any]]:
    """Per camera field: encoding, frames and bytes of its files in the live segments at ``watermark``.

    Counts whole segments (a segment partly removed by retention still holds all its frames).
    """
    snap = store.snapshot(watermark)
    state = store.state_at(snap.watermark)
    out: dict[str, dict[str, Any]] = {}
    for name, spec in store.features.items():
        if spec.encoding is None:
            continue
        frames = nbytes = 0
        for segment in sorted(set(snap.segments)):
            frames += state.segments[segment].n_frames
            field_dir = store.root / segment / name
            with os.scandir(field_dir) as it:
                nbytes += sum(e.stat(follow_symlinks=False).st_size for e in it if e.name != "zarr.json")
        raw = math.prod(spec.shape) * np.dtype(spec.dtype).itemsize
        per = nbytes / frames if frames else 0.0
        out[name] = {
            "codec": spec.encoding.codec,
            "quality": spec.encoding.quality,
            "frames": frames,
            "bytes": nbytes,
            "bytes_per_frame": per,
            "raw_bytes_per_frame": raw,
            "ratio": raw / per if per else 0.0,
        }
    return out
