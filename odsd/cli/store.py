"""``odsd store …``: create, inspect, check and maintain episode stores."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from odsd.cli.output import console, human_bytes, print_json
from odsd.errors import ConfigError
from odsd.replay.storage import state_storage
from odsd.store import EpisodeStore, RetentionPolicy, apply_retention, compact, fsck, vacuum
from odsd.store.compaction import DEFAULT_SHARD_FRAMES, DEFAULT_SMALL_FRAMES
from odsd.store.fsck import DEFAULT_REPAIR_GRACE_S
from odsd.store.fsio import require_writable
from odsd.store.image_stats import camera_storage
from odsd.store.log_compaction import DEFAULT_KEEP_RECORDS, compact_log
from odsd.store.vacuum import DEFAULT_GRACE_S

store_app = typer.Typer(help="Create, inspect, check and maintain episode stores.", no_args_is_help=True)

StorePath = Annotated[Path, typer.Argument(help="Store directory.")]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


@store_app.command("init")
def init_cmd(
    path: StorePath,
    features: Annotated[Path, typer.Option(help="JSON file: {field: {dtype, shape, names}}.")],
    fps: Annotated[float, typer.Option(help="Frames per second of the recorded data.")],
    robot_type: Annotated[str | None, typer.Option(help="Robot type recorded in the manifest.")] = None,
    durability: Annotated[
        str,
        typer.Option(help="Default durability: fsync (survives power loss) or process (crash-safe only)."),
    ] = "fsync",
) -> None:
    """Create an empty store with the given feature schema."""
    try:
        spec = json.loads(features.read_text())
    except OSError as exc:
        raise ConfigError(f"{features}: cannot read feature file ({exc.strerror})") from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{features}: not valid JSON ({exc.msg} at line {exc.lineno})") from exc
    if not isinstance(spec, dict) or not spec:
        raise ConfigError(f"{features}: expected a non-empty JSON object of fields")
    if durability not in ("fsync", "process"):
        raise ConfigError(f"--durability must be fsync or process, not {durability!r}")
    store = EpisodeStore.create(path, features=spec, fps=fps, robot_type=robot_type, durability=durability)  # type: ignore[arg-type]
    console.print(f"created store {store.root} ({len(store.features)} fields, id {store.manifest.store_id})")


def _open(path: Path, *, write: bool) -> EpisodeStore:
    """The store at ``path``; ``write``: for a command that changes it (exit 6 on a read-only one)."""
    store = EpisodeStore.open(path)
    if write:
        require_writable(store.root)
    return store


def summarize(store: EpisodeStore, watermark: int | None = None) -> dict[str, Any]:
    """The numbers `store inspect` shows, as a plain dict."""
    snap = store.snapshot(watermark)
    snap.verify_layouts()  # a damaged segment fails here (one listing per array, no chunk data read)
    state = store.state_at(snap.watermark)
    live = sorted(set(snap.segments))
    per_iteration: dict[int, dict[str, Any]] = defaultdict(
        lambda: {"episodes": 0, "frames": 0, "successes": 0, "policy_versions": set()}
    )
    runs: dict[str, int] = defaultdict(int)
    for entry in snap.entries:
        meta = entry.meta
        row = per_iteration[meta.iteration]
        row["episodes"] += 1
        row["frames"] += meta.length
        row["successes"] += int(meta.success)
        if meta.policy_version_last is not None:
            row["policy_versions"].add(meta.policy_version_last)
        runs[meta.run_id or "-"] += 1
    run_dirs = (
        sorted(p.name for p in (store.root / "runs").iterdir()) if (store.root / "runs").is_dir() else []
    )
    frames = snap.num_frames
    nbytes = sum(state.segments[s].nbytes for s in live)
    return {
        "store": str(store.root),
        "store_id": store.manifest.store_id,
        "format_version": store.manifest.format_version,
        "fps": store.manifest.fps,
        "watermark": snap.watermark,
        "episodes": snap.num_episodes,
        "frames": frames,
        "bytes": nbytes,
        "bytes_per_frame": nbytes / frames if frames else 0.0,
        "segments": sum(1 for s in live if s.startswith("segments/")),
        "shards": sum(1 for s in live if s.startswith("shards/")),
        "dead_segments": sum(1 for p in state.dead_segments if (store.root / p).exists()),
        "runs": sorted(set(run_dirs) | {r for r in runs if r != "-"}),
        "episodes_per_run": dict(runs),
        "iterations": {
            str(k): {**v, "policy_versions": sorted(v["policy_versions"])}
            for k, v in sorted(per_iteration.items())
        },
        "features": {k: v.model_dump() for k, v in store.features.items()},
        "torn_record": str(store.torn_record.path) if store.torn_record else None,
        "state_storage": state_storage(store, snap.watermark).to_json(),
        "cameras": camera_storage(store, snap.watermark),
    }


@store_app.command("inspect")
def inspect_cmd(
    path: StorePath,
    json_out: JsonFlag = False,
    watermark: Annotated[int | None, typer.Option(min=0, help="Inspect the view at this watermark.")] = None,
) -> None:
    """Show watermark, episodes, frames, bytes, segments/shards, runs and per-iteration counts."""
    info = summarize(EpisodeStore.open(path), watermark)
    if json_out:
        print_json(info)
        return
    table = Table(title=f"odsd store {info['store']}", show_header=False)
    for key in ("store_id", "format_version", "fps", "watermark", "episodes", "frames"):
        table.add_row(key, str(info[key]))
    table.add_row("bytes", f"{human_bytes(info['bytes'])} ({info['bytes_per_frame']:.0f} B/frame)")
    state = info["state_storage"]
    if state.get("fields"):
        table.add_row(
            "recorded sim state",
            f"{state['disk_bytes_per_frame']:.0f} B/frame on disk ({state['raw_bytes_per_frame']:.0f} B raw, "
            f"{state['share']:.0%} of the store)",
        )
    for name, cam in info["cameras"].items():
        quality = f":{cam['quality']}" if cam["quality"] is not None else ""
        table.add_row(
            name,
            f"{cam['bytes_per_frame']:.0f} B/frame ({cam['codec']}{quality}; raw {cam['raw_bytes_per_frame']} B, "
            f"{cam['ratio']:.1f}x)",
        )
    table.add_row("segments / shards", f"{info['segments']} / {info['shards']}")
    table.add_row("dead (not vacuumed)", str(info["dead_segments"]))
    table.add_row("runs", ", ".join(info["runs"]) or "-")
    console.print(table)
    if info["iterations"]:
        it_table = Table(title="episodes per iteration")
        for col in ("iteration", "episodes", "frames", "success", "policy versions"):
            it_table.add_column(col, justify="right")
        for it, row in info["iterations"].items():
            rate = row["successes"] / row["episodes"] if row["episodes"] else 0.0
            versions = ",".join(map(str, row["policy_versions"])) or "-"
            it_table.add_row(it, str(row["episodes"]), str(row["frames"]), f"{rate:.0%}", versions)
        console.print(it_table)
    fields = Table(title="features")
    for col in ("field", "dtype", "shape"):
        fields.add_column(col)
    for name, spec in info["features"].items():
        fields.add_row(name, spec["dtype"], str(tuple(spec["shape"])))
    console.print(fields)
    if info["torn_record"]:
        console.print(
            f"[yellow]warning: damaged trailing record {info['torn_record']} is ignored; run fsck[/]"
        )


@store_app.command("fsck")
def fsck_cmd(
    path: StorePath,
    repair: Annotated[
        bool, typer.Option(help="Clean what is safe: temporaries, orphan segments, torn tail.")
    ] = False,
    quick: Annotated[bool, typer.Option(help="Skip reading segment data and verifying checksums.")] = False,
    grace: Annotated[
        float, typer.Option(min=0, help="Only repair leftovers older than this many seconds.")
    ] = (DEFAULT_REPAIR_GRACE_S),
    json_out: JsonFlag = False,
) -> int:
    """Check manifest, commit log, checkpoints and segment checksums; exit 4 if errors are found."""
    report = fsck(_open(path, write=repair), repair=repair, deep=not quick, grace_s=grace)
    if json_out:
        print_json(
            {
                "ok": report.ok,
                "watermark": report.watermark,
                "episodes": report.episodes,
                "segments_checked": report.segments_checked,
                "findings": [f.__dict__ for f in report.findings],
                "repaired": report.repaired,
            }
        )
    else:
        for f in report.findings:
            style = "red" if f.severity == "error" else "yellow"
            fix = " [repairable]" if f.repairable else ""
            console.print(f"[{style}]{f.severity}[/]: {f.path}: {f.message}{fix}", highlight=False)
        for line in report.repaired:
            console.print(f"[green]repaired[/]: {line}", highlight=False)
        verdict = "ok" if report.ok else f"{len(report.errors)} error(s)"
        console.print(
            f"fsck {path}: {verdict}; watermark {report.watermark}, {report.episodes} episodes, "
            f"{report.segments_checked} segments checked"
        )
    return 0 if report.ok else 4


@store_app.command("compact")
def compact_cmd(
    path: StorePath,
    small_frames: Annotated[int, typer.Option(min=1, help="Segments with fewer live frames are merged.")] = (
        DEFAULT_SMALL_FRAMES
    ),
    shard_frames: Annotated[int, typer.Option(min=1, help="Target frames per shard.")] = DEFAULT_SHARD_FRAMES,
    log: Annotated[
        bool, typer.Option("--log/--no-log", help="Also pack old commit records into log archives.")
    ] = True,
    keep_records: Annotated[
        int, typer.Option(min=1, help="Newest commit records kept as files by --log.")
    ] = DEFAULT_KEEP_RECORDS,
    json_out: JsonFlag = False,
) -> None:
    """Merge small segments into sealed shards and old commit records into log archives (online)."""
    store = _open(path, write=True)
    result = compact(store, small_frames=small_frames, shard_frames=shard_frames)
    packed = compact_log(store.log, keep_records=keep_records, min_records=1) if log else None
    if json_out:
        print_json({**result.__dict__, "log": packed.__dict__ if packed is not None else None})
        return
    console.print(
        f"compacted {result.merged_segments} segments ({result.episodes} episodes) into {len(result.shards)} shards"
    )
    if packed is not None and packed.busy:
        console.print("log: another process is compacting the log; left to it")
    elif packed is not None:
        console.print(
            f"log: archived {packed.archived} commit records; {packed.archives} archives hold records "
            f"0..{packed.through}"
        )


@store_app.command("retain")
def retain_cmd(
    path: StorePath,
    max_episodes: Annotated[int | None, typer.Option(min=0, help="Keep at most this many episodes.")] = None,
    max_frames: Annotated[int | None, typer.Option(min=0, help="Keep at most this many frames.")] = None,
    max_bytes: Annotated[int | None, typer.Option(min=0, help="Keep at most this many bytes.")] = None,
    json_out: JsonFlag = False,
) -> None:
    """Remove the oldest episodes beyond the given capacities (files stay until vacuum)."""
    if max_episodes is None and max_frames is None and max_bytes is None:
        raise ConfigError("retain needs at least one of --max-episodes, --max-frames, --max-bytes")
    policy = RetentionPolicy(max_episodes=max_episodes, max_frames=max_frames, max_bytes=max_bytes)
    removed = apply_retention(_open(path, write=True), policy)
    if json_out:
        print_json({"removed": removed})
    else:
        console.print(f"removed {len(removed)} episodes")


@store_app.command("vacuum")
def vacuum_cmd(
    path: StorePath,
    grace: Annotated[
        float, typer.Option(min=0, help="Keep files removed less than this many seconds ago.")
    ] = (DEFAULT_GRACE_S),
    dry_run: Annotated[bool, typer.Option(help="Report what would be deleted.")] = False,
    json_out: JsonFlag = False,
) -> None:
    """Delete files of removed episodes after the grace period, unless a reader lease pins them."""
    result = vacuum(_open(path, write=not dry_run), grace_s=grace, dry_run=dry_run)
    if json_out:
        print_json(result.__dict__)
    else:
        verb = "would delete" if dry_run else "deleted"
        console.print(
            f"{verb} {len(result.deleted)} segments ({human_bytes(result.freed_bytes)}); kept "
            f"{len(result.kept_for_grace)} within grace, {len(result.kept_for_lease)} pinned by leases"
        )
