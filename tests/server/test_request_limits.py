"""The server's limits and the small pieces around them, in-process: the limits table and its environment
overrides, the worker's head scan, the memory trimmer's timing, metric label sets, the metrics folder."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from trainadmit.server import metrics, metrics_dir
from trainadmit.server.cost import Busy, MemoryBudget, TooCostly, estimate
from trainadmit.server.limits import MiB, ReadLimits
from trainadmit.server.memory import LargeRequestTrimmer, malloc_trim
from trainadmit.server.settings import load
from trainadmit.server.worker import error_response, parse_head


def test_body_limits_per_webhook_and_their_overrides():
    limits = load(environ={}).limits
    assert (limits.body_limit("/mutate"), limits.body_limit("/validate")) == (4 * MiB, 8 * MiB)
    assert limits.body_limit("/readyz") == limits.body_limit("/mutate/x") == 64 * 1024
    assert limits.largest_body == 8 * MiB
    changed = load(environ={"TRAINADMIT_MAX_BODY_BYTES_MUTATE": "1000", "TRAINADMIT_READ_TIMEOUT": "2.5",
                            "TRAINADMIT_MAX_INFLIGHT_BODY_BYTES": "5000"}).limits
    assert (changed.body_limit("/mutate"), changed.read_timeout, changed.max_inflight_body_bytes) == (1000, 2.5, 5000)
    assert changed.body_limit("/validate") == 8 * MiB


def test_head_scan_reads_what_the_loop_needs():
    h = parse_head(b"POST /validate?timeout=3s HTTP/1.1\r\nHost: x\r\ncontent-length: 12\r\nExpect: 100-continue")
    assert (h.path, h.length, h.chunked, h.expects_continue, h.problem) == ("/validate", 12, False, True, None)
    assert parse_head(b"POST /mutate HTTP/1.1\r\nTransfer-Encoding: chunked").chunked
    assert parse_head(b"POST /mutate HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2").problem
    assert parse_head(b"POST /mutate HTTP/1.1\r\nContent-Length: -1").problem
    assert parse_head(b"GET / HTTP/1.1").length is None


def test_early_responses_are_complete_http():
    raw = error_response(413, "Request Entity Too Large", 'body "x" too large')
    top, _, body = raw.partition(b"\r\n\r\n")
    assert top.startswith(b"HTTP/1.1 413 ") and b"Connection: close" in top
    assert f"Content-Length: {len(body)}".encode() in top and body == b'{"error":"body \'x\' too large"}'


def test_trim_runs_when_the_last_large_request_is_answered():
    assert malloc_trim(), "glibc's malloc_trim is available on the platforms the image runs on"
    trimmer = LargeRequestTrimmer(ReadLimits(small_body_bytes=1000).is_large, max_interval=3600)
    assert trimmer.started(1000) is False
    a, b = trimmer.started(1001), trimmer.started(5000)
    trimmer.finished(a)
    assert trimmer.trims == 0  # b is still in flight: what it frees later would stay
    trimmer.finished(False)
    assert trimmer.trims == 0
    trimmer.finished(b)
    assert trimmer.trims == 1


def test_metric_labels_come_from_closed_sets():
    assert metrics.webhook_label("/mutate") == "mutate" and metrics.webhook_label("/x/y") == "other"
    assert metrics.kind_label("PyTorchJob") == "PyTorchJob" and metrics.kind_label("Pwned") == "other"
    assert metrics.operation_label("UPDATE") == "UPDATE" and metrics.operation_label("PATCH") == "other"


def test_metrics_folder_is_removed_by_its_creator_only(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.delenv(metrics_dir.ENV, raising=False)
    monkeypatch.setattr("tempfile.tempdir", None)  # gettempdir() reads TMPDIR again
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f"{metrics_dir.PREFIX}{int(dead.stdout)}-old"
    live = tmp_path / f"{metrics_dir.PREFIX}{os.getppid()}-other-server"
    stale.mkdir()
    live.mkdir()
    created = metrics_dir.create()
    try:
        assert created is not None and created.is_dir() and os.environ[metrics_dir.ENV] == str(created)
        assert not stale.exists() and live.exists()  # a server that no longer runs / one that does
        metrics_dir.remove(live)
        assert live.exists()
    finally:
        metrics_dir.remove(created)
    assert not created.exists()


def test_a_given_metrics_folder_is_left_alone(monkeypatch, tmp_path):
    monkeypatch.setenv(metrics_dir.ENV, str(tmp_path))
    assert metrics_dir.create() is None


def test_memory_estimate_grows_with_what_costs_memory():
    flat = b'{"a": "' + b"x" * 100_000 + b'"}'
    listy = b"[" + b",".join([b"1"] * 50_000) + b"]"
    nested = b"[" + b",".join([b"[[[{}]]]"] * 10_000) + b"]"
    assert estimate(flat) < estimate(listy) < estimate(nested)  # 100 KB of one string vs 50,000 values
    assert estimate(flat) >= 10 * len(flat)


def test_memory_budget_queues_what_does_not_fit_and_refuses_what_never_will():
    budget = MemoryBudget(limit=100, wait_timeout=0.2)
    with pytest.raises(TooCostly, match="per worker"), budget.hold(101):
        pass
    first_in, release, order = threading.Event(), threading.Event(), []

    def first() -> None:
        with budget.hold(80):
            order.append("first")
            first_in.set()
            release.wait(5)

    holder = threading.Thread(target=first)
    holder.start()
    first_in.wait(5)
    with budget.hold(20):  # fits beside it: never waits
        order.append("small")
    with pytest.raises(Busy), budget.hold(30):
        pass
    release.set()
    holder.join(5)
    with budget.hold(100):  # alone, the whole budget
        order.append("large")
    assert order == ["first", "small", "large"] and budget.held == 0


def test_a_controllers_problem_reaches_a_worker_forked_before_it():
    """The controllers run in a process the main process forked, /readyz in the workers it forked too."""
    from trainadmit.server.controller_status import ControllerStatus

    status = ControllerStatus(["reconciler", "preflight-status"])
    seen_r, seen_w = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the worker
        deadline = time.monotonic() + 10
        while not status.problems() and time.monotonic() < deadline:
            time.sleep(0.01)
        os.write(seen_w, "\n".join(status.problems()).encode() or b"-")
        while status.problems() and time.monotonic() < deadline:
            time.sleep(0.01)
        os._exit(0 if not status.problems() else 1)
    os.close(seen_w)
    status.set("reconciler", "namespace x does not exist")
    assert os.read(seen_r, 4096).decode() == "reconciler: namespace x does not exist"
    status.set("reconciler", None)
    assert os.waitpid(child, 0)[1] == 0
    os.close(seen_r)
