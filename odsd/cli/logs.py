"""How the CLI writes log records: ``odsd: <message>`` lines, or one JSON object per line (``--json-logs``).

``use_json_logs()`` switches every handler of the root logger to :class:`JsonFormatter`, routes
``warnings.warn`` through logging, and makes :func:`emit_error` write the final error as a JSON
line too, so a process run with ``--json-logs`` writes nothing on stderr that is not JSON.
"""

from __future__ import annotations

import json
import logging
import math
import sys
from datetime import UTC, datetime
from typing import Any

PLAIN_FORMAT = "odsd: %(message)s"

_json_mode = False


class JsonFormatter(logging.Formatter):
    """``{"kind": "log", "time", "level", "logger", "message"}`` (plus ``exception`` when there is one)."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "kind": "log",
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


def configure_logging() -> None:
    """The default: INFO and above as ``odsd: <message>`` on stderr, plain text (undoes :func:`use_json_logs`)."""
    global _json_mode
    _json_mode = False
    logging.captureWarnings(False)
    for handler, formatter in _replaced.items():
        handler.setFormatter(formatter)  # type: ignore[arg-type]
    _replaced.clear()
    logging.basicConfig(level=logging.INFO, format=PLAIN_FORMAT)


_replaced: dict[logging.Handler, logging.Formatter | None] = {}


def use_json_logs() -> None:
    """From now on, log records, warnings and the final error line are JSON lines on stderr."""
    global _json_mode
    _json_mode = True
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(level=logging.INFO, format=PLAIN_FORMAT)
    for handler in root.handlers:
        if not isinstance(handler.formatter, JsonFormatter):
            _replaced[handler] = handler.formatter
            handler.setFormatter(JsonFormatter())
    logging.captureWarnings(True)


def json_logs_enabled() -> bool:
    return _json_mode


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def json_line(record: dict[str, Any]) -> str:
    """``record`` as one line of strict JSON (numpy scalars as numbers, NaN and infinities as null)."""
    return json.dumps(_finite(json.loads(json.dumps(record, default=float))), allow_nan=False)


def emit_error(message: str, exit_code: int) -> None:
    """The one line a failing command leaves on stderr: ``odsd: error: …`` or its JSON form."""
    if _json_mode:
        record = {
            "kind": "error",
            "time": datetime.now(UTC).isoformat(),
            "level": "error",
            "message": message,
            "exit_code": exit_code,
        }
        print(json_line(record), file=sys.stderr, flush=True)
    else:
        print(f"odsd: error: {message}", file=sys.stderr, flush=True)
