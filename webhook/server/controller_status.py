"""What the controllers report, readable by every worker's ``/readyz``.

The Lease-elected loops (PodGroup reconciler, preflight status, certificate controller, the ungater) run as
threads of the controllers' process (``controller_process``); ``/readyz`` is answered by the workers gunicorn
forks from the main process. Both are forked from it, so memory it mapped as shared before is shared by all: each
controller gets a fixed slot, created before the first fork, that it writes and every worker reads.
"""

from __future__ import annotations

import ctypes
import multiprocessing
from collections.abc import Iterable

SLOT_BYTES = 1024  # one problem line; a longer one is cut


class ControllerStatus:
    """Each controller's current problem (none: working, or not its turn to work)."""

    def __init__(self, names: Iterable[str]) -> None:
        self._slots = {name: multiprocessing.Array(ctypes.c_char, SLOT_BYTES) for name in names}

    def set(self, name: str, problem: str | None) -> None:
        data = (problem or "").encode()[: SLOT_BYTES - 1]
        slot = self._slots[name]
        with slot.get_lock():
            slot.value = data

    def problem(self, name: str) -> str | None:
        slot = self._slots[name]
        with slot.get_lock():
            value = slot.value
        return value.decode(errors="replace") or None

    def problems(self) -> list[str]:
        """Every current problem, as ``name: problem``."""
        return [f"{name}: {text}" for name in self._slots if (text := self.problem(name))]
