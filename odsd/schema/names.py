"""Names that become paths inside a store, and the data paths commit records may hold.

A run id becomes ``runs/<run_id>/``, a writer id ``segments/<writer_id>/``; both must be one
plain path component. A record's segment path (``segments/<writer_id>/<name>``,
``shards/<name>``) must stay inside the store: relative, every component such a plain name (no
``.``/``..``, no empty component).
"""

from __future__ import annotations

import functools
import re

PARTIAL_SUFFIX = ".partial"
"""Names ending like this are temporaries that ``fsck --repair`` deletes."""
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")


def name_problem(value: str) -> str | None:
    """Why ``value`` cannot be a run id, writer id or other single path component; None if it can."""
    if not value:
        return "must not be empty"
    if not _NAME_RE.match(value):
        return "must be 1-128 characters of letters, digits, '_', '-' and '.', not starting with '.' or '-'"
    if value.endswith(PARTIAL_SUFFIX):
        return f"must not end with {PARTIAL_SUFFIX!r} (the suffix of temporary files)"
    return None


def check_name(value: str, what: str) -> str:
    """``value`` if it is a valid single path component, else ValueError naming ``what``."""
    problem = name_problem(value)
    if problem:
        raise ValueError(f"{what} {value!r} {problem}")
    return value


@functools.lru_cache(maxsize=8192)
def check_data_path(path: str) -> str:
    """``path`` if it is a segment or shard path inside the store, else ValueError.

    Cached: every episode entry of a record names its segment, so opening a store validates
    the same few paths many times.
    """
    parts = path.split("/")
    if path.startswith("/") or len(parts) > 8:
        raise ValueError(f"segment path {path!r} is not a relative path inside the store")
    for part in parts:
        if name_problem(part):
            raise ValueError(
                f"segment path {path!r} has an invalid component {part!r} (it must stay inside the store)"
            )
    return path
