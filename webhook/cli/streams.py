"""stdout as the contract needs it: a write that does not arrive is a failure, never a pass.

A CI step reads `trainadmit check`'s exit code; `check … | head -1` closes the pipe while `check`
is still writing. Python then raises BrokenPipeError (or OSError for a full disk), and at exit it
flushes stdout again and prints "Exception ignored …". Every command's output goes through
``GuardedStdout``, which turns any failed write or flush into ``StdoutClosed``; `main` reports it as
one line on stderr with exit code 2 (the output is incomplete, so nothing was verified) and points
the file descriptor at /dev/null so the interpreter's final flush cannot fail again.
"""

from __future__ import annotations

import os
import sys
from typing import IO, Any


class StdoutClosed(Exception):
    """stdout stopped taking output before the command finished writing."""

    def __init__(self, cause: OSError | None):
        reason = os.strerror(cause.errno) if cause is not None and cause.errno else "closed"
        super().__init__(reason)


class GuardedStdout:
    """A text stream in front of the real stdout whose failed writes raise ``StdoutClosed``."""

    def __init__(self, stream: IO[str]):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except (BrokenPipeError, OSError, ValueError) as exc:  # ValueError: write to a closed file
            raise StdoutClosed(exc if isinstance(exc, OSError) else None) from exc

    def flush(self) -> None:
        try:
            self._stream.flush()
        except (BrokenPipeError, OSError, ValueError) as exc:
            raise StdoutClosed(exc if isinstance(exc, OSError) else None) from exc

    def __getattr__(self, name: str) -> Any:  # encoding, fileno, isatty, … as the real stream has them
        return getattr(self._stream, name)


def silence(stream: IO[str] | None) -> None:
    """Point ``stream``'s file descriptor at /dev/null and drop what it buffered, so that the
    interpreter's flush at exit has nowhere to fail (a pipe whose reader is gone)."""
    if stream is None:
        return
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a file (a test's StringIO): nothing is flushed at exit
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def stdout_usable() -> bool:
    """False when the process was started with file descriptor 1 closed (``>&-``): Python then
    sets sys.stdout to None and print() drops everything silently."""
    return sys.stdout is not None
