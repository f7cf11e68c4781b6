"""What an export writes as its LeRobot episodes: whole episodes, or segment clips.

Without frame-level filters the unit is the reader's view as it is. When a selection names
segments (``Selection(segments=("grasp",))``) or focuses on failures (``failure_focused``), the
unit is a *clip*: one contiguous segment ``[start, end)`` of a selected episode whose name is
one of ``segments`` (when given) and, with ``failure_focused``, whose ``success`` is False (a
failed episode without a segment table is one clip over the whole episode, the rule of
:func:`~odsd.lerobot.selection.failed_frame_mask`). Each clip becomes one LeRobot episode:

- the view's columns re-sliced to the clip's frames, ``frame_index`` restarting at 0,
  ``timestamp = frame_index / fps``, ``episode_index`` the clip number, ``index`` the running frame
  number, ``task_index`` unchanged;
- ``meta/episodes`` keeps the source episode's ``odsd/*`` columns and adds ``odsd/segment_name``
  (empty for a whole failed episode without a table), ``odsd/segment_start`` (offset in the source
  episode) and ``odsd/segment_success`` (-1 unknown, 0, 1); ``odsd/segments`` holds the clip's own
  entry ``name:0:length:success``;
- statistics cover the exported frames only (the label over valid labels), under their own
  version id (:func:`clip_stats_version`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from odsd.errors import ConfigError
from odsd.lerobot.dataset import OdsdLeRobotDataset, episode_table, segment_text
from odsd.lerobot.meta import EpisodeTable
from odsd.lerobot.selection import Selection, check_segment_names
from odsd.lerobot.stats import compute_stats
from odsd.lerobot.view import View
from odsd.schema import EpisodeEntry

Unit = Literal["episodes", "segments"]
RENUMBERED = ("frame_index", "timestamp", "episode_index", "index")


@dataclass(frozen=True)
class Clip:
    """One segment of a view episode, exported as its own LeRobot episode."""

    episode: int
    """Position of the source episode in the view."""
    name: str | None
    """Segment name; None for a failed episode without a segment table (exported whole)."""
    start: int
    """First frame, as an offset in the source episode."""
    end: int
    """One past the last frame."""
    success: bool | None

    @property
    def length(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class ExportUnit:
    """A view whose episodes are the exported LeRobot episodes, and their metadata."""

    unit: Unit
    view: View
    episodes: EpisodeTable
    stats: Mapping[str, Mapping[str, np.ndarray]]
    stats_version: str
    provenance: dict[str, Any]
    """What the export writes to ``meta/odsd.json``."""
    source_episodes: int
    """Store episodes the exported frames come from."""


def export_unit(ds: OdsdLeRobotDataset) -> ExportUnit:
    """Whole episodes of ``ds.view``, or its segment clips when the selection asks for them."""
    selection = ds.selection
    if selection.segments or selection.failure_focused:
        return segment_clips(ds)
    return whole_episodes(ds)


def whole_episodes(ds: OdsdLeRobotDataset) -> ExportUnit:
    meta = ds.meta
    return ExportUnit(
        unit="episodes",
        view=ds.view,
        episodes=meta.episodes,
        stats=meta.stats,
        stats_version=meta.stats_version,
        provenance=dict(meta.provenance),
        source_episodes=len(ds.view.entries),
    )


def segment_clips(ds: OdsdLeRobotDataset) -> ExportUnit:
    """One LeRobot episode per matching segment clip of ``ds.view`` (ConfigError when none match)."""
    view, meta, selection = ds.view, ds.meta, ds.selection
    if selection.segments:
        check_segment_names(view.entries, selection.segments)
    clips = select_clips(view.entries, selection)
    if not clips:
        raise ConfigError(f"nothing to export: no {_describe(selection)} in the selected episodes")
    clipped = clip_view(view, clips, float(meta.fps))
    version = clip_stats_version(meta.stats_version, selection)
    sources = len({c.episode for c in clips})
    provenance = {
        **meta.provenance,
        "stats_version": version,
        "reader_stats_version": meta.stats_version,
        "export_unit": {
            "unit": "segments",
            "segments": list(selection.segments) if selection.segments else None,
            "failure_focused": selection.failure_focused,
            "clips": len(clips),
            "source_episodes": sources,
        },
    }
    return ExportUnit(
        unit="segments",
        view=clipped,
        episodes=clip_episode_table(clipped, clips),
        stats={**compute_stats(clipped.columns, {"action": clipped.label_valid}), **ds.camera_stats(clipped)},
        stats_version=version,
        provenance=provenance,
        source_episodes=sources,
    )


def _describe(selection: Selection) -> str:
    what = "failed segment" if selection.failure_focused else "segment"
    if selection.segments:
        what += f" named {', '.join(selection.segments)}"
    return what


def select_clips(entries: Sequence[EpisodeEntry], selection: Selection) -> list[Clip]:
    """The clips of ``entries`` (view order, then segment-table order) that ``selection`` asks for."""
    wanted = set(selection.segments) if selection.segments else None
    clips: list[Clip] = []
    for i, entry in enumerate(entries):
        meta = entry.meta
        if not meta.segments:
            if selection.failure_focused and wanted is None and not meta.success:
                clips.append(Clip(i, None, 0, meta.length, False))
            continue
        for ref in meta.segments:
            if wanted is not None and ref.name not in wanted:
                continue
            if selection.failure_focused and ref.success is not False:
                continue
            if ref.end > ref.start:
                clips.append(Clip(i, ref.name, ref.start, ref.end, ref.success))
    return clips


def clip_view(view: View, clips: Sequence[Clip], fps: float) -> View:
    """``view`` re-sliced to ``clips``, one view episode per clip, LeRobot's default keys renumbered."""
    source = np.fromiter((c.episode for c in clips), np.int64, len(clips))
    offsets = np.fromiter((c.start for c in clips), np.int64, len(clips))
    lengths = np.fromiter((c.length for c in clips), np.int64, len(clips))
    from_index = np.zeros(len(clips), dtype=np.int64)
    np.cumsum(lengths[:-1], out=from_index[1:])
    n = int(lengths.sum())
    frame_index = np.arange(n, dtype=np.int64) - np.repeat(from_index, lengths)
    positions = np.repeat(view.from_index[source] + offsets, lengths) + frame_index
    renumbered = {
        "frame_index": frame_index,
        "timestamp": frame_index / fps,
        "episode_index": np.repeat(np.arange(len(clips), dtype=np.int64), lengths),
        "index": np.arange(n, dtype=np.int64),
    }
    columns = {
        name: (renumbered[name] if name in renumbered else values[positions]).astype(values.dtype, copy=False)
        for name, values in view.columns.items()
    }
    return View(
        watermark=view.watermark,
        entries=[view.entries[i] for i in source.tolist()],
        lengths=lengths,
        from_index=from_index,
        columns=columns,
        tasks=list(view.tasks),
        task_of_episode=view.task_of_episode[source],
        segment_id=None if view.segment_id is None else view.segment_id[positions],
        segments=list(view.segments),
        episode_segment=view.episode_segment[source],
        episode_row=view.episode_row[source] + offsets,
    )


def clip_episode_table(clipped: View, clips: Sequence[Clip]) -> EpisodeTable:
    """``meta/episodes`` of a clip view: the source episodes' ``odsd/*`` columns plus the clip's own."""
    table = episode_table(clipped)
    columns = {name: table[name] for name in table.column_names}
    columns["odsd/segments"] = [
        [] if c.name is None else [segment_text(c.name, 0, c.length, c.success)] for c in clips
    ]
    columns["odsd/segment_name"] = [c.name or "" for c in clips]
    columns["odsd/segment_start"] = [c.start for c in clips]
    columns["odsd/segment_success"] = [-1 if c.success is None else int(c.success) for c in clips]
    return EpisodeTable(columns)


def clip_stats_version(reader_version: str, selection: Selection) -> str:
    """The statistics version of a clip export: the reader's version plus the clip specification."""
    payload = {
        "reader": reader_version,
        "unit": "segments",
        "segments": list(selection.segments or ()),
        "failure_focused": selection.failure_focused,
    }
    return "st-" + hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]
