"""How log documents are encoded: canonical JSON with an embedded sha256, so damage is detectable.

Commit records, checkpoints and the archive index are all stored this way (and an archive holds
one encoded record per line)::

    data = encode_document(record)            # canonical JSON + "\\n", checksum inside
    body = decode_document(path, data)        # dict, or CorruptStoreError naming path
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pydantic import BaseModel

from odsd.store.errors import CorruptStoreError


def canonical(body: dict) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def encode_document(model: BaseModel) -> bytes:
    """Serialize with an embedded sha256 over the canonical body, so damage is detectable.

    The file is the canonical (sorted, compact) JSON itself, which keeps encoding on json's C
    encoder: an indented dump of a 256-episode record costs ~40 ms in pure Python. It holds no
    newline but the last byte, so documents can also be packed one per line.
    """
    body = model.model_dump(mode="json")
    body["checksum"] = ""
    body["checksum"] = hashlib.sha256(canonical(body)).hexdigest()
    return canonical(body) + b"\n"


def decode_document(path: Path | str, data: bytes, what: str = "record") -> dict:
    """The body of an encoded document, after checking its embedded checksum."""
    try:
        body = json.loads(data)
    except ValueError as exc:  # JSONDecodeError, or UnicodeDecodeError for bytes that are not UTF-8
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
        raise CorruptStoreError(f"{path}: damaged {what} (not valid JSON: {reason})") from exc
    except RecursionError as exc:
        raise CorruptStoreError(f"{path}: damaged {what} (nested too deeply)") from exc
    if not isinstance(body, dict) or "checksum" not in body:
        raise CorruptStoreError(f"{path}: damaged {what} (no checksum field)")
    stored = body["checksum"]
    body["checksum"] = ""
    if hashlib.sha256(canonical(body)).hexdigest() != stored:
        raise CorruptStoreError(f"{path}: damaged {what} (checksum mismatch)")
    body["checksum"] = stored
    return body
