"""The memory a review will take while it is parsed and decided, and a per-process budget for it.

Why bytes are not enough: a review costs a multiple of its size that depends on its shape, measured from
20x (long lists of short strings) and 35x (env vars) to 75x (lists of empty objects) and 116x (nested
lists), because every JSON value becomes a Python object and, for the custom rules, a CEL value too. A
few large reviews of a dense shape could take a worker past the container's limit. The
estimate below is a linear bound fitted over those shapes (it over-estimates the common ones 1.5-4x and
under-estimates none of them): counting brackets, commas and colons is a few C-speed scans of the body.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

# bytes of memory per byte of body, per array/object, per element separator, per object member
PER_BYTE, PER_CONTAINER, PER_VALUE, PER_MEMBER = 10, 240, 180, 150


def estimate(body: bytes) -> int:
    """Upper bound of the memory (bytes) parsing ``body`` and deciding the review takes at its peak."""
    return (PER_BYTE * len(body) + PER_CONTAINER * (body.count(b"{") + body.count(b"["))
            + PER_VALUE * body.count(b",") + PER_MEMBER * body.count(b":"))


class TooCostly(Exception):
    """The review alone would take more than the whole budget."""


class Busy(Exception):
    """The budget did not free up within the wait."""


class MemoryBudget:
    """Requests of one process hold their estimate while they are parsed and decided; one that does not fit
    waits for others to finish. A typical review (a few KB: an estimate of about 1 MB) waits only when large
    ones hold nearly all of it."""

    def __init__(self, limit: int, wait_timeout: float):
        self.limit, self.wait_timeout = limit, wait_timeout
        self.held = 0
        self._cond = threading.Condition()

    @contextmanager
    def hold(self, cost: int) -> Iterator[None]:
        if cost > self.limit:
            raise TooCostly(f"this review would take about {cost // 2**20} MiB of memory to decide; the server "
                            f"allows {self.limit // 2**20} MiB per worker (a denser object than any Kubernetes "
                            "object of this size)")
        deadline = time.monotonic() + self.wait_timeout
        with self._cond:
            while self.held and self.held + cost > self.limit:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Busy("too many large reviews are being decided; retry")
                self._cond.wait(left)
            self.held += cost
        try:
            yield
        finally:
            with self._cond:
                self.held -= cost
                self._cond.notify_all()
