"""Giving memory back after large admission requests.

Why RSS stays up after a burst of large reviews although every object is freed: the parsed review (dicts,
lists, strs) lives in pymalloc arenas, which return to the OS only when completely empty, and everything
larger than 512 bytes (the body, the decoded text, big lists and dict tables) comes from glibc malloc. glibc
gives each thread its own arena, and a freed block in the middle of an arena's heap goes back only through
``malloc_trim``; its dynamic mmap threshold also grows to the largest freed block, so later multi-MB bodies
are carved from those arenas instead of being mmap'd and unmapped. With 8 request threads a worker therefore
kept its high-water mark (measured: +165-180 MB after 16 x 2.7 MB reviews; with the trim +45-50 MB).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
import time
from collections.abc import Callable
from typing import Any

TRIM_MAX_INTERVAL = 10.0  # under a steady stream of large requests, still trim this often


def _load_trim() -> Any:
    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # musl, macOS: no malloc_trim
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_malloc_trim = _load_trim()


def malloc_trim() -> bool:
    """Return free glibc heap pages to the OS (all arenas). False where libc has no ``malloc_trim``."""
    if _malloc_trim is None:
        return False
    _malloc_trim(0)
    return True


class LargeRequestTrimmer:
    """Trims once the last large request in flight in this process has been answered.

    Trimming while other large requests are still being parsed gives back little (their memory is in use)
    and what they free afterwards would stay; so the trim waits for the burst to end, or runs every
    ``max_interval`` seconds if large requests never stop. A trim costs a few milliseconds and runs after the
    response was written, in the request's own thread.
    """

    def __init__(self, is_large: Callable[[int], bool], max_interval: float = TRIM_MAX_INTERVAL,
                 trim: Any = malloc_trim):
        self.is_large, self.max_interval, self._trim = is_large, max_interval, trim
        self._lock = threading.Lock()
        self._inflight = 0
        self._last = time.monotonic()
        self.trims = 0

    def started(self, body_bytes: int) -> bool:
        """A request with this body size starts; True when it counts as large (pass that to ``finished``)."""
        if not self.is_large(body_bytes):
            return False
        with self._lock:
            self._inflight += 1
        return True

    def finished(self, large: bool) -> None:
        """A request answered; trims when it was the last large one in flight (or the interval passed)."""
        if not large:
            return
        with self._lock:
            self._inflight -= 1
            now = time.monotonic()
            due = self._inflight == 0 or now - self._last >= self.max_interval
            if due:
                self._last = now
        if due and self._trim():
            self.trims += 1
