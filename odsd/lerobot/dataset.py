"""``OdsdLeRobotDataset``: a live odsd store, read as a ``LeRobotDataset``.

>>> ds = OdsdLeRobotDataset("data.odsd", delta_timestamps={"action": [i / 20 for i in range(16)]})
>>> item = ds[0]          # same keys, dtypes and shapes as LeRobotDataset items
>>> item["action"].shape, item["action_is_pad"].shape
(torch.Size([16, 4]), torch.Size([16]))
>>> policy = make_policy(cfg, ds_meta=ds.meta)   # LeRobot's own factory
>>> batch = ds.get_batch(np.arange(256))          # vectorized: == default_collate of 256 items
>>> ds.refresh()                                   # follow the store to its newest watermark

Semantics (docs/lerobot.md):

- the dataset pins one snapshot; ``refresh()`` moves to the newest watermark, appending new
  episodes to the loaded columns instead of re-reading the store; statistics stay frozen (their
  ``meta.stats_version`` unchanged) unless ``refresh(recompute_stats=True)``;
- ``len(ds)`` counts *anchors*: frames of the selected episodes whose label is valid and that
  pass the frame-level selection. ``ds[i]`` is the item anchored at frame ``ds.anchors[i]``;
  its ``index`` / ``episode_index`` / ``frame_index`` are LeRobot's, over the selected episodes;
- ``delta_timestamps`` (multiples of ``1/fps``, checked like LeRobot) give windows; positions
  outside the episode are clamped to its first/last frame and flagged in ``<key>_is_pad``; for
  ``action`` a position whose label is invalid is flagged too (its value is zeros), so a loss
  that masks ``action_is_pad`` never sees an invalid label;
- camera keys (``observation.images.<camera>``) are ``float32 [C, H, W]`` in ``[0, 1]`` (``[T, C, H,
  W]`` in a window; a one-element window of a ``video`` feature is ``[C, H, W]``, as LeRobot's
  video decoding squeezes it), or raw ``uint8`` with ``camera_format="uint8"`` (``[C, H, W]``,
  LeRobot 0.6's ``return_uint8``) / ``"uint8_hwc"`` (``[H, W, C]`` as stored). Frames are never
  loaded wholesale: each item or batch reads its frames through the store's ``read_frames``
  (:class:`~odsd.lerobot.frames.CameraFrames`), in the process that asks, so in a DataLoader
  the workers decode; a decode cache of ``decode_cache_bytes`` per process (default 64 MiB)
  keeps recent frames. A frame whose label is invalid is still a camera observation (only
  ``action`` is masked);
- DataLoader workers: under ``fork`` the loaded columns are shared copy-on-write and each worker
  opens its own store handle if it needs one (and starts with an empty decode cache); under
  ``spawn`` only the configuration and frozen statistics are pickled and each worker re-opens
  the store at the pinned watermark.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from odsd.errors import ConfigError
from odsd.lerobot.batch import window_positions
from odsd.lerobot.frames import DEFAULT_CACHE_BYTES, CameraFrames
from odsd.lerobot.meta import EpisodeTable, OdsdDatasetMeta, make_info
from odsd.lerobot.selection import Selection
from odsd.lerobot.stats import (
    DEFAULT_IMAGE_STATS_FRAMES,
    compute_stats,
    image_stats,
    sample_frames,
    stats_version,
)
from odsd.lerobot.view import CameraDtype, View, build_view, item_dtype, label_fields, plan_columns
from odsd.schema import SegmentInfo
from odsd.store import EpisodeStore, Snapshot

CameraFormat = Literal["float32", "uint8", "uint8_hwc"]
CAMERA_FORMATS = ("float32", "uint8", "uint8_hwc")


def camera_tensor(frames: np.ndarray, fmt: CameraFormat) -> torch.Tensor:
    """``[..., H, W, C]`` uint8 frames as items carry them: float32 CHW in [0, 1] like LeRobot
    (``uint8 / 255`` in float32, bit-identical to its decoders), uint8 CHW, or uint8 HWC."""
    t = torch.from_numpy(np.ascontiguousarray(frames))
    if fmt == "uint8_hwc":
        return t
    t = t.movedim(-1, -3).contiguous()
    return t if fmt == "uint8" else t.to(torch.float32) / 255


def segment_infos(snap: Snapshot, segments: Sequence[str]) -> dict[str, SegmentInfo]:
    """The commit records' SegmentInfo of ``segments`` (all visible in ``snap``)."""
    infos = snap._segment_info
    return {path: infos[path] for path in segments}


def check_delta_timestamps(
    delta_timestamps: Mapping[str, Sequence[float]], fps: float, tolerance_s: float
) -> dict[str, list[int]]:
    """LeRobot's ``check_delta_timestamps`` + ``get_delta_indices``: seconds → frame offsets."""
    bad = {
        key: [ts for ts in deltas if abs(ts * fps - round(ts * fps)) / fps > tolerance_s]
        for key, deltas in delta_timestamps.items()
    }
    bad = {k: v for k, v in bad.items() if v}
    if bad:
        raise ConfigError(
            f"delta_timestamps must be multiples of 1/{fps:g} s (+/- {tolerance_s:g} s); outside: {bad}"
        )
    out = {key: [round(d * fps) for d in deltas] for key, deltas in delta_timestamps.items()}
    empty = [k for k, v in out.items() if not v]
    if empty:
        raise ConfigError(f"delta_timestamps for {empty} are empty")
    return out


def segment_text(name: str, start: int, end: int, success: bool | None) -> str:
    """One ``odsd/segments`` entry: ``name:start:end:success`` (success 1, 0 or empty when unknown)."""
    return f"{name}:{start}:{end}:{'' if success is None else int(success)}"


def episode_table(view: View) -> EpisodeTable:
    entries = view.entries
    return EpisodeTable(
        {
            "episode_index": list(range(len(entries))),
            "tasks": [[view.tasks[t]] for t in view.task_of_episode.tolist()],
            "length": view.lengths.tolist(),
            "dataset_from_index": view.from_index.tolist(),
            "dataset_to_index": view.to_index.tolist(),
            "odsd/episode_id": view.episode_ids.tolist(),
            "odsd/iteration": [e.meta.iteration for e in entries],
            "odsd/success": [bool(e.meta.success) for e in entries],
            "odsd/commit_seq": [e.commit_seq for e in entries],
            "odsd/policy_version_first": [
                -1 if e.meta.policy_version_first is None else e.meta.policy_version_first for e in entries
            ],
            "odsd/policy_version_last": [
                -1 if e.meta.policy_version_last is None else e.meta.policy_version_last for e in entries
            ],
            "odsd/segments": [
                [segment_text(r.name, r.start, r.end, r.success) for r in e.meta.segments] for e in entries
            ],
        }
    )


class OdsdLeRobotDataset(torch.utils.data.Dataset):
    """A ``torch`` dataset over a pinned odsd snapshot whose items match ``LeRobotDataset``'s."""

    def __init__(
        self,
        store: str | Path | EpisodeStore,
        *,
        watermark: int | None = None,
        selection: Selection | None = None,
        label: str = "expert",
        delta_timestamps: Mapping[str, Sequence[float]] | None = None,
        tolerance_s: float = 1e-4,
        repo_id: str | None = None,
        stats: Mapping[str, Mapping[str, np.ndarray]] | None = None,
        stats_id: str | None = None,
        cameras: CameraDtype = "video",
        camera_format: CameraFormat = "float32",
        decode_cache_bytes: int = DEFAULT_CACHE_BYTES,
        image_stats_frames: int = DEFAULT_IMAGE_STATS_FRAMES,
        image_transforms: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        """``stats``/``stats_id``: reuse frozen statistics (e.g. a checkpoint's) instead of computing them.

        ``cameras``: the LeRobot dtype ``meta.features`` gives camera keys, ``"video"`` (what
        ``odsd export-lerobot`` writes by default, with its ``info``) or ``"image"`` (an export
        with ``--images``). ``camera_format``: ``"float32"`` (LeRobot's items), ``"uint8"`` (CHW)
        or ``"uint8_hwc"``. ``decode_cache_bytes``: the per-process decode cache bound (0: none).
        ``image_stats_frames``: at most this many frames per camera are read for its statistics.
        ``image_transforms``: applied to every camera tensor of an item, as ``LeRobotDataset``
        does (e.g. ``lerobot``'s ``ImageTransforms``); in :meth:`get_batch` once per item of the
        batch, so random augmentations differ between items as they do through a DataLoader.
        """
        super().__init__()
        if camera_format not in CAMERA_FORMATS:
            raise ConfigError(f"camera_format must be one of {list(CAMERA_FORMATS)}, not {camera_format!r}")
        if decode_cache_bytes < 0 or image_stats_frames < 1:
            raise ConfigError("decode_cache_bytes must be >= 0 and image_stats_frames >= 1")
        self.camera_format = camera_format
        self.decode_cache_bytes = int(decode_cache_bytes)
        self.image_stats_frames = int(image_stats_frames)
        self._store = (
            store if isinstance(store, EpisodeStore) else EpisodeStore.open(store, durability="process")
        )
        self.root = self._store.root
        self.repo_id = repo_id or f"odsd/{self.root.name}"
        self.selection = selection or Selection()
        self.label = label_fields(label)[0]
        self.tolerance_s = tolerance_s
        self.delta_timestamps = (
            {k: list(v) for k, v in delta_timestamps.items()} if delta_timestamps else None
        )
        self.set_image_transforms(image_transforms)
        self.episodes = None  # LeRobot: the subset of episode indices; the view already is the subset
        manifest = self._store.manifest
        self._plan = plan_columns(manifest.features, self.label, cameras=cameras, fps=manifest.fps)
        self._features = {c.name: c.feature() for c in self._plan}
        self.camera_keys = [c.name for c in self._plan if c.is_camera]
        self._video_keys = {c.name for c in self._plan if c.is_camera and c.dtype == "video"}
        self.delta_indices: dict[str, list[int]] | None = None
        if self.delta_timestamps is not None:
            unknown = sorted(set(self.delta_timestamps) - set(self._features))
            if unknown:
                raise ConfigError(f"delta_timestamps keys {unknown} are not features of this dataset")
            self.delta_indices = check_delta_timestamps(self.delta_timestamps, manifest.fps, tolerance_s)
        self._frozen = (
            (dict(stats), stats_id or "external", -1 if watermark is None else watermark) if stats else None
        )
        self._pid = os.getpid()
        self._snap: Snapshot | None = None
        self._view: View | None = None
        self._frames: CameraFrames | None = None
        self._load(self._pin(watermark))

    # -- building -----------------------------------------------------------------------------

    def _pin(self, watermark: int | None) -> Snapshot:
        """A snapshot of the store; with cameras it holds a reader lease, since frames are read
        lazily for as long as the dataset lives and vacuum must not delete them meanwhile."""
        return self._store.snapshot(watermark, lease=bool(self.camera_keys))

    def _window(self) -> tuple[int, int]:
        if not self.delta_indices:
            return (0, 0)
        all_d = [d for ds in self.delta_indices.values() for d in ds]
        return (min(0, *all_d), max(0, *all_d))

    def _load(self, snap: Snapshot, *, previous: View | None = None, recompute_stats: bool = False) -> None:
        entries = self.selection.select_entries(snap.entries)
        view = build_view(snap, self._plan, self.label, entries, previous=previous)
        mask = self.selection.anchor_mask(
            view.entries, view.from_index, view.lengths, view.label_valid, view.segment_id, self._window()
        )
        self._snap = snap
        self._view = view
        self.anchors = np.flatnonzero(mask).astype(np.int64)
        self._frame_ep = view.frame_episode
        self._ep_from = view.from_index
        self._ep_to = view.to_index
        # item-dtype numpy columns: numpy fancy indexing + from_numpy is far faster than torch's
        self._arrays = {
            name: np.ascontiguousarray(col.astype(item_dtype(str(col.dtype)), copy=False))
            for name, col in view.columns.items()
        }
        self._label_valid = view.label_valid
        self._frames = self.camera_frames(view, cache_bytes=self.decode_cache_bytes)
        if self._frozen is None or recompute_stats:
            stats = compute_stats(view.columns, {"action": view.label_valid})
            stats.update(self.camera_stats())
            version = stats_version(
                store_id=self._store.manifest.store_id,
                watermark=snap.watermark,
                selection_key=self.selection.key(),
                label=self.label,
                features=self._features,
                image_frames=self.image_stats_frames if self.camera_keys else None,
            )
            self._frozen = (stats, version, snap.watermark)
        self._build_meta()

    def camera_frames(self, view: View, *, cache_bytes: int = 0) -> CameraFrames:
        """A reader of the camera frames of ``view`` (this dataset's view or one derived from it)."""
        assert self._snap is not None
        return CameraFrames(
            self.root,
            {k: self._store.manifest.features[k] for k in self.camera_keys},
            segment_infos(self._snap, view.segments) if self.camera_keys else {},
            segments=view.segments,
            episode_segment=view.episode_segment,
            episode_row=view.episode_row,
            from_index=view.from_index,
            lengths=view.lengths,
            cache_bytes=cache_bytes,
        )

    def camera_stats(self, view: View | None = None) -> dict[str, dict[str, np.ndarray]]:
        """LeRobot-convention statistics of every camera over a bounded sample of ``view``'s frames."""
        if not self.camera_keys:
            return {}
        view = view or self._view
        assert view is not None
        frames = self._frames if view is self._view and self._frames is not None else self.camera_frames(view)
        pos = sample_frames(view.from_index, view.lengths, self.image_stats_frames)
        out = {}
        for key in self.camera_keys:
            shape = self._store.manifest.features[key].shape
            values = frames.read(key, pos) if len(pos) else np.zeros((0, *shape), dtype=np.uint8)
            out[key] = image_stats(values)
        return out

    def _build_meta(self) -> None:
        view = self._view
        assert view is not None
        manifest = self._store.manifest
        stats, version, stats_wm = self._frozen  # type: ignore[misc]
        info = make_info(
            fps=manifest.fps,
            robot_type=manifest.robot_type,
            features=self._features,
            total_episodes=len(view.entries),
            total_frames=view.num_frames,
            total_tasks=len(view.tasks),
        )
        self.meta = OdsdDatasetMeta(
            repo_id=self.repo_id,
            root=self.root,
            info=info,
            provenance=self.provenance(version=version, stats_watermark=stats_wm, watermark=view.watermark),
            stats=stats,
            task_names=list(view.tasks),
            episodes=episode_table(view),
            watermark=view.watermark,
            stats_version=version,
            stats_watermark=stats_wm,
            label=self.label,
            selection=self.selection.to_dict(),
            store_id=manifest.store_id,
        )

    def provenance(self, *, version: str, stats_watermark: int, watermark: int) -> dict[str, Any]:
        return {
            "store_id": self._store.manifest.store_id,
            "store": str(self.root),
            "watermark": watermark,
            "label": self.label,
            "selection": self.selection.to_dict(),
            "stats_version": version,
            "stats_watermark": stats_watermark,
        }

    # -- LeRobotDataset surface ---------------------------------------------------------------

    @property
    def fps(self) -> int | float:
        return self.meta.fps

    @property
    def features(self) -> dict[str, dict]:
        return self.meta.features

    @property
    def num_frames(self) -> int:
        return self.meta.total_frames

    @property
    def num_episodes(self) -> int:
        return self.meta.total_episodes

    @property
    def watermark(self) -> int:
        return self.meta.watermark

    @property
    def snapshot(self) -> Snapshot:
        self._ensure()
        assert self._snap is not None
        return self._snap

    @property
    def view(self) -> View:
        self._ensure()
        assert self._view is not None
        return self._view

    def __len__(self) -> int:
        return int(self.anchors.shape[0])

    def __getitem__(self, idx: Any) -> dict[str, Any]:
        if isinstance(idx, (int, np.integer)) or (isinstance(idx, torch.Tensor) and idx.ndim == 0):
            return self._item(int(idx))
        return self.get_batch(idx)

    def _item(self, i: int) -> dict[str, Any]:
        self._ensure()
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"index {i} out of range for {n} items")
        p = int(self.anchors[i])
        item: dict[str, Any] = {name: torch.from_numpy(np.array(a[p])) for name, a in self._arrays.items()}
        windows = self.delta_indices or {}
        for key in self.camera_keys:
            if key not in windows:
                item[key] = self._camera(key, np.array(p))
        if self.delta_indices is not None:
            e = int(self._frame_ep[p])
            lo, hi = int(self._ep_from[e]), int(self._ep_to[e])
            pads: dict[str, torch.Tensor] = {}
            values: dict[str, torch.Tensor] = {}
            for key, deltas in self.delta_indices.items():
                q = [p + d for d in deltas]
                qc = [min(max(x, lo), hi - 1) for x in q]
                pad = [x < lo or x >= hi for x in q]
                if key == "action":
                    pad = [a or not self._label_valid[c] for a, c in zip(pad, qc, strict=True)]
                pads[f"{key}_is_pad"] = torch.tensor(pad, dtype=torch.bool)
                if key in self.camera_keys:
                    values[key] = self._camera(key, np.asarray(qc, dtype=np.int64), window=True)
                else:
                    values[key] = torch.from_numpy(self._arrays[key][qc])
            item = {**item, **pads}
            item.update(values)
        if self.image_transforms is not None:
            for key in self.camera_keys:
                item[key] = self.image_transforms(item[key])
        item["task"] = self.meta.task_names[int(item["task_index"])]
        return item

    def set_image_transforms(self, image_transforms: Callable[[torch.Tensor], torch.Tensor] | None) -> None:
        """Replace the transform applied to camera tensors (None: none), like ``LeRobotDataset``'s."""
        if image_transforms is not None and not callable(image_transforms):
            raise TypeError("image_transforms must be callable or None")
        self.image_transforms = image_transforms

    def clear_image_transforms(self) -> None:
        self.image_transforms = None

    def _camera(self, key: str, positions: np.ndarray, *, window: bool = False) -> torch.Tensor:
        """Frames of camera ``key`` at view positions (``[T]`` for a window, ``[B, T]`` in a batch).

        LeRobot decodes a video window and squeezes its first axis, so a one-element window of a
        ``video`` feature has no time axis; an ``image`` window keeps it.
        """
        assert self._frames is not None
        frames = self._frames.read(key, positions)
        if window and key in self._video_keys and positions.shape[-1] == 1:
            frames = frames[..., 0, :, :, :]
        return camera_tensor(frames, self.camera_format)

    def get_batch(self, indices: Sequence[int] | np.ndarray | torch.Tensor) -> dict[str, Any]:
        """``default_collate([self[i] for i in indices])``, vectorized (one gather per feature).

        Camera frames of the whole batch (windows included) are read with one ``read_frames``
        call per camera and segment.
        """
        self._ensure()
        idx = np.asarray(indices.cpu() if isinstance(indices, torch.Tensor) else indices, dtype=np.int64)
        n = len(self)
        if idx.size and (idx.min() < -n or idx.max() >= n):
            raise IndexError(f"indices out of range for {n} items")
        p = self.anchors[idx]
        batch: dict[str, Any] = {name: torch.from_numpy(a[p]) for name, a in self._arrays.items()}
        windows = self.delta_indices or {}
        for key in self.camera_keys:
            if key not in windows:
                batch[key] = self._camera(key, p)
        if self.delta_indices is not None:
            e = self._frame_ep[p]
            lo, hi = self._ep_from[e], self._ep_to[e]
            pads: dict[str, torch.Tensor] = {}
            values: dict[str, torch.Tensor] = {}
            for key, deltas in self.delta_indices.items():
                qc, pad = window_positions(p, lo, hi, np.asarray(deltas, dtype=np.int64))
                if key == "action":
                    pad |= ~self._label_valid[qc]
                pads[f"{key}_is_pad"] = torch.from_numpy(pad)
                if key in self.camera_keys:
                    values[key] = self._camera(key, qc, window=True)
                else:
                    values[key] = torch.from_numpy(self._arrays[key][qc])
            batch = {**batch, **pads}
            batch.update(values)
        if self.image_transforms is not None:
            for key in self.camera_keys:
                batch[key] = torch.stack([self.image_transforms(frames) for frames in batch[key]])
        names = self.meta.task_names
        batch["task"] = [names[t] for t in batch["task_index"].tolist()]
        return batch

    # -- lifecycle ----------------------------------------------------------------------------

    def refresh(self, *, recompute_stats: bool = False) -> int:
        """Move to the newest watermark; returns how many frames the view gained (may be negative).

        Loaded segment data is reused and new episodes are appended to the loaded columns when
        the selection only grew; statistics stay frozen unless ``recompute_stats``.
        """
        self._ensure()
        assert self._snap is not None and self._view is not None
        before = self._view.num_frames
        old, snap = self._snap, self._snap.refresh()
        if snap.watermark != old.watermark or recompute_stats:
            self._load(snap, previous=self._view, recompute_stats=recompute_stats)
            old.close()  # its lease (if any): the new snapshot holds one of its own
        else:
            snap.close()
        return self._view.num_frames - before

    def _ensure(self) -> None:
        if self._pid != os.getpid():  # a forked worker: own store handle, inherited (read-only) columns
            self._pid = os.getpid()
            if self._frames is not None:
                self._frames.cache.clear()  # decoded frames are never inherited
            self._store = EpisodeStore.open(self.root, durability="process")
            if self._snap is not None:
                self._snap = self._pin(self._snap.watermark)
        elif self._snap is not None:
            self._snap.keep_alive()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_pinned"] = self.meta.watermark
        for key in (
            "_store",
            "_snap",
            "_view",
            "anchors",
            "_frame_ep",
            "_ep_from",
            "_ep_to",
            "_arrays",
            "_label_valid",
            "_frames",
        ):
            state[key] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._pid = os.getpid()
        self._store = EpisodeStore.open(self.root, durability="process")
        self._load(self._pin(self._pinned))

    def __repr__(self) -> str:
        return (
            f"OdsdLeRobotDataset(store={str(self.root)!r}, watermark={self.watermark}, label={self.label!r}, "
            f"episodes={self.num_episodes}, frames={self.num_frames}, items={len(self)})"
        )
