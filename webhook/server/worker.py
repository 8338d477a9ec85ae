"""A gunicorn ``gthread`` worker that reads each request completely, under a deadline, before a thread sees it.

Why: gunicorn's gthread worker hands a connection to a pool thread as soon as its first byte arrives, and
that thread then does the TLS handshake, reads the head and (inside the app) the body with blocking,
timeout-free socket calls. A client sending one byte every two seconds holds the thread as long as it likes;
16 of them held every thread of a 2 x 8 server, every apiserver call ran into its 3 s timeout and, with
``failurePolicy: Fail``, every GPU Job create was rejected. A per-read socket timeout does
not help against a trickle, and a total deadline alone only bounds how long each slow client holds a thread.

So, in the worker's existing selector loop (the main thread), without a thread per connection:

* the TLS handshake runs non-blocking: a client that never sends a ClientHello, or sends it byte by byte,
  costs a file descriptor, not a thread;
* the head and a ``Content-Length`` body up to ``small_body_bytes`` (every normal review) are read
  non-blocking into one buffer under one deadline per request (``read_timeout``, from accept, or from the
  first byte of a kept-alive connection's next request); past it the client gets ``408`` and is closed;
* a larger body is read by the pool thread under the same deadline, but only once this worker's in-flight
  budget (``max_inflight_body_bytes``) admits it: large bodies can never hold more than a few threads, and the
  memory a burst of large reviews takes is bounded by bytes, not by how many arrive at once. Small
  requests never wait;
* a body over its path's limit is refused with ``413`` from its ``Content-Length``, and the connection then
  lingers, discarding the rest of the upload, so the client (the apiserver writes the whole body before it
  reads) sees the 413 instead of a reset; ``Transfer-Encoding`` bodies get ``411`` (the apiserver
  always sends ``Content-Length``);
* then the connection goes to a pool thread with the bytes pre-loaded into gunicorn's own parser, so
  parsing, WSGI, keep-alive, ``max_requests`` recycling and graceful shutdown stay gunicorn's;
* at shutdown the worker closes its copy of the listening socket: once every process has, the port refuses
  new connections at once instead of queueing them where nobody will accept them.

Measured against the alternatives (gevent: no deadlines and no preemption, p99 5-10x at 8 connections, TLS
context built once per worker so certificate rotation stops; an asyncio front: heads and handshakes still
unbounded) in the "Hardening" section of docs/server.md. This subclass uses gthread internals (``TConn``,
``enqueue_req``, ``finish_request``, ``handle``, ``poller``, ``nr_conns``): gunicorn is pinned to 27.x and
tests/server/test_server_hardening.py runs slow clients against it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import selectors
import socket
import ssl
import sys
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from gunicorn import http
from gunicorn import sock as gsock
from gunicorn.workers.gthread import TConn, ThreadWorker

from ..grammars.cel import kept_bytes
from .limits import ReadLimits
from .memory import LargeRequestTrimmer

_WOULD_BLOCK = (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError, InterruptedError)
# Request threads compute (CEL, patches) while others wait for the GIL to read a socket or answer; the
# default 5 ms switch interval made a normal review wait behind large ones (probe p50 84 -> 49 ms with 8
# clients sending 2.7 MB reviews, docs/server.md, "Hardening").
SWITCH_INTERVAL = 0.0005
# After a response with "Connection: close": how long the client's remaining bytes are drained before the
# close (gunicorn's own close_graceful waits as long; an upload refused early drains for linger_timeout)
CLOSE_LINGER = 2.0


@dataclass
class ReadState:
    """One connection being read by the main loop."""

    conn: TConn
    deadline: float
    phase: str = "handshake"  # handshake | head | wait-budget | body | linger
    since: float = field(default_factory=time.monotonic)
    buf: bytearray = field(default_factory=bytearray)
    need: int = 0  # bytes of head + body, once the head is parsed
    body_bytes: int = 0  # Content-Length, counted against the in-flight budget when large
    budgeted: bool = False
    drained: int = 0  # linger: bytes discarded so far
    drain_cap: int = 0
    events: int = 0  # what the selector waits for (0: not registered)
    kept_alive: bool = False  # a reused connection that turned readable: a request is on its way


@dataclass(frozen=True)
class Head:
    """What the loop must know of a request head to decide how much to read. gunicorn's parser parses the
    head again, strictly, in the thread (a malformed head is handed on and answered 400 there)."""

    path: str
    length: int | None
    chunked: bool
    expects_continue: bool
    problem: str | None


def parse_head(head: bytes) -> Head:
    length: int | None = None
    chunked = expect = False
    lines = head.split(b"\r\n")
    target = lines[0].split(b" ")
    path = target[1].split(b"?", 1)[0].decode("latin-1") if len(target) > 2 else ""
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        name = name.strip().lower()
        if name == b"content-length":
            v = value.strip()
            if not v.isdigit() or (length is not None and int(v) != length):
                return Head(path, None, False, False, "invalid Content-Length")
            length = int(v)
        elif name == b"transfer-encoding":
            chunked = True
        elif name == b"expect" and value.strip().lower() == b"100-continue":
            expect = True
    return Head(path, length, chunked, expect, None)


def error_response(status: int, reason: str, message: str) -> bytes:
    """A complete HTTP/1.1 response with a JSON ``error``, as the app writes its own 4xx."""
    body = ('{"error":"' + message.replace("\\", "/").replace('"', "'") + '"}').encode()
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n").encode() + body


class DeadlineThreadWorker(ThreadWorker):
    """gthread with handshakes, heads and bodies read in the selector loop, under deadlines."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # the server's settings, on the gunicorn Application this worker was forked with
        self.limits: ReadLimits = self.app.settings.limits
        self.reading: dict[int, ReadState] = {}  # id(conn) -> state
        self.waiting_budget: list[ReadState] = []
        self.inflight_body = 0
        self.trimmer = LargeRequestTrimmer(self.limits.is_large)
        self._metrics: Any = None

    def init_process(self) -> None:
        sys.setswitchinterval(SWITCH_INTERVAL)
        from . import metrics  # after fork: prometheus_client's multi-process files are per process

        self._metrics = metrics
        super().init_process()

    def _count(self, what: str) -> None:
        if self._metrics is not None:
            if what == "handshake":
                self._metrics.TLS_HANDSHAKE_FAILURES.inc()
            else:
                self._metrics.EARLY_RESPONSES.labels(what).inc()

    # ---- entry points the base class calls (all on the main thread) ---------------------------------------

    def accept(self, listener: socket.socket) -> None:
        try:
            client, addr = listener.accept()
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        self.nr_conns += 1
        conn = TConn(self.cfg, client, addr, listener.getsockname())  # sets non-blocking
        if self.cfg.is_ssl:
            try:  # the certificate current now (the ssl_context hook is asked per connection)
                conn.sock = gsock.ssl_context(self.cfg).wrap_socket(
                    client, server_side=True, do_handshake_on_connect=False,
                    suppress_ragged_eofs=self.cfg.suppress_ragged_eofs)
            except (OSError, ValueError) as exc:  # no usable certificate: nothing to serve with
                self.log.warning("TLS context unavailable: %s", exc)
                self.nr_conns -= 1
                conn.close()
                return
        conn.initialized = True  # TConn.init() must not wrap or handshake again in the thread
        conn.parser = http.get_parser(self.cfg, conn.sock, addr)
        state = ReadState(conn, deadline=time.monotonic() + self.limits.read_timeout,
                          phase="handshake" if self.cfg.is_ssl else "head")
        self.reading[id(conn)] = state
        self._advance(state)

    def enqueue_req(self, conn: TConn) -> None:
        """A kept-alive connection turned readable, or bytes of a next request are buffered: read it here."""
        if getattr(conn, "request_ready", False):
            conn.request_ready = False
            super().enqueue_req(conn)
            return
        leftover = conn.parser.unreader.take_buffered() if conn.parser is not None else b""
        conn.sock.setblocking(False)
        state = ReadState(conn, deadline=time.monotonic() + self.limits.read_timeout, phase="head",
                          buf=bytearray(leftover), kept_alive=True)
        self.reading[id(conn)] = state
        self._advance(state)

    def set_accept_enabled(self, enabled: bool) -> None:
        super().set_accept_enabled(enabled)
        if not enabled and not self.alive:
            # Shutting down (SIGTERM, or recycled after max_requests): the base class stops accepting but
            # keeps the listening socket open until the process exits, so the kernel keeps completing new
            # connections nobody will serve and clients hang until they time out. Closed here, the port
            # refuses at once when every process has closed it (the master closes its copy first).
            for listener in self.sockets:
                with contextlib.suppress(OSError):
                    listener.close()

    def handle(self, conn: TConn) -> Any:
        """Pool thread. A large body (one that holds in-flight budget) is read here rather than on the main
        loop: reading TLS costs a GIL hand-over per 16 KiB record, and one loop reading every large body of
        the worker while request threads hold the GIL was measured ~2x slower for bursts of 2.7 MB reviews.
        The read keeps the request's deadline; the budget caps how many threads can be doing it."""
        remaining = getattr(conn, "body_remaining", 0)
        if remaining:
            conn.body_remaining = 0
            if not self._read_rest(conn, remaining):
                return False
        return super().handle(conn)

    def _read_rest(self, conn: TConn, remaining: int) -> bool:
        chunks: list[bytes] = []
        try:
            while remaining > 0:
                left = conn.read_deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                conn.sock.settimeout(left)
                chunk = conn.sock.recv(min(remaining, 1 << 20))
                if not chunk:
                    return False
                chunks.append(chunk)
                remaining -= len(chunk)
        except TimeoutError:
            self._count("408")
            with contextlib.suppress(OSError):
                conn.sock.settimeout(1.0)
                conn.sock.sendall(error_response(408, "Request Timeout", "request body not received in time"))
            return False
        except OSError:  # includes ssl.SSLError
            return False
        buf = conn.parser.unreader.buf
        buf.seek(0, os.SEEK_END)
        for chunk in chunks:
            buf.write(chunk)
        return True

    def handle_request(self, req: Any, conn: TConn) -> bool:
        """Pool thread, the whole request already buffered: the socket is only written to now, so a timeout on
        it bounds a client that does not read its response. Large requests feed the memory trimmer."""
        conn.sock.settimeout(self.limits.send_timeout)
        large = self.trimmer.started(getattr(conn, "body_bytes", 0))
        try:
            return super().handle_request(req, conn)
        except TimeoutError:
            self.log.info("client did not read its response within %ss; closing", self.limits.send_timeout)
            return False
        finally:
            self.trimmer.finished(large)
            self._retire_if_cel_kept_too_much()

    def _retire_if_cel_kept_too_much(self) -> None:
        """The CEL library keeps every host-function call (grammars.cel): past the budget the worker is replaced
        the way ``max_requests`` replaces it (it finishes what it accepted, the arbiter starts another)."""
        kept = kept_bytes()
        if self.alive and kept >= self.limits.cel_kept_bytes:
            self.log.warning("replacing the worker: the CEL library keeps %d bytes of host-function calls "
                          "(TRAINADMIT_CEL_KEPT_BYTES %d)", kept, self.limits.cel_kept_bytes)
            self.alive = False

    def finish_request(self, conn: TConn, fs: Any) -> None:
        body = getattr(conn, "budget_bytes", 0)
        if body:
            conn.budget_bytes = 0
            self.inflight_body -= body
        try:
            keep = fs.result() if not fs.cancelled() else False
        except Exception:
            keep = False
        if keep:
            super().finish_request(conn, fs)  # kept alive: back to the poller (or, with bytes buffered, to us)
        else:
            # gthread closes "gracefully" right here, on the main loop: it shuts down its side, then reads for
            # up to 2 s until the client closes. A client that keeps the connection open after a
            # "Connection: close" response would stop this loop (every other connection's reads and
            # deadlines) for 2 s per request; the drain happens in the loop's own linger phase instead
            self._linger_close(ReadState(conn, deadline=0.0), seconds=CLOSE_LINGER)
        if body:
            self._admit_waiting()

    def murder_pending(self) -> None:
        """Runs every loop iteration (at least once a second): expire reads past their deadline."""
        super().murder_pending()
        now = time.monotonic()
        for state in list(self.reading.values()):
            # at shutdown a new connection that has sent nothing for a while is closed at once (a stalled client
            # must not hold the exit up for its whole deadline); one accepted just before the worker stopped
            # accepting (a client reconnecting after a recycled worker's "Connection: close") is in the middle
            # of its handshake and gets a moment to send its request, which is answered. A kept-alive
            # connection that turned readable may hold a partial TLS record of its next request: its deadline
            idle = (not state.buf and state.phase in ("handshake", "head") and not state.kept_alive
                    and now - state.since > self.limits.shutdown_idle)
            if now < state.deadline and (self.alive or not idle):
                continue
            if state.phase == "linger" or idle:
                self._close(state.conn)
            elif state.phase == "wait-budget":
                self._count("503")
                self._reject(state, 503, "Service Unavailable", "too many large requests in flight; retry",
                             expected=state.need - len(state.buf))
            else:
                self._count("408")
                self._reject(state, 408, "Request Timeout",
                             f"request not received within {self.limits.read_timeout:g} s")

    # ---- the read state machine -------------------------------------------------------------------------

    def _advance(self, state: ReadState, *_: Any) -> None:
        conn = state.conn
        try:
            while True:
                if state.phase == "handshake":
                    conn.sock.do_handshake()
                    state.phase = "head"
                    continue
                if state.phase == "wait-budget":
                    self._watch(state, 0)
                    return
                data = conn.sock.recv(1 << 20 if state.phase in ("body", "linger") else 65536)
                if not data:
                    self._close(conn)
                    return
                if state.phase == "linger":
                    state.drained += len(data)
                    if state.drained >= state.drain_cap:
                        self._close(conn)
                        return
                    continue
                state.buf += data
                if state.phase == "head" and self._head_done(state):
                    return
                if state.phase == "body" and len(state.buf) >= state.need:
                    self._hand_off(state)
                    return
        except ssl.SSLWantWriteError:
            self._watch(state, selectors.EVENT_WRITE)
        except _WOULD_BLOCK:
            self._watch(state, selectors.EVENT_READ)
        except (OSError, ValueError) as exc:  # includes ssl.SSLError
            if state.phase == "handshake":
                self._count("handshake")
                self.log.debug("TLS handshake failed: %s", exc)
            self._close(conn)

    def _head_done(self, state: ReadState) -> bool:
        """Called with new head bytes; True when the state left the head phase (handed on or closed)."""
        end = state.buf.find(b"\r\n\r\n", max(0, len(state.buf) - 65536 - 3))
        if end < 0:
            if len(state.buf) > self.limits.max_head_bytes:
                self._count("431")
                self._reject(state, 431, "Request Header Fields Too Large", "request head too large")
                return True
            return False
        head_end = end + 4
        head = parse_head(bytes(state.buf[:end]))
        if head.problem:  # gunicorn's strict parser answers it (400)
            self._hand_off(state)
            return True
        if head.chunked:
            self._count("411")
            self._reject(state, 411, "Length Required", "send the body with Content-Length")
            return True
        length = head.length or 0
        limit = self.limits.body_limit(head.path)
        if length > limit:
            self._count("413")
            self._reject(state, 413, "Request Entity Too Large",
                         f"request body is {length} bytes; the limit for {head.path} is {limit}",
                         expected=length - (len(state.buf) - head_end))
            return True
        state.need = head_end + length
        state.body_bytes = length
        if head.expects_continue and len(state.buf) < state.need:
            with contextlib.suppress(OSError):
                state.conn.sock.send(b"HTTP/1.1 100 Continue\r\n\r\n")
        if not self._take_budget(state):
            state.phase = "wait-budget"  # admitted when earlier large requests finish, or 503 at this deadline
            state.deadline = time.monotonic() + self.limits.wait_timeout
            self.waiting_budget.append(state)
            self._watch(state, 0)
            return True
        if len(state.buf) >= state.need or state.budgeted:
            self._hand_off(state)  # complete, or large: the thread reads the rest
            return True
        state.phase = "body"
        return False

    def _take_budget(self, state: ReadState) -> bool:
        n = state.body_bytes
        if not self.limits.is_large(n):
            return True
        if self.inflight_body and self.inflight_body + n > self.limits.max_inflight_body_bytes:
            return False
        self.inflight_body += n
        state.budgeted = True
        return True

    def _admit_waiting(self) -> None:
        while self.waiting_budget:
            state = self.waiting_budget[0]
            if id(state.conn) not in self.reading:  # expired or closed meanwhile
                self.waiting_budget.pop(0)
                continue
            if not self._take_budget(state):
                return
            self.waiting_budget.pop(0)
            state.deadline = time.monotonic() + self.limits.read_timeout
            self._hand_off(state)

    def _hand_off(self, state: ReadState) -> None:
        conn = state.conn
        self._forget(state)
        conn.parser.unreader.unread(bytes(state.buf))
        conn.body_remaining = max(0, state.need - len(state.buf))
        conn.read_deadline = state.deadline
        conn.body_bytes = state.body_bytes
        conn.budget_bytes = state.body_bytes if state.budgeted else 0
        conn.data_ready = True
        conn.request_ready = True
        self.enqueue_req(conn)

    def _reject(self, state: ReadState, status: int, reason: str, message: str, *, expected: int = 0) -> None:
        """Answer early with ``Connection: close``, then drain what the client still sends (``expected``: the
        rest of a declared body), so that it reads the answer instead of a reset."""
        self._release(state)
        expected = max(expected, 65536)  # and a little of whatever else the client is sending
        try:
            state.conn.sock.send(error_response(status, reason, message))
        except OSError:
            self._close(state.conn)
            return
        # TLS stays up: a TLS client that sees the end of the stream refuses to write the rest of its upload
        self._linger_close(state, drain=expected, seconds=self.limits.linger_timeout, half_close=False)

    def _linger_close(self, state: ReadState, *, seconds: float, drain: int = 65536, half_close: bool = True) -> None:
        """Close after our last response, but first discard what the client still sends, up to ``drain`` bytes
        or ``seconds`` (closing with unread data makes the kernel send a reset, which can destroy the response
        still in flight). ``half_close``: shut down our side first, so the client sees the end at once."""
        conn = state.conn
        self.reading[id(conn)] = state
        try:
            if conn.sock.fileno() < 0:  # already closed by the thread
                raise OSError(errno.EBADF, "closed")
            if half_close:
                conn.sock.shutdown(socket.SHUT_WR)  # an SSLSocket drops its TLS state: raw bytes from here on
            conn.sock.setblocking(False)
        except OSError:
            self._close(conn)
            return
        state.phase = "linger"
        state.buf = bytearray()
        state.drained, state.drain_cap = 0, drain
        state.deadline = time.monotonic() + seconds
        self._advance(state)

    # ---- selector and bookkeeping -----------------------------------------------------------------------

    def _release(self, state: ReadState) -> None:
        """Give back the state's budget and its place in the queue for it."""
        if state in self.waiting_budget:
            self.waiting_budget.remove(state)
        if state.budgeted:
            self.inflight_body -= state.body_bytes
            state.budgeted = False
            self._admit_waiting()

    def _watch(self, state: ReadState, events: int) -> None:
        if events == state.events:
            return
        sock = state.conn.sock
        if state.events and not events:
            self.poller.unregister(sock)
        elif not state.events:
            self.poller.register(sock, events, partial(self._advance, state))
        else:
            self.poller.modify(sock, events, partial(self._advance, state))
        state.events = events

    def _forget(self, state: ReadState) -> None:
        self._watch(state, 0)
        self.reading.pop(id(state.conn), None)

    def _close(self, conn: TConn) -> None:
        state = self.reading.get(id(conn))
        if state is not None:
            self._forget(state)
            self._release(state)
        self.nr_conns -= 1
        conn.close()
