"""``kill -PWR <pid>``: every thread's Python stack of that process, written to stderr.

A server that stops answering (a worker that never reaches its loop, a master that stops forking) leaves no line
saying where it is; a debugger may not be in the image. faulthandler writes from the signal handler itself, in C,
so the dump comes even when the process's main thread is blocked in a lock or a system call and no Python signal
handler could run. SIGPWR because gunicorn's master and workers use every signal a user would reach for first (HUP,
INT, QUIT, TERM, TTIN, TTOU, USR1, USR2, WINCH, ABRT, CHLD) and none of them use SIGPWR; the disposition is kept
across gunicorn's fork, so registering once in the main process covers its workers.
"""

from __future__ import annotations

import faulthandler
import signal
import sys

DUMP_SIGNAL = signal.SIGPWR


def dump_on_signal() -> None:
    """Register the dump (idempotent: faulthandler replaces its own registration)."""
    faulthandler.register(DUMP_SIGNAL, file=sys.stderr, all_threads=True, chain=False)
