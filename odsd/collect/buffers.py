"""Preallocated per-row episode buffers on the env device."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from odsd.envs.spec import torch_dtype


@dataclass(frozen=True)
class _Column:
    group: torch.dtype
    start: int
    stop: int
    shape: tuple[int, ...]


class EpisodeBuffers:
    """Per-row episode storage: ``[num_envs, max_steps, width]`` tensors, one per dtype.

    Fields of the same dtype are packed side by side, so recording a step is one write per dtype
    (not per field). Every row writes at its own step index, so rows finish and restart
    independently; all rows finishing in one step are copied to the host together, one copy
    per dtype.
    """

    def __init__(
        self, features: Mapping[str, Mapping[str, Any]], num_envs: int, max_steps: int, device: torch.device
    ) -> None:
        self.num_envs = num_envs
        self.max_steps = max_steps
        self.device = device
        self.columns: dict[str, _Column] = {}
        widths: dict[torch.dtype, int] = {}
        self._group_fields: dict[torch.dtype, list[str]] = {}
        for name, feat in features.items():
            dtype = torch_dtype(feat["dtype"])
            shape = tuple(int(d) for d in feat["shape"])
            start = widths.get(dtype, 0)
            widths[dtype] = start + math.prod(shape)
            self.columns[name] = _Column(dtype, start, widths[dtype], shape)
            self._group_fields.setdefault(dtype, []).append(name)
        self.data: dict[torch.dtype, torch.Tensor] = {
            dtype: torch.zeros((num_envs, max_steps, width), dtype=dtype, device=device)
            for dtype, width in widths.items()
        }
        self._rows = torch.arange(num_envs, device=device)

    def record(self, values: Mapping[str, torch.Tensor], step: torch.Tensor) -> None:
        """Write frame ``step[i]`` of every row ``i``; ``values`` must cover every field."""
        if int(step.max()) >= self.max_steps:
            raise RuntimeError(
                f"episode longer than the buffer ({self.max_steps} steps); the env did not truncate"
            )
        n = self.num_envs
        for dtype, names in self._group_fields.items():
            parts = [values[name].reshape(n, -1) for name in names]
            packed = torch.cat([p if p.dtype == dtype else p.to(dtype) for p in parts], dim=1)
            self.data[dtype][self._rows, step] = packed

    def take_concat(
        self, rows: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """The first ``lengths[j]`` frames of each row ``rows[j]``, concatenated per field in row order.

        One device→host copy per dtype for all finishing rows; returns the frames (views into
        those copies) and the start offset of each episode (plus the total at the end).
        """
        longest = int(lengths.max())
        mask = torch.arange(longest, device=self.device)[None, :] < lengths[:, None]
        host = {dtype: buf[rows, :longest][mask].cpu().numpy() for dtype, buf in self.data.items()}
        total = int(mask.sum())
        frames = {
            name: host[col.group][:, col.start : col.stop].reshape(total, *col.shape)
            for name, col in self.columns.items()
        }
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths.cpu().numpy(), out=offsets[1:])
        return frames, offsets

    def take(self, rows: torch.Tensor, lengths: torch.Tensor) -> list[dict[str, np.ndarray]]:
        """Host copies of the first ``lengths[j]`` frames of each row ``rows[j]``, one dict per episode."""
        frames, offsets = self.take_concat(rows, lengths)
        return [
            {name: arr[offsets[j] : offsets[j + 1]] for name, arr in frames.items()} for j in range(len(rows))
        ]

    def field(self, name: str) -> torch.Tensor:
        """The ``[num_envs, max_steps, *shape]`` view of one field (for inspection and tests)."""
        col = self.columns[name]
        return self.data[col.group][:, :, col.start : col.stop].reshape(
            self.num_envs, self.max_steps, *col.shape
        )
