"""What a cluster throws at a `failurePolicy: Fail` webhook, against the real server process.

One small server (1 worker, 2 threads, a 3 s read deadline, a 1 MiB in-flight budget for large bodies)
so that each mechanism shows in a second or two: slow clients cannot hold the threads, a request that is
too slow is cut with 408, an oversized upload gets its 413 and can finish writing, a legitimate 6 MB UPDATE
passes, large bodies share a budget while small requests never wait, and workers are recycled. The numbers
under load (64 + 16 slow connections, 16 concurrent 2.5 MB reviews, the soak) come from bench/hardening.py.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import ssl
import threading
import time

import pytest
from support.manifests import review
from support.paths import POLICIES
from support.server import Server, head, issue_certs, post_on_new_connection, read_response, tls, wait_until

pytestmark = pytest.mark.xdist_group("hardening")

READ_TIMEOUT = 3.0
MiB = 1024 * 1024


@pytest.fixture(scope="session")  # a process: started once (the file's xdist group keeps it on one worker)
def small(tmp_path_factory):
    srv = Server(POLICIES, issue_certs(tmp_path_factory.mktemp("hardening-certs")), workers=1,
                 extra=["--threads", "2", "--enable-noop"],  # the deadline from the environment, as limits.py says
                 env_extra={"TRAINADMIT_MAX_INFLIGHT_BODY_BYTES": str(MiB), "TRAINADMIT_WAIT_TIMEOUT": "0.5",
                            "TRAINADMIT_READ_TIMEOUT": str(READ_TIMEOUT)})
    srv.wait_ready()
    yield srv
    assert srv.stop() == 0


def padded_review(size: int, operation: str = "CREATE", uid: str = "big") -> bytes:
    """A captured Job review grown to ``size`` bytes with an annotation (object and, for UPDATE, oldObject)."""
    body = review("job-03-mutate-Job-CREATE.json")
    req = body["request"]
    req["uid"], req["operation"] = uid, operation
    if operation == "UPDATE":
        req["oldObject"] = json.loads(json.dumps(req["object"]))
    base = len(json.dumps(body))
    objects = [req["object"]] + ([req["oldObject"]] if operation == "UPDATE" else [])
    for obj in objects:
        obj["metadata"].setdefault("annotations", {})["example.com/blob"] = "x" * ((size - base) // len(objects) - 30)
    data = json.dumps(body).encode()
    assert abs(len(data) - size) < 1024, len(data)
    return data


def test_slow_clients_do_not_hold_the_threads(small):
    """6 connections stalled in their request head and 3 in their body, on a worker with 2 threads: gunicorn's
    gthread gave each its own thread, blocked without a deadline, and every other call timed out."""
    small_review = json.dumps(review("job-03-mutate-Job-CREATE.json")).encode()
    held = []
    try:
        for _ in range(6):
            sock = tls(small)
            sock.sendall(b"POST /mutate HTTP/1.1\r\nHost: trainadmit\r\nContent-Le")
            held.append(sock)
        for _ in range(3):
            sock = tls(small)
            sock.sendall(head("/mutate", len(small_review)) + small_review[:10])
            held.append(sock)
        for _ in range(10):
            started = time.monotonic()
            probe = tls(small, timeout=1.0)
            probe.sendall(head("/mutate", len(small_review)) + small_review)
            status, body = read_response(probe)
            probe.close()
            assert status == 200 and json.loads(body)["response"]["allowed"] is True
            assert time.monotonic() - started < 1.0
        started, client = time.monotonic(), small.client()  # and requests on one kept-alive connection
        for _ in range(20):
            assert client.post_review("/mutate", review("job-03-mutate-Job-CREATE.json"))[0] == 200
        assert time.monotonic() - started < 10
        client.close()
    finally:
        for sock in held:
            sock.close()


def test_a_request_too_slow_is_cut_at_the_deadline(small):
    """Head, body and TLS handshake each count against one deadline per request: 408 where a request had
    started, a plain close for a handshake that never came."""
    slow_head = tls(small, timeout=READ_TIMEOUT + 10)
    slow_head.sendall(b"POST /mutate HTTP/1.1\r\nHost: tr")
    slow_body = tls(small, timeout=READ_TIMEOUT + 10)
    slow_body.sendall(head("/mutate", 1000) + b"{")
    no_hello = socket.create_connection(("127.0.0.1", small.port), timeout=READ_TIMEOUT + 10)
    started = time.monotonic()
    try:
        for sock in (slow_head, slow_body):
            status, body = read_response(sock)
            assert status == 408 and "not received within 3 s" in json.loads(body)["error"]
        assert no_hello.recv(1) == b""
        assert time.monotonic() - started < READ_TIMEOUT + 5
    finally:
        for sock in (slow_head, slow_body, no_hello):
            sock.close()
    assert small.metric('trainadmit_early_responses_total{code="408"}') >= 2


def test_an_oversized_upload_gets_413_and_finishes_writing(small):
    """The apiserver writes the whole body before it reads: refused from its Content-Length, the upload is
    drained so the client reads the 413 instead of a reset (gthread closed with megabytes unread). One
    thread writes and reads, non-blocking (an SSL socket is not safe to read and write from two threads).
    The 413 is sent before the body is read: it comes back with only the first KiB written."""
    size = 4 * MiB + 1
    sock = tls(small, timeout=20)
    sock.sendall(head("/mutate", size) + b"x" * 1024)
    received = sock.recv(65536)  # the server waiting for the body would answer 408 after 3 s instead
    assert received.startswith(b"HTTP/1.1 413 "), received[:200]
    sock.setblocking(False)
    pending = memoryview(b"x" * (size - 1024))
    closed, deadline = False, time.monotonic() + 30
    while (pending or (not closed and b'"}' not in received)) and time.monotonic() < deadline:
        readable, writable, _ = select.select([] if closed else [sock], [sock] if pending else [], [], 1.0)
        if readable or (not closed and sock.pending()):
            with contextlib.suppress(ssl.SSLWantReadError, ssl.SSLWantWriteError):
                chunk = sock.recv(65536)
                closed = chunk == b""  # the server's end: after its answer, it only reads
                received += chunk
        if writable and pending:
            with contextlib.suppress(ssl.SSLWantReadError, ssl.SSLWantWriteError):
                pending = pending[sock.send(pending[:65536]):]
    sock.close()
    assert received.startswith(b"HTTP/1.1 413 "), received[:200]
    assert b"limit for /mutate is 4194304" in received
    assert len(pending) == 0, f"{len(pending):,} bytes of the upload could not be written"


def test_a_six_megabyte_update_is_validated(small):
    """UPDATE carries object and oldObject, each up to the apiserver's 3 MiB: /validate takes 8 MiB."""
    body = padded_review(6 * 1000 * 1000, operation="UPDATE", uid="update-6mb")
    status, reply = post_on_new_connection(small, "/validate", body)
    assert status == 200 and reply["response"]["uid"] == "update-6mb"


def test_large_bodies_share_a_budget_and_small_requests_never_wait(small):
    """While one 700 KB review holds the worker's 1 MiB budget, a second waits unread (503 after the 0.5 s
    wait here, 20 s by default) and a normal review is answered at once."""
    first, second = padded_review(700_000, uid="first"), padded_review(700_000, uid="second")
    holder = tls(small)
    holder.sendall(head("/mutate", len(first)) + first[:300_000])
    try:
        status, reply = post_on_new_connection(small, "/mutate", second, timeout=10)
        assert status == 503 and "too many large requests in flight" in reply["error"]
        client = small.client()
        assert client.post_review("/mutate", review("job-03-mutate-Job-CREATE.json"))[0] == 200
        holder.sendall(first[300_000:])
        status, reply = read_response(holder)
        assert status == 200 and json.loads(reply)["response"]["uid"] == "first"
    finally:
        holder.close()


def test_a_review_too_dense_to_decide_within_the_memory_budget_is_413(small):
    """2.4 MB of nested lists takes ~280 MB to parse and decide (~116x its size): refused from its estimate,
    before it is parsed, instead of taking a worker (and the container) past its memory limit."""
    body = review("job-03-mutate-Job-CREATE.json")
    body["request"]["object"]["spec"]["template"]["spec"]["x"] = "DENSE"
    data = json.dumps(body).replace('"DENSE"', "[" + ",".join(["[[[{}]]]"] * 270_000) + "]").encode()
    status, reply = post_on_new_connection(small, "/mutate", data)
    assert status == 413 and "MiB of memory to decide" in reply["error"]
    client = small.client()
    assert client.post_review("/mutate", review("job-03-mutate-Job-CREATE.json"))[0] == 200


def test_workers_are_recycled_after_max_requests_without_failing_a_request(tmp_path):
    """Whatever a worker keeps (CEL's host functions leak a little per call) is bounded by replacing it. Clients
    keep sending throughout: a worker on its way out answers what it accepted (a client reconnecting after its
    "Connection: close" can land on it just before it stops accepting) instead of dropping it."""
    server = Server(POLICIES, issue_certs(tmp_path / "tls"), workers=2,
                    extra=["--threads", "2", "--max-requests", "15", "--max-requests-jitter", "0"])
    try:
        server.wait_ready()
        first = wait_until(lambda: len(pids := server.worker_pids()) == 2 and pids, message="no workers")
        body = review("job-03-mutate-Job-CREATE.json")
        results: list[object] = []

        def send() -> None:
            client = server.client()
            for _ in range(20):
                try:
                    results.append(client.post_review("/mutate", body)[0])
                except OSError as exc:
                    results.append(exc)
                    client.close()

        senders = [threading.Thread(target=send) for _ in range(4)]
        for t in senders:
            t.start()
        for t in senders:
            t.join(60)
        assert results == [200] * 80
        wait_until(lambda: (now := server.worker_pids()) and not now & first, 20, "the workers were never replaced")
    finally:
        assert server.stop() == 0
