"""The processes the suite starts, and how none of them outlives it.

Three layers, because each catches what the one before cannot:

* every server and control-plane process is started in its own process group (``start_new_session``),
  so that stopping one stops what it forked too (gunicorn's workers), and is registered here;
* a process whose test failed or was interrupted before it stopped it is stopped at the end of the test
  (``stop_started_since``, an autouse fixture of conftest) and, for those of session and module fixtures,
  at the end of the session (``sweep``), which also finds, by the marker every child inherits in its
  environment, processes of the suite no one registered;
* should the test process itself die (SIGKILL, a CI timeout), Linux signals each registered child
  (``PR_SET_PDEATHSIG``), which then shuts down as it would at SIGTERM.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

MARKER = "TRAINADMIT_TEST_OWNER"  # the pid of the pytest process whose suite started the process
_STARTED: list[subprocess.Popen] = []
_FIXTURES_OWN: set[int] = set()  # id() of the processes of session and module fixtures


def mark_this_process() -> None:
    """Every process started from here on carries this process's pid in its environment."""
    os.environ[MARKER] = str(os.getpid())


def _die_with_parent(sig: int):
    def preexec() -> None:  # pragma: no cover - runs in the child between fork and exec
        with contextlib.suppress(Exception):
            ctypes.CDLL(None, use_errno=True).prctl(1, sig)  # PR_SET_PDEATHSIG
    return preexec if sys.platform == "linux" else None


def popen(args: list[str], *, death_signal: int = signal.SIGTERM, **kwargs) -> subprocess.Popen:
    """``subprocess.Popen`` in a new process group, signalled when the forking thread dies, registered."""
    proc = subprocess.Popen(args, start_new_session=True, preexec_fn=_die_with_parent(death_signal), **kwargs)
    register(proc)
    return proc


def register(proc: subprocess.Popen) -> None:
    """A process the suite started in its own process group (``start_new_session``)."""
    _STARTED.append(proc)


def started() -> int:
    return len(_STARTED)


def owned_by_a_fixture(since: int) -> None:
    """The processes registered after ``since`` were started by a session- or module-scoped fixture: that
    fixture stops them (the session's sweep should it not), never the test whose setup first asked for it
    (a function fixture's ``request.getfixturevalue("control_plane")``)."""
    _FIXTURES_OWN.update(id(proc) for proc in _STARTED[since:])


def stop(proc: subprocess.Popen, grace: float = 10.0) -> int | None:
    """SIGTERM the process (only the leader: it stops its own children, as at a pod's shutdown), SIGKILL its
    whole group after ``grace`` seconds; reaped. Only a group whose leader is not reaped yet is signalled: an
    unreaped child keeps its pid, so its group id cannot belong to anyone else."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace)
    if proc.returncode is None or _group_alive(proc.pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return proc.returncode


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def stop_started_since(index: int, *, fixtures_own: bool = True) -> list[str]:
    """Stop every process registered after ``index`` that still runs (without ``fixtures_own``, not those a
    session or module fixture started); what was stopped."""
    stopped = []
    for proc in _STARTED[index:]:
        if not fixtures_own and id(proc) in _FIXTURES_OWN:
            continue
        if proc.poll() is None or _group_alive(proc.pid):
            stopped.append(" ".join(map(str, proc.args[:4])) if isinstance(proc.args, list) else str(proc.args))
            stop(proc)
    return stopped


def marked(owner: int | None = None) -> list[int]:
    """Pids of the live processes whose environment carries ``owner``'s marker (default: this process's)."""
    owner = os.getpid() if owner is None else owner
    needle = f"{MARKER}={owner}".encode()
    out = []
    for entry in Path("/proc").glob("[0-9]*"):
        pid = int(entry.name)
        if pid == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and needle in environ.split(b"\0"):
            out.append(pid)
    return out


def sweep(grace: float = 10.0) -> list[int]:
    """End of the session: stop every registered process still running, then every process still carrying
    this process's marker (SIGTERM, SIGKILL after ``grace``); the pids of the latter."""
    stop_started_since(0)
    leftovers = marked()
    for pid in leftovers:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and marked():
        time.sleep(0.05)
    for pid in marked():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return leftovers
