"""The exception hierarchy every odsd error derives from.

The CLI prints any :class:`OdsdError` as one line and exits with its ``exit_code``.
"""

from __future__ import annotations

import errno
import os
from typing import TypeVar


class OdsdError(Exception):
    """Base of every error odsd reports as one line."""

    exit_code: int = 1


class ConfigError(OdsdError):
    """A user-supplied configuration value or flag is invalid."""

    exit_code = 2


class StorageError(OdsdError):
    """The filesystem refused a write: no space left, quota exceeded, read-only, I/O error, no permission."""

    exit_code = 6


E = TypeVar("E", bound="OdsdError")

# errno values meaning "this storage cannot take the write now", not a bug in odsd.
STORAGE_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EFBIG, errno.EACCES, errno.EPERM}
)


def as_storage_error(exc: BaseException) -> StorageError | None:
    """``exc`` as a one-line :class:`StorageError` when it is an OSError of :data:`STORAGE_ERRNOS`."""
    if isinstance(exc, StorageError):
        return exc
    return _one_line(exc, STORAGE_ERRNOS, StorageError, "cannot write")


def _one_line(exc: BaseException, errnos: frozenset[int], cls: type[E], what: str) -> E | None:
    """``cls("<what>: <strerror> (<file>)")`` caused by ``exc`` when it is an OSError of ``errnos``."""
    if not isinstance(exc, OSError) or exc.errno not in errnos:
        return None
    where = exc.filename if exc.filename is not None else "?"
    error = cls(f"{what}: {os.strerror(exc.errno).lower()} ({where})")
    error.__cause__ = exc
    return error


class PathError(OdsdError):
    """A path that cannot be used as given: a regular file where a directory must be, a name too long."""

    exit_code = 3


PATH_ERRNOS = frozenset({errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.ENAMETOOLONG, errno.ELOOP})


def as_user_error(exc: BaseException) -> OdsdError | None:
    """``exc`` as a one-line odsd error when it is an OSError a user's environment causes, else None."""
    storage = as_storage_error(exc)
    if storage is not None:
        return storage
    return _one_line(exc, PATH_ERRNOS, PathError, "cannot use path")
