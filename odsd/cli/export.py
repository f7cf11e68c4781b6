"""``odsd export-lerobot STORE OUT``: write a LeRobot v3.0 dataset from a store snapshot."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from odsd.cli.output import console
from odsd.errors import ConfigError


def export_lerobot_cmd(
    store: Annotated[Path, typer.Argument(help="Store directory.")],
    out: Annotated[Path, typer.Argument(help="Output dataset directory (LeRobot v3.0 layout).")],
    watermark: Annotated[
        int | None, typer.Option(help="Export the snapshot at this watermark (default: newest).")
    ] = None,
    repo_id: Annotated[
        str | None, typer.Option("--repo-id", help="Dataset repo id (default: odsd/<store name>).")
    ] = None,
    label: Annotated[
        str, typer.Option(help="Training label written as `action`: expert, behavior or student.")
    ] = "expert",
    success_only: Annotated[bool, typer.Option("--success-only", help="Only successful episodes.")] = False,
    episodes: Annotated[
        list[str] | None,
        typer.Option("--episodes", help="Store episode ids, e.g. 0,3,7-9 (repeatable)."),
    ] = None,
    iterations: Annotated[
        list[str] | None, typer.Option("--iterations", help="Collection iterations, e.g. 2-4 (repeatable).")
    ] = None,
    recent: Annotated[
        int | None, typer.Option(help="Only the K most recently committed (selected) episodes.")
    ] = None,
    segment: Annotated[
        list[str] | None,
        typer.Option("--segment", help="Export each segment with this name as its own episode (repeatable)."),
    ] = None,
    failed_segments: Annotated[
        bool,
        typer.Option(
            "--failed-segments",
            help="Export each failed segment as its own episode (a failed episode without segments: whole).",
        ),
    ] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing OUT.")] = False,
    data_file_size_mb: Annotated[
        float, typer.Option("--data-file-size-mb", help="Roll data files at this uncompressed size.")
    ] = 100.0,
    chunks_size: Annotated[int, typer.Option("--chunks-size", help="Files per chunk directory.")] = 1000,
    no_fsync: Annotated[bool, typer.Option("--no-fsync", help="Skip fsync of the written files.")] = False,
    images: Annotated[
        bool,
        typer.Option("--images", help="Cameras as LeRobot `image` features (PNG, lossless), not `video`."),
    ] = False,
    video_codec: Annotated[
        str,
        typer.Option(
            "--video-codec", help="Video encoder: libsvtav1 (LeRobot's default), libaom-av1, h264 or hevc."
        ),
    ] = "libsvtav1",
    video_crf: Annotated[
        int, typer.Option("--video-crf", help="Video quality (lower: better, larger); LeRobot's default 30.")
    ] = 30,
    video_gop: Annotated[
        int, typer.Option("--video-gop", help="Keyframe interval in frames (LeRobot's default 2).")
    ] = 2,
    video_file_size_mb: Annotated[
        float, typer.Option("--video-file-size-mb", help="Start a new mp4 at this size.")
    ] = 200.0,
    workers: Annotated[
        int | None, typer.Option("--workers", help="Encoder threads (default: every core).")
    ] = None,
) -> None:
    """Export a store snapshot as a LeRobot v3.0 dataset (atomic; refuses an existing OUT)."""
    from odsd.lerobot.export import export_lerobot
    from odsd.lerobot.selection import Selection, parse_episode_list
    from odsd.lerobot.video import VideoEncoder

    if label not in ("expert", "behavior", "student"):
        raise ConfigError(f"--label must be expert, behavior or student, not {label!r}")
    selection = Selection(
        episodes=parse_episode_list(episodes),
        iterations=parse_episode_list(iterations),
        outcome="success" if success_only else "all",
        recent=recent,
        segments=tuple(segment) if segment else None,
        failure_focused=failed_segments,
    )
    result = export_lerobot(
        store,
        out,
        watermark=watermark,
        repo_id=repo_id,
        label=label,
        selection=selection,
        overwrite=overwrite,
        chunks_size=chunks_size,
        data_files_size_in_mb=data_file_size_mb,
        durable=not no_fsync,
        progress=sys.stdout.isatty(),
        images=images,
        video_encoder=VideoEncoder(
            codec=video_codec,
            crf=video_crf,
            g=video_gop,
            preset=12 if video_codec in ("libsvtav1", "av1") else None,
        ),
        video_files_size_in_mb=video_file_size_mb,
        workers=workers,
    )
    what = (
        f"{result.episodes} segments (clips) from {result.source_episodes} episodes"
        if result.unit == "segments"
        else f"{result.episodes} episodes"
    )
    console.print(
        f"exported {what}, {result.frames} frames at watermark {result.watermark} "
        f"to {result.out} ({result.data_files} data files, {result.frames_per_s:,.0f} frames/s, "
        f"stats {result.stats_version})"
    )
    if result.cameras:
        how = "PNG image features" if result.camera_dtype == "image" else f"{result.video_files} mp4 files"
        console.print(f"cameras: {', '.join(result.cameras)} as {how}")
    if result.skipped:
        console.print(f"note: not exported (depth has no LeRobot feature): {', '.join(result.skipped)}")
    if result.invalid_labels:
        console.print(
            f"note: {result.invalid_labels} frames have an invalid {label} label (zeros in `action`, "
            "`label_valid` = false); mask them when training on the export"
        )
