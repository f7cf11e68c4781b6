"""What recording simulator state costs: bytes per frame of the ``state.*`` fields.

``odsd store inspect`` shows it::

    cost = state_storage(store)          # StateStorage(fields=9, raw_bytes_per_frame=..., ...)
    state_bytes_per_frame(store)         # on-disk (compressed) bytes per frame, 0.0 without state
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from odsd.replay.defaults import STATE_PREFIX
from odsd.store import EpisodeStore


@dataclass(frozen=True)
class StateStorage:
    """Storage cost of the recorded ``state.*`` fields at one watermark."""

    fields: list[str] = field(default_factory=list)
    frames: int = 0
    raw_bytes_per_frame: int = 0
    """Uncompressed bytes per frame (sum of itemsize × elements over state fields)."""
    disk_bytes: int = 0
    """On-disk bytes of the state arrays in the live segments and shards."""
    total_disk_bytes: int = 0
    """On-disk bytes of every field in the live segments and shards."""

    @property
    def disk_bytes_per_frame(self) -> float:
        return self.disk_bytes / self.frames if self.frames else 0.0

    @property
    def share(self) -> float:
        """Fraction of the store's bytes spent on recorded state."""
        return self.disk_bytes / self.total_disk_bytes if self.total_disk_bytes else 0.0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "disk_bytes_per_frame": self.disk_bytes_per_frame, "share": self.share}


def _tree_bytes(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(dirpath, name)).st_size
    return total


def state_storage(store: EpisodeStore, watermark: int | None = None) -> StateStorage:
    """Raw and on-disk cost of ``state.*`` fields in the view at ``watermark`` (default newest)."""
    names = [k for k in store.features if k.startswith(STATE_PREFIX)]
    snap = store.snapshot(watermark)
    raw = sum(np.dtype(store.features[k].dtype).itemsize * math.prod(store.features[k].shape) for k in names)
    disk = total = 0
    for segment in set(snap.segments):
        root = store.root / segment
        for k in store.features:
            size = _tree_bytes(root / k)
            total += size
            if k in names:
                disk += size
    return StateStorage(
        fields=names,
        frames=snap.num_frames,
        raw_bytes_per_frame=int(raw),
        disk_bytes=disk,
        total_disk_bytes=total,
    )


def state_bytes_per_frame(store: EpisodeStore, watermark: int | None = None) -> float:
    """On-disk bytes per frame spent on recorded state (0.0 when the store records none)."""
    return state_storage(store, watermark).disk_bytes_per_frame
