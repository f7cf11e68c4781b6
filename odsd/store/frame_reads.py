"""Frame-level random access to one field of a committed segment, verified.

>>> from odsd.store.frame_reads import read_frames
>>> frames = read_frames(store.root, info, "observation.images.top", store.features[...], np.array([3, 7]))
>>> frames.shape  # (2, H, W, C), uint8

Readers call this per item or per batch: it returns ``[len(frames), *spec.shape]`` in the spec's
dtype and raises :class:`~odsd.store.CorruptStoreError` on damage.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from odsd.schema import FeatureSpec, SegmentInfo
from odsd.store.errors import CorruptStoreError
from odsd.store.layout import checked_layouts, read_verified


def read_frames(
    root: Path, info: SegmentInfo, field: str, spec: FeatureSpec, frames: np.ndarray
) -> np.ndarray:
    """The given frame positions (segment-local) of ``field``, verified against the commit."""
    index = np.asarray(frames, dtype=np.int64).reshape(-1)
    if index.size and (index.min() < 0 or index.max() >= info.n_frames):
        raise IndexError(f"frames {index.min()}..{index.max()} outside the segment's {info.n_frames}")
    layouts = checked_layouts(Path(os.fspath(root)), info, {field: spec}, partial=True)
    values = read_verified(layouts[field], info)
    if values.shape[1:] != tuple(spec.shape):
        raise CorruptStoreError(f"{layouts[field].dir}: frames of shape {values.shape[1:]}, not {spec.shape}")
    return values[index]
