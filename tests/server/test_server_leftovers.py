"""No server outlives the test that started it: when the test fails, when pytest is interrupted (Ctrl-C, a
CI job cancelled), and when pytest itself is killed. Each case runs a real pytest on a test that starts a
real server (master and two workers) and then fails, hangs or is killed, and looks for those processes
afterwards, by pid (before suite_processes, a failed rotation test left its server running for minutes).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys

import pytest
from support import suite_processes
from support.paths import ROOT
from support.server import alive, wait_until

INNER = '''
import json, os, time
from pathlib import Path
from support.paths import POLICIES
from support.server import Server, issue_certs, wait_until


def started(tmp_path):
    server = Server(POLICIES, issue_certs(tmp_path / "certs"), workers=2)
    server.wait_ready()
    workers = wait_until(lambda: len(w := server.worker_pids()) == 2 and w, 30, "two workers")
    target = Path(os.environ["LEFTOVER_PIDS"])  # written whole, then renamed: the outer test polls for it
    partial = target.with_suffix(".partial")
    assert server.controllers_pid() is not None
    partial.write_text(json.dumps([server.proc.pid, *server.children()]))  # the workers and the controllers' process
    partial.rename(target)


def test_fails(tmp_path):
    started(tmp_path)
    assert False, "this test fails with its server running"


def test_hangs(tmp_path):
    started(tmp_path)
    time.sleep(600)
'''


@pytest.mark.parametrize("case", ["fails", "interrupted", "killed"])
def test_no_server_outlives_its_test(tmp_path, case):
    inner = tmp_path / "test_inner.py"
    inner.write_text(INNER)
    pids_file = tmp_path / "pids.json"
    env = {**os.environ, "LEFTOVER_PIDS": str(pids_file), "PYTHONPATH": str(ROOT / "tests")}
    env.pop("PYTEST_XDIST_WORKER", None)
    test = "test_fails" if case == "fails" else "test_hangs"
    # SIGINT as at a terminal: an xdist worker ignores it, and what it starts would inherit that
    args = ["-p", "conftest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q", "--rootdir", str(ROOT), "-c",
            str(ROOT / "pyproject.toml"), f"{inner}::{test}"]
    pytest_run = suite_processes.popen(
        [sys.executable, "-c", "import signal, sys, pytest; signal.signal(signal.SIGINT, signal.default_int_handler); "
         f"sys.exit(pytest.main({args!r}))"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    pids: list[int] = []
    try:
        pids = wait_until(lambda: pids_file.exists() and json.loads(pids_file.read_text()), 60,
                          "the inner test did not start its server")
        assert len(pids) == 4 and all(alive(p) for p in pids)  # the main process, 2 workers, the controllers'
        if case == "interrupted":
            pytest_run.send_signal(signal.SIGINT)
        elif case == "killed":
            pytest_run.kill()
        output = pytest_run.communicate(timeout=60)[0].decode(errors="replace")
        if case == "fails":
            assert pytest_run.returncode == 1 and "this test fails with its server running" in output, output
        wait_until(lambda: not any(alive(p) for p in pids), 30,
                   f"left behind after the test {case}: {[p for p in pids if alive(p)]}")
        assert suite_processes.marked(pytest_run.pid) == []  # nothing else the inner suite started either
    finally:  # should cleaning up fail, this test must not leave the inner server behind itself
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


SESSION_INNER = '''
import pytest
from support import suite_processes


@pytest.fixture(scope="session")
def sleeper():
    proc = suite_processes.popen(["sleep", "300"])
    yield proc
    suite_processes.stop(proc)


@pytest.fixture
def lazily(request):
    return request.getfixturevalue("sleeper")


def test_first(lazily):
    assert lazily.poll() is None


def test_second(sleeper):
    assert sleeper.poll() is None, "the session fixture's process was stopped with the first test"
'''


def test_a_session_fixtures_process_outlives_the_test_that_first_asked_for_it(tmp_path):
    """A session fixture a test's setup starts through ``request.getfixturevalue`` (the status reconciler's
    ``cluster`` asks for ``control_plane`` so) is the fixture's to stop, not that test's: stopped with the
    first test, every later test of the session would find the apiserver gone."""
    inner = tmp_path / "test_inner.py"
    inner.write_text(SESSION_INNER)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests")}
    env.pop("PYTEST_XDIST_WORKER", None)
    args = ["-p", "conftest", "-p", "no:cacheprovider", "-p", "no:xdist", "--rootdir", str(ROOT), "-c",
            str(ROOT / "pyproject.toml"), str(inner)]
    run = subprocess.run([sys.executable, "-m", "pytest", *args], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0 and "2 passed" in run.stdout, run.stdout + run.stderr
