"""Start the real server as a subprocess with real certificates, and talk to it as the apiserver does."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

from support import suite_processes
from support.paths import ROOT
from trainadmit.certs import pki

SERVICE = "trainadmit.trainadmit-system.svc"


def wait_until(probe, timeout: float = 10.0, message: str = "condition not met", interval: float = 0.02):
    """Call ``probe`` until it returns something truthy (returned) or the time is up (AssertionError).
    Tests wait this way, never with fixed sleeps: fast when the server is fast, patient when the
    machine is loaded."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(message)
        time.sleep(interval)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def issue_certs(directory: Path) -> Path:
    pki.issue(directory, "trainadmit", "trainadmit-system")
    return directory


class Client:
    """HTTPS client that connects to 127.0.0.1 but verifies the chain and the Service DNS name."""

    def __init__(self, port: int, ca_file: Path, server_name: str = SERVICE, timeout: float = 10.0,
                 keep_alive: bool = True, token: str | None = None):
        self.port, self.server_name, self.timeout, self.keep_alive = port, server_name, timeout, keep_alive
        self.token = token
        self.ca_file = ca_file
        self.conn: http.client.HTTPSConnection | None = None
        self.trusted = 0  # CA certificates the newest connection trusts (read from ca_file when it was opened)

    def _context(self) -> ssl.SSLContext:
        """Trust what ``ca_file`` holds now, as the apiserver trusts the caBundle it last read."""
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        self.trusted = ctx.cert_store_stats()["x509_ca"]
        return ctx

    def _connect(self) -> http.client.HTTPSConnection:
        ctx, name, port, timeout = self._context(), self.server_name, self.port, self.timeout

        class Conn(http.client.HTTPSConnection):
            def connect(self) -> None:
                raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
                # as Go's net package (the apiserver) does: http.client writes head and body separately, and
                # with Nagle on the body would wait for the server's delayed ACK (40 ms per request)
                raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self.sock = ctx.wrap_socket(raw, server_hostname=name)

        return Conn(name, port, timeout=timeout)

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        if self.conn is None or not self.keep_alive:
            self.close()
            self.conn = self._connect()
        headers = {"Content-Type": "application/json"} if body is not None else {}
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        try:
            self.conn.request(method, path, body=body, headers=headers)
            resp = self.conn.getresponse()
            data = resp.read()
        except Exception:
            self.close()
            raise
        if resp.getheader("Connection", "").lower() == "close":
            self.close()
        return resp.status, data

    def post_review(self, path: str, review: dict) -> tuple[int, dict | bytes]:
        status, data = self.request("POST", path, json.dumps(review).encode())
        try:
            return status, json.loads(data)
        except ValueError:
            return status, data

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class Server:
    """``trainadmit serve`` as a child process in its own process group (``suite_processes``): stopped by
    ``stop()``, by leaving a ``with`` block, or, when a test fails first, at the end of the test."""

    def __init__(self, policy_dir: Path, cert_dir: Path, workers: int = 2, extra: list[str] | None = None,
                 log: Path | None = None, env_extra: dict | None = None, command: list[str] | None = None):
        self.port = free_port()
        # the metrics listener (/metrics, the detailed /readyz): on unless ``extra`` says where (or 0)
        given = [a for a in (extra or []) if a.startswith("--metrics-bind-address")]
        self.metrics_port: int | None = free_port() if not given else (
            None if given[0].endswith("=0") else int(given[0].rsplit(":", 1)[1]))
        self.cert_dir = cert_dir
        self._clients: list[Client] = []
        self.log = log or cert_dir / "server.log"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        env.update(env_extra or {})
        self._log_file = open(self.log, "wb")  # noqa: SIM115 - lives as long as the server process
        self.proc = suite_processes.popen(
            [*(command or [sys.executable, "-m", "trainadmit.cli"]), "serve", "-p", str(policy_dir),
             "--tls-cert", str(cert_dir / "tls.crt"), "--tls-key", str(cert_dir / "tls.key"),
             "--host", "127.0.0.1", "--port", str(self.port), "--workers", str(workers),
             "--reload-interval", "0.5",
             *([f"--metrics-bind-address=127.0.0.1:{self.metrics_port}"] if not given else []), *(extra or [])],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=self._log_file)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def client(self, **kw) -> Client:
        client = Client(self.port, self.cert_dir / "ca.crt", **kw)
        self._clients.append(client)
        return client

    def metrics_client(self, token: str | None = None, **kw) -> Client:
        """A client of the metrics listener (``token``: sent as ``Authorization: Bearer``)."""
        assert self.metrics_port is not None, "this server has no metrics listener"
        client = Client(self.metrics_port, self.cert_dir / "ca.crt", token=token, **kw)
        self._clients.append(client)
        return client

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                status, body = self.client(keep_alive=False, timeout=2).request("GET", "/readyz")
                if status == 200:
                    return
                last = f"{status} {body!r}"
            except OSError as exc:
                last = exc
            time.sleep(0.05)
        raise RuntimeError(f"server not ready: {last}; {self.stacks()}")

    def stacks(self) -> str:
        """Every thread's stack of the server's processes (``kill -PWR``, ``server.stacks``), one process at a
        time (they share the log), with the log before them: what a server that does not answer is doing."""
        import signal

        before = len(self.log.read_bytes())
        pids = [self.proc.pid, *sorted(self.worker_pids())]
        for pid in pids:
            size = len(self.log.read_bytes())
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGPWR)
            sizes = [size]

            def settled(sizes: list[int] = sizes, size: int = size) -> bool:
                """Written from the signal handler: done once the log has grown and stopped growing."""
                sizes.append(len(self.log.read_bytes()))
                return len(sizes) > 4 and sizes[-1] == sizes[-4] > size

            with contextlib.suppress(AssertionError):
                wait_until(settled, timeout=5, interval=0.05)
        text = self.log.read_text(errors="replace")
        return (f"its log before the stacks ends: {text[:before][-2000:]}\n"
                f"stacks of processes {pids} (main process first):\n{text[before:][-20000:]}")

    def stop(self) -> int:
        """SIGTERM and wait (its whole process group SIGKILLed after 30 s); the exit status. Our idle
        keep-alive connections are closed first: a graceful shutdown waits for open connections, and the
        tests' own must not be what it waits for."""
        for client in self._clients:
            client.close()
        status = suite_processes.stop(self.proc, grace=30)
        self._log_file.close()
        return status

    def served_certificate(self):
        """The certificate a new TLS connection is served (no verification: rotation tests look at it)."""
        from cryptography import x509

        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as raw, \
                ctx.wrap_socket(raw, server_hostname=SERVICE) as tls:
            return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True))

    def worker_pids(self) -> set[int]:
        """The gunicorn workers of this server (its child processes, from /proc)."""
        pids = set()
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = stat.read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == self.proc.pid and fields[0] != "Z":
                    pids.add(int(stat.parent.name))
        return pids

    def metric(self, name: str) -> float | None:
        """The value of one sample line of /metrics (``name`` with its labels as rendered), or None."""
        text = self.metrics_client(keep_alive=False).request("GET", "/metrics")[1].decode()
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
        return None

    def accepting(self) -> bool:
        """Whether the server still accepts new TCP connections."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def wait_log(self, predicate, timeout: float = 10.0) -> list[dict]:
        """Poll the server's log until a structured line satisfies ``predicate``; all such lines."""
        return wait_until(lambda: [x for x in self.log_lines() if predicate(x)], timeout,
                          f"no log line matched within {timeout}s")

    def log_lines(self) -> list[dict]:
        out = []
        for line in self.log.read_text().splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    out.append(json.loads(line))
        return out


# ---- one request written by hand on its own TLS connection (no client library in the way) -------------------

def tls(server: Server, timeout: float = 10.0) -> ssl.SSLSocket:
    """A new TLS connection to ``server``, verified against its CA and the Service name."""
    ctx = ssl.create_default_context(cafile=str(server.cert_dir / "ca.crt"))
    return ctx.wrap_socket(socket.create_connection(("127.0.0.1", server.port), timeout=timeout),
                           server_hostname=SERVICE)


def head(path: str, length: int) -> bytes:
    """The head of a POST of ``length`` bytes of JSON to ``path``."""
    return (f"POST {path} HTTP/1.1\r\nHost: trainadmit\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def read_response_with_head(sock: ssl.SSLSocket) -> tuple[int, bytes, bytes]:
    """Status, head (status line and headers) and body of one response (Content-Length framed), or
    (0, b"", b"") if the server closed first."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return 0, b"", b""
        data += chunk
    top, _, rest = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in top.split(b"\r\n") if line.lower().startswith(b"content-length"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return int(top.split()[1]), top, rest


def read_response(sock: ssl.SSLSocket) -> tuple[int, bytes]:
    """Status and body of one response (Content-Length framed), or (0, b"") if the server closed first."""
    status, _, body = read_response_with_head(sock)
    return status, body


def post_on_new_connection(server: Server, path: str, data: bytes, timeout: float = 30.0) -> tuple[int, dict]:
    """One request written whole on its own TLS connection: status, JSON body."""
    sock = tls(server, timeout=timeout)
    try:
        sock.sendall(head(path, len(data)) + data)
        status, reply = read_response(sock)
    finally:
        sock.close()
    return status, json.loads(reply) if reply else {}
