"""The LeRobot-shaped view of a snapshot: which columns exist, and their values for the selected frames.

One *plan* (:func:`plan_columns`) maps the store's feature schema to LeRobot features; the reader
and the export both build their columns from it, so an export holds exactly what the reader
serves:

- ``observation.*`` fields keep their names; state-only data without an
  ``observation.environment_state`` gets one (a copy of ``observation.state``), so that ACT and
  Diffusion, which need images or an environment state, accept the data;
- ``action`` is the training label (``action.expert`` by default, or ``action.behavior`` /
  ``action.student``); frames whose label is invalid (flag false or a non-finite value) hold zeros
  and ``label_valid = False``;
- odsd extras under names LeRobot does not treat as policy inputs or outputs: ``next.reward``,
  ``next.done``, ``next.success``, ``expert_valid``, ``expert_confidence``, ``expert_failure``,
  ``behavior_source``, ``policy_version``, ``beta``, ``iteration``, ``segment_id``,
  ``segment_step``, ``segment_start``, ``label_valid``;
- LeRobot's defaults ``timestamp`` (``frame_index / fps``), ``frame_index``, ``episode_index``,
  ``index`` and ``task_index``, numbered over the *view* (episode 0 is the first selected episode);
- camera fields (``kind="image"``, ``observation.images.<camera>``) become LeRobot ``video``
  features (or ``image`` ones, ``cameras="image"``) whose values are never loaded here: the view
  records, per episode, the segment and row its frames start at, and
  :class:`~odsd.lerobot.frames.CameraFrames` reads them on request. Depth fields
  (``kind="depth"``) are not LeRobot features (docs/lerobot.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from odsd.errors import ConfigError
from odsd.schema import EpisodeEntry, FeatureSpec
from odsd.store import Snapshot

STATE = "observation.state"
ENV_STATE = "observation.environment_state"
DEFAULT_KEYS = ("timestamp", "frame_index", "episode_index", "index", "task_index")
CameraDtype = Literal["video", "image"]
CAMERA_PREFIX = "camera:"

LABELS: dict[str, tuple[str, str | None]] = {
    "expert": ("action.expert", "action.expert_valid"),
    "behavior": ("action.behavior", None),
    "student": ("action.student", "action.student_valid"),
}

_EXTRAS: dict[str, str] = {
    "reward": "next.reward",
    "success": "next.success",
    "action.expert_valid": "expert_valid",
    "action.expert_confidence": "expert_confidence",
    "action.expert_failure": "expert_failure",
    "action.source": "behavior_source",
    "policy_version": "policy_version",
    "beta": "beta",
    "segment_id": "segment_id",
    "segment_step": "segment_step",
    "segment_start": "segment_start",
}
_FOLDED = {"terminated", "truncated", "episode_step"}  # -> next.done / frame_index


def label_fields(label: str) -> tuple[str, str, str | None]:
    """``"expert"`` or ``"action.expert"`` → (short name, value field, validity field or None)."""
    short = label.removeprefix("action.")
    if short not in LABELS:
        raise ConfigError(f"label must be one of {sorted(LABELS)}, not {label!r}")
    return (short, *LABELS[short])


@dataclass(frozen=True)
class Column:
    """One LeRobot feature and where its values come from."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    """LeRobot shape: scalars are ``(1,)``."""
    names: list[str] | None
    source: str
    """``field:<store field>``, ``camera:<store field>``, ``label``, ``label_valid``, ``done``,
    ``iteration`` or a default key."""
    info: dict[str, Any] | None = None
    """LeRobot's ``info`` of a ``video`` feature."""

    @property
    def is_camera(self) -> bool:
        return self.source.startswith(CAMERA_PREFIX)

    def feature(self) -> dict[str, Any]:
        out: dict[str, Any] = {"dtype": self.dtype, "shape": self.shape, "names": self.names}
        if self.info is not None:
            out["info"] = dict(self.info)
        return out


def video_info(spec: FeatureSpec, fps: float, encoder: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``info`` LeRobot writes for a ``video`` feature encoded with ``encoder``
    (:data:`odsd.lerobot.video.DEFAULT_ENCODER` unless given): stream fields, then encoder fields."""
    from odsd.lerobot.video import DEFAULT_ENCODER, encoder_info

    height, width, channels = spec.shape
    return {
        "video.height": height,
        "video.width": width,
        "video.channels": channels,
        "video.fps": int(fps),
        "has_audio": False,
        **encoder_info(encoder or DEFAULT_ENCODER),
        "is_depth_map": False,
    }


def _shape(spec: FeatureSpec) -> tuple[int, ...]:
    return tuple(spec.shape) if spec.shape else (1,)


def camera_fields(features: Mapping[str, FeatureSpec]) -> list[str]:
    """Store fields that are LeRobot camera features (``kind="image"``), in schema order."""
    return [name for name, spec in features.items() if spec.kind == "image"]


def plan_columns(
    features: dict[str, FeatureSpec],
    label: str,
    *,
    cameras: CameraDtype = "video",
    fps: float = 30,
    encoder: Mapping[str, Any] | None = None,
) -> list[Column]:
    """The ordered LeRobot features for a store schema and a label choice.

    ``cameras``: the LeRobot dtype of camera features (``video`` with the ``info`` of ``encoder``
    at ``fps``, or ``image``).
    """
    _, value_field, _ = label_fields(label)
    if value_field not in features:
        raise ConfigError(f"label {label!r} needs field {value_field!r}, which this store does not have")
    if cameras not in ("video", "image"):
        raise ConfigError(f"camera features are 'video' or 'image', not {cameras!r}")
    cols: list[Column] = []
    for name, spec in features.items():
        if spec.kind == "depth":
            continue
        if spec.kind == "image":
            info = video_info(spec, fps, encoder) if cameras == "video" else None
            names = spec.names or ["height", "width", "channels"]
            cols.append(Column(name, cameras, _shape(spec), names, f"{CAMERA_PREFIX}{name}", info))
        elif name.startswith("observation."):
            cols.append(Column(name, spec.dtype, _shape(spec), spec.names, f"field:{name}"))
    if ENV_STATE not in features and STATE in features:
        spec = features[STATE]
        cols.append(Column(ENV_STATE, spec.dtype, _shape(spec), spec.names, f"field:{STATE}"))
    lspec = features[value_field]
    cols.append(Column("action", "float32", _shape(lspec), lspec.names, "label"))
    for name, spec in features.items():
        if name in _EXTRAS:
            cols.append(Column(_EXTRAS[name], spec.dtype, _shape(spec), spec.names, f"field:{name}"))
    if "terminated" in features or "truncated" in features:
        cols.append(Column("next.done", "bool", (1,), None, "done"))
    taken = {c.name for c in cols} | set(DEFAULT_KEYS)
    for name, spec in features.items():
        if name.startswith(("observation.", "action.", "state.")) or name in _EXTRAS or name in _FOLDED:
            continue
        if spec.kind != "array":
            continue
        out = name if name not in taken and not name.startswith(("observation", "action")) else f"odsd.{name}"
        cols.append(Column(out, spec.dtype, _shape(spec), spec.names, f"field:{name}"))
    cols.append(Column("iteration", "int64", (1,), None, "iteration"))
    cols.append(Column("label_valid", "bool", (1,), None, "label_valid"))
    cols.append(Column("timestamp", "float32", (1,), None, "timestamp"))
    for key in DEFAULT_KEYS[1:]:
        cols.append(Column(key, "int64", (1,), None, key))
    return cols


def item_dtype(dtype: str) -> np.dtype:
    """The dtype ``LeRobotDataset`` items carry for a stored dtype: float32, int64 or bool."""
    kind = np.dtype(dtype).kind
    return np.dtype(np.float32 if kind == "f" else np.int64 if kind in "iu" else bool)


@dataclass
class View:
    """Selected episodes of one snapshot, with every planned column materialized in view order.

    Camera columns are not materialized: episode ``e``'s frames are rows
    ``episode_row[e] ..`` of segment ``segments[episode_segment[e]]``.
    """

    watermark: int
    entries: list[EpisodeEntry]
    lengths: np.ndarray
    from_index: np.ndarray
    columns: dict[str, np.ndarray]
    """Storage dtype; scalars are ``[n]``, vectors ``[n, D]``."""
    tasks: list[str]
    task_of_episode: np.ndarray
    segment_id: np.ndarray | None = None
    segments: list[str] = field(default_factory=list)
    episode_segment: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    episode_row: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    episode_ids: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.episode_ids = np.fromiter((e.episode_id for e in self.entries), np.int64, len(self.entries))
        if len(self.episode_row) != len(self.entries):
            self.segments, self.episode_segment, self.episode_row = episode_locations(self.entries)

    @property
    def num_frames(self) -> int:
        return int(self.lengths.sum())

    @property
    def to_index(self) -> np.ndarray:
        return self.from_index + self.lengths

    @property
    def label_valid(self) -> np.ndarray:
        return self.columns["label_valid"]

    @property
    def frame_episode(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.entries), dtype=np.int64), self.lengths)


def episode_locations(entries: Sequence[EpisodeEntry]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(segments, segment number of each episode, row of its first frame in that segment)."""
    segments = list(dict.fromkeys(e.segment for e in entries))
    number = {path: i for i, path in enumerate(segments)}
    seg = np.fromiter((number[e.segment] for e in entries), np.int64, len(entries))
    row = np.fromiter((e.offset for e in entries), np.int64, len(entries))
    return segments, seg, row


def _frames_of(snap: Snapshot, entries: Sequence[EpisodeEntry]) -> tuple[np.ndarray, np.ndarray]:
    pos = np.fromiter((snap.position(e.episode_id) for e in entries), np.int64, len(entries))
    lengths = snap.lengths[pos].astype(np.int64)
    n = int(lengths.sum())
    view_starts = np.zeros(len(entries), dtype=np.int64)
    if len(entries):
        np.cumsum(lengths[:-1], out=view_starts[1:])
    frames = np.repeat(snap.starts[pos] - view_starts, lengths) + np.arange(n, dtype=np.int64)
    return frames, lengths


def _part(
    snap: Snapshot,
    plan: Sequence[Column],
    label: str,
    entries: Sequence[EpisodeEntry],
    *,
    ep_offset: int,
    frame_offset: int,
    tasks: list[str],
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Columns for ``entries`` numbered from ``ep_offset`` / ``frame_offset``; extends ``tasks``."""
    _, value_field, valid_field = label_fields(label)
    frames, lengths = _frames_of(snap, entries)
    n = len(frames)
    task_ids = {t: i for i, t in enumerate(tasks)}
    task_of_ep = np.empty(len(entries), dtype=np.int64)
    for i, e in enumerate(entries):
        if e.meta.task not in task_ids:
            task_ids[e.meta.task] = len(tasks)
            tasks.append(e.meta.task)
        task_of_ep[i] = task_ids[e.meta.task]
    ep_local = np.repeat(np.arange(len(entries), dtype=np.int64), lengths)
    starts_local = np.zeros(len(entries), dtype=np.int64)
    if len(entries):
        np.cumsum(lengths[:-1], out=starts_local[1:])
    frame_index = np.arange(n, dtype=np.int64) - np.repeat(starts_local, lengths)

    cache: dict[str, np.ndarray] = {}

    def field(name: str) -> np.ndarray:
        if name not in cache:
            cache[name] = snap.gather(name, frames)
        return cache[name]

    label_values = field(value_field).astype(np.float32, copy=False)
    valid = np.isfinite(label_values.reshape(n, int(np.prod(label_values.shape[1:])))).all(axis=1)
    if valid_field is not None and valid_field in snap.features:
        valid &= field(valid_field).astype(bool)
    label_values = np.where(valid.reshape((n,) + (1,) * (label_values.ndim - 1)), label_values, 0).astype(
        np.float32
    )
    fps = float(snap.store.manifest.fps)
    cols: dict[str, np.ndarray] = {}
    for col in plan:
        src = col.source
        if col.is_camera:
            continue  # read on request (odsd.lerobot.frames), never loaded
        if src.startswith("field:"):
            values = field(src[6:])
        elif src == "label":
            values = label_values
        elif src == "label_valid":
            values = valid
        elif src == "done":
            done = np.zeros(n, dtype=bool)
            for f in ("terminated", "truncated"):
                if f in snap.features:
                    done |= field(f).astype(bool)
            values = done
        elif src == "iteration":
            its = np.fromiter((e.meta.iteration for e in entries), np.int64, len(entries))
            values = np.repeat(its, lengths)
        elif src == "timestamp":
            values = (frame_index / fps).astype(np.float32)
        elif src == "frame_index":
            values = frame_index
        elif src == "episode_index":
            values = ep_local + ep_offset
        elif src == "index":
            values = np.arange(frame_offset, frame_offset + n, dtype=np.int64)
        elif src == "task_index":
            values = np.repeat(task_of_ep, lengths)
        else:  # pragma: no cover - plan and builder are written together
            raise AssertionError(src)
        values = np.asarray(values)
        if values.dtype != np.dtype(col.dtype):
            values = values.astype(col.dtype)
        cols[col.name] = values
    seg = field("segment_id") if "segment_id" in snap.features else None
    if seg is not None:
        cols["__segment_id"] = seg
    return cols, lengths, task_of_ep


def build_view(
    snap: Snapshot,
    plan: Sequence[Column],
    label: str,
    entries: Sequence[EpisodeEntry],
    *,
    previous: View | None = None,
) -> View:
    """Materialize the view of ``entries``; appends to ``previous`` when it is a prefix of them."""
    entries = list(entries)
    ids = [e.episode_id for e in entries]
    if previous is not None and ids[: len(previous.entries)] == previous.episode_ids.tolist():
        new = entries[len(previous.entries) :]
        tasks = list(previous.tasks)
        cols, lengths, task_of_ep = _part(
            snap,
            plan,
            label,
            new,
            ep_offset=len(previous.entries),
            frame_offset=previous.num_frames,
            tasks=tasks,
        )
        old = dict(previous.columns)
        if previous.segment_id is not None:
            old["__segment_id"] = previous.segment_id
        cols = {k: np.concatenate([old[k], v]) if k in old else v for k, v in cols.items()} if new else old
        lengths = np.concatenate([previous.lengths, lengths])
        task_of_ep = np.concatenate([previous.task_of_episode, task_of_ep])
    else:
        tasks = []
        cols, lengths, task_of_ep = _part(
            snap, plan, label, entries, ep_offset=0, frame_offset=0, tasks=tasks
        )
    seg = cols.pop("__segment_id", None)
    from_index = np.zeros(len(entries), dtype=np.int64)
    if len(entries):
        np.cumsum(lengths[:-1], out=from_index[1:])
    return View(
        watermark=snap.watermark,
        entries=entries,
        lengths=lengths.astype(np.int64),
        from_index=from_index,
        columns=cols,
        tasks=tasks,
        task_of_episode=task_of_ep,
        segment_id=seg,
    )
