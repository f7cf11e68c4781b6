"""Store-damage kit: build a small real store, then apply one kind of on-disk damage to it.

Each damage function takes the root of a store made by :func:`build_store` and returns a :class:`Damage` naming the file or directory that ``odsd store
fsck`` must report and saying what readers must do:

- ``readers_refuse=True`` (data, metadata, history and path damage): every reader (``Snapshot``,
  ``OdsdLeRobotDataset``, ``export-lerobot``) raises :class:`~odsd.store.CorruptStoreError`;
- ``readers_refuse=False`` (a torn *trailing* record, a damaged checkpoint): the damaged file is
  not part of the committed history, so readers serve exactly the committed data (the records
  before the torn one; the records behind the checkpoint) and ``fsck`` still reports it.

``inspect_detects`` says whether ``odsd store inspect``, which runs the open-time checks of every
live segment (presence, metadata, sizes) but reads no chunk data, refuses the store; a byte flipped
inside a chunk keeps the file's size and is caught when the data is read.

>>> store = build_store(tmp / "s")
>>> damage = DAMAGES["missing_chunk"](store.root)
>>> fsck(EpisodeStore.open(store.root)).ok
False
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from odsd.store import EpisodeStore
from odsd.store.log import LOG_DIR, checkpoint_name, record_name
from odsd.store.log_archive import ARCHIVE_INDEX
from odsd.store.log_compaction import compact_log
from odsd.testing.store import TINY_FEATURES, FeaturesLike, make_episode

DAMAGED_COMMIT = 1
"""The commit whose segment or record the damage functions damage (not the newest one)."""
COMMITS = 4
DAMAGED_FIELD = "observation.state"


@dataclass(frozen=True)
class Damage:
    kind: str
    path: Path
    """The file or directory fsck must name."""
    readers_refuse: bool = True
    inspect_detects: bool = True


def build_store(
    root: Path,
    *,
    features: FeaturesLike = TINY_FEATURES,
    commits: int = COMMITS,
    episodes_per_commit: int = 2,
    length: int = 6,
    fps: float = 10,
) -> EpisodeStore:
    """A store of ``commits`` commits, each one segment of ``episodes_per_commit`` deterministic episodes.

    Episodes come from :func:`~odsd.testing.store.make_episode` (seeded, content-hashed), so
    :func:`~odsd.testing.store.check_snapshot` can prove that whatever a reader returns is right.
    """
    store = EpisodeStore.create(root, features=features, fps=fps, durability="process")
    writer = store.writer(writer_id="w", run_id="damage")
    for c in range(commits):
        writer.commit(
            [make_episode(features, length + i, seed=100 * c + i) for i in range(episodes_per_commit)]
        )
    return store


# -- helpers -------------------------------------------------------------------------------------


def _segment(root: Path, commit: int = DAMAGED_COMMIT) -> Path:
    body = json.loads((root / LOG_DIR / record_name(commit)).read_bytes())
    return root / body["adds"][0]["segment"]["path"]


def _chunk(root: Path, field: str = DAMAGED_FIELD) -> Path:
    chunks = sorted(p for p in (_segment(root) / field).iterdir() if p.name != "zarr.json")
    return chunks[0]


def _flip(path: Path, at: float = 0.5) -> None:
    """Set the top bit of one byte: in a JSON document that is never valid UTF-8 any more."""
    data = bytearray(path.read_bytes())
    data[int(len(data) * at)] ^= 0x80
    path.write_bytes(bytes(data))


def _edit_array_meta(root: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    path = _segment(root) / DAMAGED_FIELD / "zarr.json"
    meta = json.loads(path.read_bytes())
    edit(meta)
    path.write_text(json.dumps(meta))
    return path


def rewrite_record(root: Path, seq: int, edit: Callable[[dict[str, Any]], None]) -> Path:
    """Change a record's body and give it a valid checksum again (what a buggy writer would publish)."""
    path = root / LOG_DIR / record_name(seq)
    body = json.loads(path.read_bytes())
    edit(body)
    body["checksum"] = ""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    body["checksum"] = hashlib.sha256(canonical).hexdigest()
    path.write_bytes(json.dumps(body, sort_keys=True, separators=(",", ":")).encode() + b"\n")
    return path


def _move_segment_out(root: Path) -> tuple[Path, Path]:
    """Move the damaged commit's segment outside the store; return (old path, new path)."""
    seg = _segment(root)
    outside = root.parent / f"{root.name}-escaped" / seg.name
    outside.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(seg, outside)
    return seg, outside


# -- chunks --------------------------------------------------------------------------------------


def missing_chunk(root: Path) -> Damage:
    chunk = _chunk(root)
    chunk.unlink()
    return Damage("missing_chunk", chunk)


def flipped_chunk(root: Path) -> Damage:
    chunk = _chunk(root)
    _flip(chunk)
    return Damage("flipped_chunk", chunk, inspect_detects=False)


def truncated_chunk(root: Path) -> Damage:
    chunk = _chunk(root)
    chunk.write_bytes(chunk.read_bytes()[:-7])
    return Damage("truncated_chunk", chunk)


# -- array metadata ------------------------------------------------------------------------------


def meta_dtype(root: Path) -> Damage:
    """float32 → int32: same item size, so zarr would reinterpret the bytes without an error."""

    def edit(meta: dict[str, Any]) -> None:
        meta["data_type"] = "int32"

    return Damage("meta_dtype", _edit_array_meta(root, edit))


def meta_shape(root: Path) -> Damage:
    """One frame fewer: zarr reads a shorter array (export used to fail with an IndexError)."""

    def edit(meta: dict[str, Any]) -> None:
        meta["shape"][0] -= 1

    return Damage("meta_shape", _edit_array_meta(root, edit))


def meta_chunk_shape(root: Path) -> Damage:
    def edit(meta: dict[str, Any]) -> None:
        meta["chunk_grid"]["configuration"]["chunk_shape"][0] *= 2

    return Damage("meta_chunk_shape", _edit_array_meta(root, edit))


def meta_codec(root: Path) -> Damage:
    """The crc32c codec dropped: chunks would decode without their checksum being checked."""

    def edit(meta: dict[str, Any]) -> None:
        meta["codecs"] = [c for c in meta["codecs"] if c["name"] != "crc32c"]

    return Damage("meta_codec", _edit_array_meta(root, edit))


def meta_fill_value(root: Path) -> Damage:
    def edit(meta: dict[str, Any]) -> None:
        meta["fill_value"] = 1.0

    return Damage("meta_fill_value", _edit_array_meta(root, edit))


# -- log -----------------------------------------------------------------------------------------


def flipped_record(root: Path) -> Damage:
    """A byte flipped inside a record of the history (a later record exists)."""
    path = root / LOG_DIR / record_name(DAMAGED_COMMIT)
    _flip(path)
    return Damage("flipped_record", path)


def torn_tail(root: Path) -> Damage:
    """The same flip in the newest record: not part of the history yet, readers stop before it."""
    seqs = sorted(int(p.name[:20]) for p in (root / LOG_DIR).glob("[0-9]*.json"))
    path = root / LOG_DIR / record_name(seqs[-1])
    _flip(path)
    return Damage("torn_tail", path, readers_refuse=False, inspect_detects=False)


def flipped_checkpoint(root: Path) -> Damage:
    """A checkpoint (written here, at the newest record) with a byte flipped; the records remain."""
    store = EpisodeStore.open(root)
    state = store.refresh()
    store.log.write_checkpoint(state.to_checkpoint())
    path = root / LOG_DIR / checkpoint_name(state.seq)
    _flip(path)
    return Damage("flipped_checkpoint", path, readers_refuse=False, inspect_detects=False)


def _archived(root: Path) -> Path:
    """Pack every record but the newest into one log archive (the damaged commit among them)."""
    store = EpisodeStore.open(root)
    compact_log(store.log, keep_records=1, min_records=1)
    (archive,) = store.log.archives().archives
    return root / LOG_DIR / archive.name


def archive_flipped(root: Path) -> Damage:
    """A byte flipped inside a log archive (the records it holds are the history)."""
    path = _archived(root)
    _flip(path)
    return Damage("archive_flipped", path)


def archive_truncated(root: Path) -> Damage:
    path = _archived(root)
    path.write_bytes(path.read_bytes()[:-7])
    return Damage("archive_truncated", path)


def archive_missing(root: Path) -> Damage:
    path = _archived(root)
    path.unlink()
    return Damage("archive_missing", path)


def archive_index_flipped(root: Path) -> Damage:
    _archived(root)
    path = root / LOG_DIR / ARCHIVE_INDEX
    _flip(path)
    return Damage("archive_index_flipped", path)


def archive_index_deleted(root: Path) -> Damage:
    """Without the index the archived records are unreachable: the store must not read as shorter."""
    _archived(root)
    path = root / LOG_DIR / ARCHIVE_INDEX
    path.unlink()
    return Damage("archive_index_deleted", path)


def deleted_log(root: Path) -> Damage:
    path = root / LOG_DIR
    shutil.rmtree(path)
    return Damage("deleted_log", path)


# -- paths leaving the store ---------------------------------------------------------------------


def _escape(root: Path, new_path: Callable[[str, Path], str]) -> Path:
    seg, outside = _move_segment_out(root)
    old = str(seg.relative_to(root))
    target = new_path(old, outside)

    def edit(body: dict[str, Any]) -> None:
        for add in body["adds"]:
            if add["segment"]["path"] == old:
                add["segment"]["path"] = target
                for entry in add["episodes"]:
                    entry["segment"] = target

    return rewrite_record(root, DAMAGED_COMMIT, edit)


def record_path_dotdot(root: Path) -> Damage:
    """A record whose segment path climbs out of the store (``segments/../../…``), checksum valid."""

    def new_path(old: str, outside: Path) -> str:
        return os.path.relpath(outside, root)

    return Damage("record_path_dotdot", _escape(root, new_path))


def record_path_absolute(root: Path) -> Damage:
    def new_path(old: str, outside: Path) -> str:
        return str(outside)

    return Damage("record_path_absolute", _escape(root, new_path))


def symlink_out(root: Path) -> Damage:
    """A committed segment directory replaced by a symlink to a copy outside the store."""
    seg, outside = _move_segment_out(root)
    seg.symlink_to(outside, target_is_directory=True)
    return Damage("symlink_out", seg)


DAMAGES: dict[str, Callable[[Path], Damage]] = {
    f.__name__: f
    for f in (
        missing_chunk,
        flipped_chunk,
        truncated_chunk,
        meta_dtype,
        meta_shape,
        meta_chunk_shape,
        meta_codec,
        meta_fill_value,
        flipped_record,
        torn_tail,
        flipped_checkpoint,
        archive_flipped,
        archive_truncated,
        archive_missing,
        archive_index_flipped,
        archive_index_deleted,
        deleted_log,
        record_path_dotdot,
        record_path_absolute,
        symlink_out,
    )
}
"""Every damage kind, by name (for ``pytest.mark.parametrize``)."""


# -- image fields (a store built with IMAGE_FEATURES) ---------------------------------------------

IMAGE_FIELD = "observation.images.top"
IMAGE_FEATURES: dict[str, dict[str, Any]] = {
    **TINY_FEATURES,
    IMAGE_FIELD: {
        "dtype": "uint8",
        "shape": [6, 8, 3],
        "names": ["height", "width", "channels"],
        "kind": "image",
    },
}
""":data:`TINY_FEATURES` plus one small camera (stored with the default lossless codec)."""


def build_image_store(root: Path, **kwargs: Any) -> EpisodeStore:
    """:func:`build_store` with :data:`IMAGE_FEATURES`: the store the image damage kinds damage."""
    return build_store(root, features=IMAGE_FEATURES, **kwargs)


def _shard(root: Path) -> Path:
    return _chunk(root, IMAGE_FIELD)


def _index(data: bytes, frames: int) -> tuple[bytearray, int]:
    """A shard's index entries (mutable) and where they start."""
    start = len(data) - (16 * frames + 4)
    return bytearray(data[start:-4]), start


def _write_index(path: Path, data: bytes, index: bytearray, start: int) -> None:
    import crc32c

    path.write_bytes(data[:start] + bytes(index) + crc32c.crc32c(bytes(index)).to_bytes(4, "little"))


def _shard_frames(root: Path) -> int:
    return json.loads((_shard(root).parent / "zarr.json").read_bytes())["chunk_grid"]["configuration"][
        "chunk_shape"
    ][0]


def truncated_shard(root: Path) -> Damage:
    shard = _shard(root)
    shard.write_bytes(shard.read_bytes()[:-7])
    return Damage("truncated_shard", shard)


def missing_shard(root: Path) -> Damage:
    shard = _shard(root)
    shard.unlink()
    return Damage("missing_shard", shard)


def flipped_frame(root: Path) -> Damage:
    """A byte flipped inside the second frame's chunk: same size, caught by that frame's crc32c."""
    shard = _shard(root)
    data = bytearray(shard.read_bytes())
    index, _ = _index(bytes(data), _shard_frames(root))
    offset, size = int.from_bytes(index[16:24], "little"), int.from_bytes(index[24:32], "little")
    data[offset + size // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    return Damage("flipped_frame", shard, inspect_detects=False)


def index_out_of_file(root: Path) -> Damage:
    """An index entry pointing past the file's data, its crc32c recomputed (an edited index)."""
    shard = _shard(root)
    data = shard.read_bytes()
    index, start = _index(data, _shard_frames(root))
    index[0:8] = (start + 100).to_bytes(8, "little")
    _write_index(shard, data, index, start)
    return Damage("index_out_of_file", shard, inspect_detects=False)


def swapped_frames(root: Path) -> Damage:
    """Two index entries swapped, crc32c recomputed: every frame is intact but in the wrong place.

    Only a whole-field read can tell (the record's checksum covers the frames in order), so the
    damage names the field's directory.
    """
    shard = _shard(root)
    data = shard.read_bytes()
    index, start = _index(data, _shard_frames(root))
    index[0:16], index[16:32] = index[16:32], index[0:16]
    _write_index(shard, data, index, start)
    return Damage("swapped_frames", shard.parent, inspect_detects=False)


def image_meta_codec(root: Path) -> Damage:
    """The image codec in ``zarr.json`` changed (qoi → png): the frames would not decode as committed."""
    path = _shard(root).parent / "zarr.json"
    meta = json.loads(path.read_bytes())
    meta["codecs"][0]["configuration"]["codecs"][0]["configuration"] = {"codec": "png"}
    path.write_text(json.dumps(meta))
    return Damage("image_meta_codec", path)


IMAGE_DAMAGES: dict[str, Callable[[Path], Damage]] = {
    f.__name__: f
    for f in (
        truncated_shard,
        missing_shard,
        flipped_frame,
        index_out_of_file,
        swapped_frames,
        image_meta_codec,
    )
}
"""Damage kinds of a camera field's shard files, for a store made by :func:`build_image_store`."""


# -- driving the CLI -----------------------------------------------------------------------------


def run_odsd(*args: str | Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Run ``python -m odsd ARGS`` as a user would (no colour, wide lines) and capture its output."""
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "odsd", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def assert_refused(proc: subprocess.CompletedProcess[str], code: int = 4, *needles: str | Path) -> str:
    """Exit ``code``, no traceback, exactly one stderr line ``odsd: error: …`` containing every needle."""
    out = f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    assert proc.returncode == code, out
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, out
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("odsd: error: "), out
    for needle in needles:
        assert str(needle) in lines[0], f"{needle} not in {lines[0]!r}"
    return lines[0]
