"""The server's log: one JSON object per line on stderr, whoever writes it.

Log collectors parse each line as one record; a plain-text line among them (gunicorn's own messages, a
library's ``warnings.warn``) is either dropped or breaks the parser. So every writer goes through here:
``emit`` for the server's own events, ``JsonFormatter`` for gunicorn's loggers (``gunicorn_app.JsonLogger``) and
for Python warnings (``capture_warnings``).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
import warnings
from typing import Any


def record(event: str, **fields: Any) -> dict[str, Any]:
    """A log record: its time, its event name, then its fields."""
    return {"ts": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"), "event": event, **fields}


def write(entry: dict[str, Any]) -> None:
    """Write one record as one line (a value JSON cannot hold is written as its ``str``)."""
    sys.stderr.write(json.dumps(entry, separators=(",", ":"), default=str) + "\n")
    sys.stderr.flush()


def emit(event: str, **fields: Any) -> None:
    """One structured JSON log line."""
    write(record(event, **fields))


class JsonFormatter(logging.Formatter):
    """A ``logging`` record as one JSON line: ``event`` names its source (``gunicorn``, ``warning``), a
    traceback (gunicorn logs a worker's crash with one) goes into a field instead of lines of its own."""

    def __init__(self, event: str) -> None:
        super().__init__()
        self.event = event

    def format(self, rec: logging.LogRecord) -> str:
        fields: dict[str, Any] = {"level": rec.levelname.lower(), "message": rec.getMessage()}
        if rec.exc_info:
            fields["traceback"] = self.formatException(rec.exc_info)
        return json.dumps(record(self.event, **fields), separators=(",", ":"), default=str)


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: Any = None, line: str | None = None) -> None:
    emit("warning", category=category.__name__, message=str(message), at=f"{filename.rsplit('/', 2)[-1]}:{lineno}")


def capture_warnings() -> None:
    """Python warnings (``warnings.warn`` of any library) become JSON lines instead of two lines of text."""
    warnings.showwarning = _show_warning
