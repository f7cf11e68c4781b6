"""Per-row counter-based random streams, batched on any device.

Every env row owns a 32-bit key and a draw counter; a draw is a hash of ``(key, counter)``.
Rows therefore never share a stream: resetting or re-seeding row ``i`` cannot change the numbers
row ``j`` sees, and the same seed gives the same numbers on CPU and CUDA::

    rng = RowRandom(num_envs=4, device="cpu", seed=0)
    u = rng.uniform(torch.arange(4), 3)          # [4, 3] in [0, 1)
    rng.seed_rows(torch.tensor([1]), seed=7)     # row 1 now draws like row 1 of seed 7
    state = rng.state()                          # {"rng_key": [4], "rng_counter": [4]} int64
    look = rng.side_uniform(torch.arange(4), 5, stream=1)  # a side stream: the main one is untouched
"""

from __future__ import annotations

import math

import torch

_MASK = 0xFFFFFFFF
# Multipliers stay below 2**31 so a 32-bit value times one never overflows int64.
_M1 = 0x7FEB352D
_M2 = 0x6A09E667
_GOLDEN = 0x1E3779B9


def hash32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer mix (xorshift-multiply) on int64 tensors holding values < 2**32."""
    x = x & _MASK
    x = x ^ (x >> 16)
    x = (x * _M1) & _MASK
    x = x ^ (x >> 15)
    x = (x * _M2) & _MASK
    return x ^ (x >> 16)


def row_keys(seed: int, rows: torch.Tensor) -> torch.Tensor:
    """Stream keys for ``rows`` under ``seed`` (int64, < 2**32)."""
    seed = int(seed)
    lo = hash32(torch.tensor(seed & _MASK, dtype=torch.long, device=rows.device))
    hi = hash32(torch.tensor(((seed >> 32) & _MASK) ^ _GOLDEN, dtype=torch.long, device=rows.device))
    return hash32(lo ^ hash32(hi ^ hash32(rows.to(torch.long) * _GOLDEN)))


class RowRandom:
    """Independent random streams, one per env row (see module docstring)."""

    def __init__(self, num_envs: int, device: torch.device | str, seed: int = 0) -> None:
        self.device = torch.device(device)
        self.key = torch.zeros(num_envs, dtype=torch.long, device=self.device)
        self.counter = torch.zeros(num_envs, dtype=torch.long, device=self.device)
        self.seed_rows(torch.arange(num_envs, device=self.device), seed)

    def seed_rows(self, rows: torch.Tensor, seed: int) -> None:
        """Restart the streams of ``rows`` from ``seed``."""
        self.key[rows] = row_keys(seed, rows)
        self.counter[rows] = 0

    def bits(self, rows: torch.Tensor, k: int) -> torch.Tensor:
        """``[len(rows), k]`` int64 values in ``[0, 2**32)``; advances those rows by ``k`` draws."""
        lanes = torch.arange(k, device=self.device, dtype=torch.long)
        counters = (self.counter[rows].unsqueeze(1) + lanes) & _MASK
        self.counter[rows] += k
        return hash32(self.key[rows].unsqueeze(1) ^ hash32(counters + _GOLDEN))

    def uniform(self, rows: torch.Tensor, k: int) -> torch.Tensor:
        """``[len(rows), k]`` float32 uniform in ``[0, 1)``."""
        return (self.bits(rows, k) >> 8).to(torch.float32) * (1.0 / (1 << 24))

    def normal(self, rows: torch.Tensor, k: int) -> torch.Tensor:
        """``[len(rows), k]`` float32 standard normal (Box-Muller)."""
        bits = self.bits(rows, 2 * k)
        u1 = ((bits[:, :k] >> 8) + 1).to(torch.float32) * (1.0 / (1 << 24))
        u2 = (bits[:, k:] >> 8).to(torch.float32) * (1.0 / (1 << 24))
        return torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * math.pi * u2)

    def side_uniform(self, rows: torch.Tensor, k: int, stream: int) -> torch.Tensor:
        """``[len(rows), k]`` uniform in ``[0, 1)`` from side stream ``stream`` (> 0) of each row.

        The numbers depend on the row's key and its current counter, and the rows do not advance:
        draws for something that must not disturb the main stream (a rendered scene's looks) are
        as deterministic per row seed as the main stream, and the main stream's numbers stay
        what they would be without them.
        """
        salt = hash32(torch.tensor(int(stream) * _GOLDEN, dtype=torch.long, device=self.device))
        lanes = torch.arange(k, device=self.device, dtype=torch.long)
        counters = (self.counter[rows].unsqueeze(1) + lanes) & _MASK
        bits = hash32(hash32(self.key[rows] ^ salt).unsqueeze(1) ^ hash32(counters + _GOLDEN))
        return (bits >> 8).to(torch.float32) * (1.0 / (1 << 24))

    def state(self, rows: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Copy of the stream state of ``rows`` (all when ``None``)."""
        sel = slice(None) if rows is None else rows
        return {"rng_key": self.key[sel].clone(), "rng_counter": self.counter[sel].clone()}

    def load(self, state: dict[str, torch.Tensor], rows: torch.Tensor) -> None:
        """Restore streams of ``rows`` from :meth:`state` output."""
        self.key[rows] = state["rng_key"].to(self.device, torch.long)
        self.counter[rows] = state["rng_counter"].to(self.device, torch.long)
