"""Vectorized windows and batches: the high-throughput path of :class:`OdsdLeRobotDataset`.

``dataset.get_batch(indices)`` returns what ``default_collate([dataset[i] for i in indices])``
returns, computed with one gather per feature instead of one item at a time. For a DataLoader,
:func:`batch_loader` feeds whole index batches to the dataset (``batch_size=None``), so each
worker builds full batches vectorized::

    loader = batch_loader(dataset, batch_size=256, shuffle=True, num_workers=2)
    for batch in loader:
        ...
"""

from __future__ import annotations

from collections.abc import Iterator, Sized
from typing import Any

import numpy as np
import torch


def window_positions(
    anchors: np.ndarray, ep_from: np.ndarray, ep_to: np.ndarray, deltas: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """LeRobot's window rule, vectorized: ``(clamped positions [B, T], outside-episode mask [B, T])``.

    Position ``a + d`` outside the anchor's episode ``[from, to)`` is clamped to the first/last
    frame and marked as padding (``LeRobotDataset._get_query_indices``).
    """
    q = anchors[:, None] + deltas[None, :]
    lo = ep_from[:, None]
    hi = ep_to[:, None]
    pad = (q < lo) | (q >= hi)
    return np.minimum(np.maximum(q, lo), hi - 1), pad


class IndexBatchSampler(torch.utils.data.Sampler):
    """Yields numpy arrays of dataset indices, ``batch_size`` at a time (random or in order).

    Seeded per epoch (``set_epoch``) so runs are reproducible; the last short batch is kept
    unless ``drop_last``.
    """

    def __init__(
        self,
        data_source: Sized,
        batch_size: int,
        *,
        shuffle: bool = True,
        drop_last: bool = False,
        seed: int = 0,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.data_source = data_source
        self.batch_size = int(batch_size)
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator[np.ndarray]:
        n = len(self.data_source)
        if self.shuffle:
            order = np.random.default_rng((self.seed, self.epoch)).permutation(n)
        else:
            order = np.arange(n)
        stop = n - n % self.batch_size if self.drop_last else n
        for start in range(0, stop, self.batch_size):
            yield order[start : start + self.batch_size]

    def __len__(self) -> int:
        n = len(self.data_source)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


def _passthrough(batch: Any) -> Any:
    return batch


def batch_loader(
    dataset: Any,
    batch_size: int,
    *,
    shuffle: bool = True,
    drop_last: bool = False,
    num_workers: int = 0,
    seed: int = 0,
    **loader_kwargs: Any,
) -> torch.utils.data.DataLoader:
    """A DataLoader whose workers build whole batches with ``dataset.get_batch``."""
    sampler = IndexBatchSampler(dataset, batch_size, shuffle=shuffle, drop_last=drop_last, seed=seed)
    return torch.utils.data.DataLoader(
        dataset,
        sampler=sampler,
        batch_size=None,
        collate_fn=_passthrough,
        num_workers=num_workers,
        persistent_workers=num_workers > 0 and loader_kwargs.pop("persistent_workers", True),
        **loader_kwargs,
    )
