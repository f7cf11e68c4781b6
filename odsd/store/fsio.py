"""Small filesystem primitives: fsync, atomic replace and put-if-absent publication."""

from __future__ import annotations

import contextlib
import functools
import os
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PARTIAL_SUFFIX = ".partial"


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """fsync every file below ``root``, then every directory (children first).

    Files are synced concurrently: the kernel can merge their journal commits, which on a
    typical ext4 disk makes a segment's ~20 fsyncs cost little more than one.
    """
    files: list[Path] = []
    dirs: list[Path] = []
    for dirpath, _dirnames, filenames in os.walk(root, topdown=False):
        files.extend(Path(dirpath) / name for name in filenames)
        dirs.append(Path(dirpath))
    if len(files) > 1:
        list(_fsync_pool().map(fsync_file, files))
    elif files:
        fsync_file(files[0])
    for directory in dirs:
        fsync_dir(directory)


@functools.cache
def _fsync_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=8, thread_name_prefix="odsd-fsync")


def temp_path(final: Path) -> Path:
    """A unique sibling of ``final`` that readers ignore (``.<name>.<rand>.partial``)."""
    return final.with_name(f".{final.name}.{uuid.uuid4().hex[:8]}{PARTIAL_SUFFIX}")


def _write_file(path: Path, data: bytes, *, durable: bool) -> None:
    try:
        with open(path, "wb") as fh:
            fh.write(data)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(path)  # write() and fsync() errors name no file
        raise


def write_atomic(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new content, never a mix."""
    tmp = temp_path(path)
    try:
        _write_file(tmp, data, durable=durable)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)  # a full disk leaves no temporary behind
        raise
    if durable:
        fsync_dir(path.parent)


def put_if_absent(path: Path, data: bytes, *, durable: bool = True) -> bool:
    """Publish ``data`` at ``path`` only if nothing is there yet; return whether it was published.

    The content is written and synced under a temporary name first and then hard-linked into
    place, so the published file is never partially written and an existing one is never
    replaced.
    """
    tmp = temp_path(path)
    try:
        _write_file(tmp, data, durable=durable)
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    if durable:
        fsync_dir(path.parent)
    return True


def require_writable(root: Path) -> None:
    """Raise a one-line :class:`~odsd.errors.StorageError` (exit 6) unless ``root`` can be written.

    For commands that change a store: on a read-only filesystem they would otherwise fail half-way,
    or (with nothing to do) report success for a store they could never have changed.
    """
    from odsd.errors import StorageError

    if os.access(root, os.W_OK):
        return
    read_only = bool(os.statvfs(root).f_flag & os.ST_RDONLY)
    why = "read-only file system" if read_only else "permission denied"
    raise StorageError(f"cannot write: {why} ({root})")
