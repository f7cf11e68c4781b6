"""What a committed segment must look like on disk, checked against its commit record and the schema.

Zarr reads a missing chunk file as fill values and interprets chunks by whatever ``zarr.json``
says, so a deleted chunk or an edited dtype would be read as wrong numbers without an error.
Before the first read of a segment, :func:`check_segment` proves the files are the committed
ones as far as that is possible without reading data:

- the segment directory resolves inside the store (no symbolic link anywhere on the way or in it);
- every field of the schema has an array whose ``zarr.json`` matches what odsd commits: the
  schema's dtype, shape ``[n_frames of the record, *feature shape]``, a regular chunk grid along
  frames, fill value 0 and the codecs bytes (little-endian) → zstd → crc32c;
- every chunk of that grid is present, and the files add up to the byte count in the record.

It costs one directory listing per array, one small JSON read per array and one ``realpath``
per segment (about 0.1 ms per array; readers do it once per segment and store handle, as
segments are immutable). :func:`decode_array` then reads the chunks directly with the committed
layout (never a dtype or shape taken from an unchecked file) and checks each chunk's crc32c, and
callers compare the decoded data with the crc32 in the commit record.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import crc32c
import numcodecs
import numpy as np

from odsd.schema import FeatureSpec, ImageEncoding, SegmentInfo
from odsd.store.errors import CorruptStoreError, StoreError
from odsd.store.frame_codecs import ZARR_CODEC_NAME, encoding_config
from odsd.store.image_arrays import (
    chunks_checksum,
    decode_chunks,
    index_nbytes,
    shard_index,
)
from odsd.store.segments import EncodedFrames, frame_checksum

_ZSTD = numcodecs.Zstd()
_CODECS = ("bytes", "zstd", "crc32c")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a committed segment, naming the file or directory at fault."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass(frozen=True)
class ArrayLayout:
    """A checked array: where its chunks are and how to decode them."""

    field: str
    dir: str
    shape: tuple[int, ...]
    dtype: np.dtype
    chunk_frames: int
    chunks: tuple[str, ...]
    """Chunk files in frame order (chunk ``i`` holds frames ``i*chunk_frames ..``)."""
    missing: frozenset[str] = field(default_factory=frozenset)
    """Chunks of the grid that have no file (zarr would read fill values there)."""
    encoding: ImageEncoding | None = None
    """Image fields: chunk files are shards of one encoded frame per inner chunk."""

    def frames_in(self, i: int) -> int:
        """How many frames chunk file ``i`` holds."""
        return min(self.chunk_frames, self.shape[0] - i * self.chunk_frames)


def _meta_problem(meta: Any, spec: FeatureSpec, n_frames: int) -> str | None:
    """Why an array's ``zarr.json`` is not what odsd committed for this field; None if it is."""
    try:
        return _compare_meta(meta, spec, n_frames)
    except (AttributeError, TypeError, KeyError, IndexError):  # a document of the wrong structure
        return "is not the array metadata odsd commits"


def _compare_meta(meta: Any, spec: FeatureSpec, n_frames: int) -> str | None:
    if not isinstance(meta, dict) or meta.get("zarr_format") != 3 or meta.get("node_type") != "array":
        return "is not Zarr v3 array metadata"
    dtype = np.dtype(spec.dtype)
    if meta.get("data_type") != dtype.name:
        return f"data_type {meta.get('data_type')!r} differs from the store schema's {dtype.name!r}"
    shape = [n_frames, *spec.shape]
    if meta.get("shape") != shape:
        return f"shape {meta.get('shape')} differs from the committed {shape}"
    grid = meta.get("chunk_grid")
    chunk = grid.get("configuration", {}).get("chunk_shape") if isinstance(grid, dict) else None
    want_tail = [max(d, 1) for d in spec.shape]
    if (
        not isinstance(grid, dict)
        or grid.get("name") != "regular"
        or not isinstance(chunk, list)
        or len(chunk) != len(shape)
        or chunk[1:] != want_tail
        or not isinstance(chunk[0], int)
        or not 1 <= chunk[0] <= max(n_frames, 1)
    ):
        return f"chunk grid {grid} is not a regular grid of [1..{max(n_frames, 1)}, *{want_tail}]"
    keys = meta.get("chunk_key_encoding")
    if not (
        isinstance(keys, dict)
        and keys.get("name") == "default"
        and keys.get("configuration", {}).get("separator", "/") in (".", "/")
    ):
        return f"chunk key encoding {keys} is not zarr's default"
    fill = meta.get("fill_value")
    if isinstance(fill, str) or fill is None or fill != 0:
        return f"fill_value {fill!r} differs from the committed 0"
    codecs = meta.get("codecs")
    if spec.encoding is not None:
        want = _image_codecs(spec)
        if codecs != want:
            return f"codecs {codecs} differ from the committed {want}"
        if meta.get("storage_transformers"):
            return "storage transformers are not part of the committed format"
        return None
    names = tuple(c.get("name") for c in codecs if isinstance(c, dict)) if isinstance(codecs, list) else ()
    if names != _CODECS or len(names) != len(codecs):  # type: ignore[arg-type]
        return f"codecs {list(names) or codecs} differ from the committed {list(_CODECS)}"
    endian = (codecs[0].get("configuration") or {}).get("endian")  # type: ignore[index]
    if endian != "little" and not (dtype.itemsize == 1 and endian is None):
        return f"bytes codec endian {endian!r} differs from the committed 'little'"
    if meta.get("storage_transformers"):
        return "storage transformers are not part of the committed format"
    return None


def _image_codecs(spec: FeatureSpec) -> list[dict[str, Any]]:
    """The ``codecs`` of an image field's ``zarr.json`` as odsd (and zarr) write them."""
    assert spec.encoding is not None
    return [
        {
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": [1, *spec.shape],
                "codecs": [
                    {"name": ZARR_CODEC_NAME, "configuration": encoding_config(spec.encoding)},
                    {"name": "crc32c"},
                ],
                "index_codecs": [
                    {"name": "bytes", "configuration": {"endian": "little"}},
                    {"name": "crc32c"},
                ],
                "index_location": "end",
            },
        }
    ]


def _read_plain(path: str) -> bytes:
    """A file's bytes; a symbolic link raises OSError (ELOOP) instead of being followed."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read()
    finally:
        os.close(fd)


def _chunk_size(path: str) -> int | None:
    """Size of a chunk file; None when there is none; OSError(ELOOP) for a symbolic link."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISLNK(st.st_mode):
        raise OSError(errno.ELOOP, "is a symbolic link", path)
    return st.st_size if stat.S_ISREG(st.st_mode) else None


_LINK = "is a symbolic link; committed files are never links"


def check_segment(
    root: Path,
    info: SegmentInfo,
    features: Mapping[str, FeatureSpec],
    *,
    root_real: str | None = None,
    partial: bool = False,
) -> tuple[dict[str, ArrayLayout], list[Problem]]:
    """Layouts of the segment's arrays and every problem found (none: the layout is the committed one).

    ``partial``: ``features`` names only some of the schema's fields (a reader of one field); the
    segment's total byte count cannot be compared with the record then, every other check is made.

    Per array: one ``open``/``read`` of ``zarr.json`` (refusing links) and one ``lstat`` per
    chunk; per segment one ``realpath`` and one directory listing.
    """
    seg_dir = os.path.join(root, info.path)
    root_real = root_real or os.path.realpath(root)
    real = os.path.realpath(seg_dir)
    if real != os.path.join(root_real, info.path):
        return {}, [Problem(seg_dir, f"resolves to {real} through a symbolic link; refusing to read it")]
    try:
        with os.scandir(seg_dir) as it:
            top = {e.name: e for e in it}
    except (FileNotFoundError, NotADirectoryError):
        return {}, [Problem(seg_dir, "committed segment directory is missing")]
    if not (set(features) <= set(info.checksums) if partial else set(info.checksums) == set(features)):
        fields = f"{sorted(info.checksums)}, not the schema's {sorted(features)}"
        return {}, [Problem(seg_dir, f"commit record lists fields {fields}")]
    problems = [Problem(os.path.join(seg_dir, n), _LINK) for n, e in sorted(top.items()) if e.is_symlink()]
    layouts: dict[str, ArrayLayout] = {}
    total = 0
    group = top.get("zarr.json")
    if group is None:
        problems.append(Problem(os.path.join(seg_dir, "zarr.json"), "group metadata is missing"))
    elif not group.is_symlink():
        total += group.stat(follow_symlinks=False).st_size
    for name, spec in features.items():
        array_dir = os.path.join(seg_dir, name)
        entry = top.get(name)
        if entry is None or not entry.is_dir(follow_symlinks=False):
            if entry is None or not entry.is_symlink():
                problems.append(Problem(array_dir, "array directory is missing"))
            continue
        meta_path = os.path.join(array_dir, "zarr.json")
        try:
            raw = _read_plain(meta_path)
        except FileNotFoundError:
            problems.append(Problem(meta_path, "array metadata is missing"))
            continue
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            problems.append(Problem(meta_path, _LINK))
            continue
        total += len(raw)
        try:
            meta = json.loads(raw)
        except ValueError:
            problems.append(Problem(meta_path, "damaged array metadata (not valid JSON)"))
            continue
        why = _meta_problem(meta, spec, info.n_frames)
        if why:
            problems.append(Problem(meta_path, why))
            continue
        chunk_frames = meta["chunk_grid"]["configuration"]["chunk_shape"][0]
        sep = meta["chunk_key_encoding"].get("configuration", {}).get("separator", "/")
        suffix = "".join(f"{sep}0" for _ in spec.shape)
        prefix = os.path.join(array_dir, "c")
        chunks = tuple(f"{prefix}{sep}{i}{suffix}" for i in range(math.ceil(info.n_frames / chunk_frames)))
        missing: set[str] = set()
        try:
            for path in chunks:
                size = _chunk_size(path)
                if size is None:
                    missing.add(path)
                else:
                    total += size
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            problems.append(Problem(exc.filename, _LINK))
            continue
        layouts[name] = ArrayLayout(
            field=name,
            dir=array_dir,
            shape=(info.n_frames, *spec.shape),
            dtype=np.dtype(spec.dtype).newbyteorder("<"),
            chunk_frames=chunk_frames,
            chunks=chunks,
            missing=frozenset(missing),
            encoding=spec.encoding,
        )
    if not problems and not partial and total != info.nbytes:
        # A chunk zarr never wrote (all fill values) is not counted in the record's byte count
        # either; a missing chunk the record counted was deleted.
        gone = sorted(p for lay in layouts.values() for p in lay.missing)
        if gone:
            problems.extend(
                Problem(p, "chunk file is missing (the commit record counts its bytes)") for p in gone
            )
        else:
            problems.extend(_locate_size_damage(layouts))
        if not problems:
            problems.append(
                Problem(seg_dir, f"files hold {total} bytes, the commit record says {info.nbytes}")
            )
    return layouts, problems


def _locate_size_damage(layouts: Mapping[str, ArrayLayout]) -> list[Problem]:
    """The chunk files whose crc32c fails (called only when the byte count is off)."""
    found = []
    for layout in layouts.values():
        for i, path in enumerate(layout.chunks):
            if path in layout.missing:
                continue
            if layout.encoding is not None:
                try:
                    _shard_chunks(layout, i, _read_plain(path))
                except CorruptStoreError as exc:
                    found.append(Problem(path, str(exc).removeprefix(f"{path}: ")))
            elif not _chunk_ok(_read_plain(path)):
                found.append(Problem(path, "damaged chunk (crc32c mismatch)"))
    return found


def _shard_chunks(layout: ArrayLayout, i: int, data: bytes) -> list[memoryview]:
    """The chunks (codec bytes + crc32c) of shard file ``i``, in frame order, every crc32c checked."""
    path = layout.chunks[i]
    size = index_nbytes(layout.chunk_frames)
    view = memoryview(data)
    index = shard_index(
        view[-size:] if len(view) >= size else b"", len(view) - size, layout.frames_in(i), path
    )
    chunks = [view[o : o + k] for o, k in index]
    from odsd.store.image_arrays import check_chunk

    for j, chunk in enumerate(chunks):
        check_chunk(chunk, path, i * layout.chunk_frames + j)
    return chunks


def _chunk_ok(data: bytes) -> bool:
    return len(data) >= 4 and crc32c.crc32c(memoryview(data)[:-4]) == int.from_bytes(data[-4:], "little")


def decode_array(layout: ArrayLayout) -> np.ndarray:
    """The array's values, decoded from its chunk files with the committed layout.

    Missing chunks are left at the fill value 0 (the caller decides, by the record's crc32,
    whether that is the committed data); a chunk whose crc32c or decoded size is wrong raises.
    """
    return decode_checked(layout)[0]


def decode_checked(layout: ArrayLayout) -> tuple[np.ndarray, str]:
    """:func:`decode_array` and the checksum to compare with the commit record's for this field.

    Plain fields: the crc32 of the decoded values; image fields: the crc32 of their encoded
    chunks in frame order (:func:`~odsd.store.image_arrays.chunks_checksum`).
    """
    if layout.encoding is not None:
        return _decode_image(layout)
    values = _decode_plain(layout)
    return values, frame_checksum(values)


def _decode_image(layout: ArrayLayout) -> tuple[np.ndarray, str]:
    out = np.zeros(layout.shape, dtype=layout.dtype)
    assert layout.encoding is not None
    crc_chunks: list[memoryview] = []
    for i, path in enumerate(layout.chunks):
        if path in layout.missing:
            continue
        try:
            data = _read_plain(path)
        except OSError as exc:
            raise CorruptStoreError(f"{path}: cannot read shard ({exc.strerror})") from exc
        chunks = _shard_chunks(layout, i, data)
        lo = i * layout.chunk_frames
        where = [(path, lo + j) for j in range(len(chunks))]
        decode_chunks(
            chunks, layout.encoding, layout.shape[1:], layout.dtype, out[lo : lo + len(chunks)], where
        )
        crc_chunks.extend(chunks)
    return out, chunks_checksum(crc_chunks)


def _decode_plain(layout: ArrayLayout) -> np.ndarray:
    n = layout.shape[0]
    out = (np.zeros if layout.missing else np.empty)(layout.shape, dtype=layout.dtype)
    if n == 0 or out.size == 0:
        return out
    flat = out.reshape(-1).view(np.uint8)
    row = out.nbytes // n
    chunk_bytes = layout.chunk_frames * row
    for i, path in enumerate(layout.chunks):
        if path in layout.missing:
            continue
        raw = read_chunk(path, chunk_bytes)
        lo = i * layout.chunk_frames * row
        hi = min(flat.size, lo + chunk_bytes)
        flat[lo:hi] = np.frombuffer(raw, dtype=np.uint8, count=hi - lo)
    return out


def read_chunk(path: str, nbytes: int) -> bytes:
    """The decompressed bytes of one committed bytes→zstd→crc32c chunk, checked to be ``nbytes`` long."""
    try:
        data = _read_plain(path)
    except OSError as exc:
        raise CorruptStoreError(f"{path}: cannot read chunk ({exc.strerror})") from exc
    if not _chunk_ok(data):
        raise CorruptStoreError(f"{path}: damaged chunk (crc32c mismatch)")
    try:
        raw = _ZSTD.decode(memoryview(data)[:-4])
    except Exception as exc:
        raise CorruptStoreError(f"{path}: damaged chunk (cannot decompress: {exc})") from exc
    if len(raw) != nbytes:
        raise CorruptStoreError(f"{path}: chunk holds {len(raw)} bytes, the committed layout {nbytes}")
    return raw


def checked_layouts(
    root: Path,
    info: SegmentInfo,
    features: Mapping[str, FeatureSpec],
    *,
    root_real: str | None = None,
    partial: bool = False,
) -> dict[str, ArrayLayout]:
    """:func:`check_segment`, raising :class:`CorruptStoreError` with its first problem."""
    try:
        layouts, problems = check_segment(root, info, features, root_real=root_real, partial=partial)
    except OSError as exc:
        raise StoreError(f"{exc.filename or root / info.path}: cannot read ({exc.strerror})") from exc
    if problems:
        raise CorruptStoreError(str(problems[0]))
    return layouts


def read_verified(layout: ArrayLayout, info: SegmentInfo) -> np.ndarray:
    """One field of a checked segment, proven equal to the committed data by the record's crc32."""
    values, checksum = decode_checked(layout)
    if checksum != info.checksums[layout.field]:
        if layout.missing:
            raise CorruptStoreError(
                f"{min(layout.missing)}: chunk file is missing and its fill values are not the committed data"
            )
        raise CorruptStoreError(f"{layout.dir}: data differs from the commit record's checksum")
    return values


def read_for_copy(layout: ArrayLayout, info: SegmentInfo) -> np.ndarray | EncodedFrames:
    """A field's committed values to write into another segment (compaction), proven by the record.

    Image fields come back as their encoded chunks, every crc32c and the record's checksum
    checked, so a lossy frame is copied as it was committed, never decoded and re-encoded.
    """
    if layout.encoding is None:
        return read_verified(layout, info)
    if layout.missing:
        raise CorruptStoreError(f"{min(layout.missing)}: shard file is missing")
    chunks: list[memoryview] = []
    for i, path in enumerate(layout.chunks):
        try:
            data = _read_plain(path)
        except OSError as exc:
            raise CorruptStoreError(f"{path}: cannot read shard ({exc.strerror})") from exc
        chunks.extend(_shard_chunks(layout, i, data))
    if chunks_checksum(chunks) != info.checksums[layout.field]:
        raise CorruptStoreError(f"{layout.dir}: data differs from the commit record's checksum")
    return EncodedFrames(chunks, layout.shape)
