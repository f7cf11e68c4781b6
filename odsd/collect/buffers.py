"""Preallocated per-row episode buffers on the env device."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from odsd.envs.spec import torch_dtype
from odsd.errors import ConfigError


def frame_nbytes(features: Mapping[str, Mapping[str, Any]]) -> int:
    """Bytes one frame of ``features`` takes in the buffers."""
    return sum(
        math.prod(int(d) for d in feat["shape"]) * torch_dtype(feat["dtype"]).itemsize
        for feat in features.values()
    )


def spare_slots_within(num_envs: int, slot_nbytes: int, budget: int) -> int:
    """Spare episode slots (at most ``num_envs``) so that all slots fit in ``budget`` bytes.

    Each row needs a slot for its episode in progress and at least one spare slot must exist;
    a budget below that is a :class:`ConfigError` naming the size that is needed.
    """
    fit = budget // max(slot_nbytes, 1) - num_envs
    if fit < 1:
        need = (num_envs + 1) * slot_nbytes
        raise ConfigError(
            f"episode buffers need {need / 2**20:.0f} MiB ({num_envs} rows + 1 spare episode of "
            f"{slot_nbytes / 2**20:.1f} MiB each) but episode_buffer_bytes is {budget / 2**20:.0f} MiB: "
            "lower num_envs or the image size, or raise episode_buffer_bytes"
        )
    return min(num_envs, fit)


@dataclass(frozen=True)
class _Column:
    group: torch.dtype
    start: int
    stop: int
    shape: tuple[int, ...]


class EpisodeBuffers:
    """Per-row episode storage in *slots*: ``[slots, max_steps, width]`` tensors, one per dtype.

    Fields of the same dtype are packed side by side, so recording a step is one write per dtype
    (not per field). Every row writes into its own slot at its own step index, so rows finish and
    restart independently. A finishing row is *retired*: it moves to a free slot and its finished
    episode stays in the old slot until it is taken, so finished episodes can be copied to the
    host in batches (one copy per dtype for all of them) instead of on every step::

        old = buffers.retire(rows)              # rows restart in fresh slots
        frames, offsets = buffers.take_concat(old, lengths)
        buffers.release(old)                    # the old slots may be reused
    """

    def __init__(
        self,
        features: Mapping[str, Mapping[str, Any]],
        num_envs: int,
        max_steps: int,
        device: torch.device,
        *,
        spare_slots: int | None = None,
    ) -> None:
        self.num_envs = num_envs
        self.max_steps = max_steps
        self.device = device
        self.num_slots = num_envs + (num_envs if spare_slots is None else spare_slots)
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
        self.nbytes = self.num_slots * max_steps * sum(w * d.itemsize for d, w in widths.items())
        """Bytes all slots take on ``device``: ``slots × max_steps × bytes per frame``."""
        self.data: dict[torch.dtype, torch.Tensor] = {
            dtype: torch.zeros((self.num_slots, max_steps, width), dtype=dtype, device=device)
            for dtype, width in widths.items()
        }
        # On CPU, numpy's fancy assignment copies a row's frame with one memcpy; torch's index_put
        # goes element by element (15-30x slower for camera frames, bench/collect.py --profile).
        self._host: dict[torch.dtype, np.ndarray] = {}
        if self.device.type == "cpu":
            for dtype, buf in self.data.items():
                with contextlib.suppress(TypeError):  # no numpy dtype (bfloat16): torch writes it
                    self._host[dtype] = buf.numpy()
        self.slot_of_row = torch.arange(num_envs, device=device)
        self._free: list[int] = list(range(num_envs, self.num_slots))

    @property
    def free_slots(self) -> int:
        return len(self._free)

    def retire(self, rows: torch.Tensor) -> torch.Tensor:
        """Move ``rows`` to free slots; returns the slots holding their finished episodes."""
        k = int(rows.numel())
        if k > len(self._free):
            raise RuntimeError(f"{k} rows finish but only {len(self._free)} episode slots are free")
        old = self.slot_of_row[rows].clone()
        fresh, self._free = self._free[:k], self._free[k:]
        self.slot_of_row[rows] = torch.tensor(fresh, dtype=torch.long, device=self.device)
        return old

    def release(self, slots: torch.Tensor | list[int]) -> None:
        """Return slots whose episodes were taken (or dropped) to the free list."""
        self._free.extend(slots.tolist() if isinstance(slots, torch.Tensor) else slots)

    def record(self, values: Mapping[str, torch.Tensor], step: torch.Tensor) -> None:
        """Write frame ``step[i]`` of every row ``i`` (into its slot); ``values`` must cover every field."""
        if int(step.max()) >= self.max_steps:
            raise RuntimeError(
                f"episode longer than the buffer ({self.max_steps} steps); the env did not truncate"
            )
        n = self.num_envs
        host_index = (self.slot_of_row.numpy(), step.numpy()) if self._host else None
        for dtype, names in self._group_fields.items():
            parts = [values[name].reshape(n, -1) for name in names]
            packed = torch.cat([p if p.dtype == dtype else p.to(dtype) for p in parts], dim=1)
            host = self._host.get(dtype)
            if host is not None and host_index is not None:
                host[host_index] = packed.detach().numpy()
            else:
                self.data[dtype][self.slot_of_row, step] = packed

    def take_concat(
        self, slots: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """The first ``lengths[j]`` frames of each slot ``slots[j]``, concatenated per field in order.

        One device→host copy per dtype for all given slots; returns the frames (views into
        those copies) and the start offset of each episode (plus the total at the end).
        """
        if self.device.type == "cpu":  # one copy: each episode's frames straight out of its slot
            spans = list(zip(slots.tolist(), lengths.tolist(), strict=True))
            host = {
                dtype: torch.cat([buf[s, :n] for s, n in spans]).numpy() for dtype, buf in self.data.items()
            }
            total = sum(n for _, n in spans)
        else:  # one gather on the device, one copy to the host
            longest = int(lengths.max())
            mask = torch.arange(longest, device=self.device)[None, :] < lengths[:, None]
            host = {dtype: buf[slots, :longest][mask].cpu().numpy() for dtype, buf in self.data.items()}
            total = int(mask.sum())
        frames = {
            name: host[col.group][:, col.start : col.stop].reshape(total, *col.shape)
            for name, col in self.columns.items()
        }
        offsets = np.zeros(len(slots) + 1, dtype=np.int64)
        np.cumsum(lengths.cpu().numpy(), out=offsets[1:])
        return frames, offsets

    def field(self, name: str) -> torch.Tensor:
        """The ``[num_envs, max_steps, *shape]`` episodes in progress of one field (a copy)."""
        col = self.columns[name]
        return self.data[col.group][self.slot_of_row, :, col.start : col.stop].reshape(
            self.num_envs, self.max_steps, *col.shape
        )
