"""Preallocated per-row episode buffers on the env device."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from odsd.envs.spec import torch_dtype


class EpisodeBuffers:
    """``[num_envs, max_steps, *shape]`` tensors, one per field, written one step at a time.

    Every row writes at its own step index, so rows finish and restart independently; a
    finished row is copied to host once per field (all rows finishing in one step together).
    """

    def __init__(
        self, features: Mapping[str, Mapping[str, Any]], num_envs: int, max_steps: int, device: torch.device
    ) -> None:
        self.num_envs = num_envs
        self.max_steps = max_steps
        self.device = device
        self.data: dict[str, torch.Tensor] = {
            name: torch.zeros(
                (num_envs, max_steps, *feat["shape"]), dtype=torch_dtype(feat["dtype"]), device=device
            )
            for name, feat in features.items()
        }
        self._rows = torch.arange(num_envs, device=device)

    def record(self, values: Mapping[str, torch.Tensor], step: torch.Tensor) -> None:
        """Write frame ``step[i]`` of every row ``i``; ``values`` must cover every field."""
        if int(step.max()) >= self.max_steps:
            raise RuntimeError(
                f"episode longer than the buffer ({self.max_steps} steps); the env did not truncate"
            )
        for name, buf in self.data.items():
            buf[self._rows, step] = values[name].to(buf.dtype)

    def take_concat(
        self, rows: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """The first ``lengths[j]`` frames of each row ``rows[j]``, concatenated per field in row order.

        One device→host copy per field for all finishing rows; returns the frames and the start
        offset of each episode (plus the total at the end).
        """
        longest = int(lengths.max())
        mask = torch.arange(longest, device=self.device)[None, :] < lengths[:, None]
        frames = {name: buf[rows, :longest][mask].cpu().numpy() for name, buf in self.data.items()}
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths.cpu().numpy(), out=offsets[1:])
        return frames, offsets

    def take(self, rows: torch.Tensor, lengths: torch.Tensor) -> list[dict[str, np.ndarray]]:
        """Host copies of the first ``lengths[j]`` frames of each row ``rows[j]``, one dict per episode."""
        frames, offsets = self.take_concat(rows, lengths)
        return [
            {name: arr[offsets[j] : offsets[j + 1]] for name, arr in frames.items()} for j in range(len(rows))
        ]
