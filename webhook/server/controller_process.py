"""The controllers (the Lease-elected loops, the ungater, the cluster report) in a process of their own.

Why: gunicorn forks its workers from the main process, at start and whenever one is replaced. ``fork`` copies
the memory of every thread but runs only the forking one, so a lock another thread held at that instant (a module
it was importing, OpenSSL's, a connection pool's) stays held in the worker forever; and gunicorn does not time
out a worker that has not finished booting (its heartbeat file starts out with a wall-clock time that its
monotonic check never passes). A controller thread's first pass right after start-up (imports, TLS, lists) is
exactly when the first worker is forked: so the main process keeps no thread of its own. It forks this process
first, while it still has none, and every thread a controller starts runs here.

The process shares with the workers only what was mapped as shared before it was forked (``ControllerStatus``)
and the multi-process metrics directory. It ends when the main process does: SIGTERM from the main process at
shutdown, the kernel's parent-death signal if the main process is killed outright, and a check of its parent
every second for the instant between ``fork`` and that signal being armed. If it dies on its own, the main
process (single-threaded, so forking is safe) starts it again from the same start-up state, with one line.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Iterable

# the process's name in /proc/<pid>/comm (ps, top, and the test suite's count of workers tell it from them)
NAME = b"trainadmit-ctl"
_PR_SET_PDEATHSIG, _PR_SET_NAME = 1, 15


def _prctl(option: int, value: int | bytes) -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


class ControllerProcess:
    """``main(stop)`` in a forked process: it starts the controllers' threads and returns; the process then lives
    until ``stop`` is set (SIGTERM or SIGINT) or its parent is gone."""

    def __init__(self, main: Callable[[threading.Event], None], log: Callable[..., None],
                 close_in_child: Callable[[], Iterable[int]] = tuple) -> None:
        self.main, self.log = main, log
        # the listeners, as the main process holds them when the child is forked: only the workers serve them (a
        # copy held here would keep the port taking connections that nobody answers after the server stops)
        self.close_in_child = close_in_child
        self.pid: int | None = None
        self._alive_fd: int | None = None  # read end of a pipe whose write end only the child holds
        self._restart_failing = False

    def start(self) -> int:
        parent = os.getpid()
        read_fd, write_fd = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(read_fd)
            os.close(write_fd)
            raise
        if pid == 0:  # pragma: no cover - the child's coverage is not collected; the tests watch what it does
            os.close(read_fd)
            self._run_child(parent)
        os.close(write_fd)
        if self._alive_fd is not None:
            os.close(self._alive_fd)
        self.pid, self._alive_fd = pid, read_fd
        return pid

    def _run_child(self, parent: int) -> None:
        status = 0
        try:
            _prctl(_PR_SET_NAME, NAME)
            _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
            if self._alive_fd is not None:
                os.close(self._alive_fd)  # the previous child's pipe: the main process's, not this one's
            for fd in self.close_in_child():
                with contextlib.suppress(OSError):
                    os.close(fd)
            stop = threading.Event()
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: stop.set())
            for sig in (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):  # the main process's, not for this one
                signal.signal(sig, signal.SIG_IGN)
            self.main(stop)
            while not stop.wait(1.0):
                if os.getppid() != parent:
                    break
        except BaseException as exc:  # whatever happens, leave through os._exit, never up the stack
            with contextlib.suppress(BaseException):
                self.log("controllers_failed", error=repr(exc))
            status = 1
        os._exit(status)  # never the main process's cleanup (gunicorn's, the metrics directory's)

    def running(self) -> bool:
        """Whether the child still runs (its end of the pipe is open): gunicorn reaps every child, this one too,
        so its exit status is not ours to read; the pipe's end of file is."""
        if self._alive_fd is None:
            return False
        readable, _, _ = select.select([self._alive_fd], [], [], 0)
        return not readable

    def keep_running(self) -> None:
        """Start the process again if it has ended (called from the main process's loop)."""
        if self.pid is not None and not self.running():
            previous = self.pid
            self._mark_dead(previous)
            try:
                self.start()
            except OSError as exc:  # no process to be had now (EAGAIN, ENOMEM): the next loop tries again
                if not self._restart_failing:  # logged when it starts failing, not on every loop
                    self.log("controllers_restart_failed", previous_pid=previous, error=str(exc))
                self._restart_failing = True
                return
            self._restart_failing = False
            self.log("controllers_restarted", previous_pid=previous, pid=self.pid)

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; returns once it has ended."""
        if self.pid is None:
            return
        pid, self.pid = self.pid, None
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self._alive_fd is not None and time.monotonic() < deadline:
            if select.select([self._alive_fd], [], [], 0.05)[0]:
                break
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if self._alive_fd is not None:
            os.close(self._alive_fd)
            self._alive_fd = None
        self._mark_dead(pid)

    @staticmethod
    def _mark_dead(pid: int) -> None:
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            from prometheus_client import multiprocess

            with contextlib.suppress(OSError):
                multiprocess.mark_process_dead(pid)
