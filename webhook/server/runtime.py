"""Live state of a server process: the current policy set and TLS context, reloaded on change.

Both follow the same rule: the new version is loaded and checked completely before it replaces the
old one, and a version that fails to load leaves the old one serving and says so in the log and in
metrics. Kubernetes swaps ConfigMap and Secret mounts through a ``..data`` symlink, so change
detection looks at the resolved files' identity and size, not at the directory's mtime.
"""

from __future__ import annotations

import datetime as dt
import os
import ssl
import threading
import time
from pathlib import Path

from cryptography import x509

from ..engine import load_policy
from ..policy import PolicyError, PolicySet
from ..policy.loader import policy_files
from .decisions import DecisionCache
from .logs import emit


def _fingerprint(paths: list[Path]) -> tuple:
    out = []
    for p in paths:
        try:
            st = os.stat(p)  # follows symlinks: a ..data swap changes inode and mtime
            out.append((str(p), st.st_ino, st.st_mtime_ns, st.st_size))
        except OSError:
            out.append((str(p), None))
    return tuple(out)


class PolicyStore:
    """Holds the current PolicySet; ``poll()`` swaps in a changed directory once it loads cleanly."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        # the served generation and its remembered decisions, swapped as one value (never two generations)
        self.decisions: DecisionCache | None = None
        self.last_error: str | None = None
        self._fp: tuple | None = None
        self._lock = threading.Lock()

    @property
    def current(self) -> PolicySet | None:
        decisions = self.decisions
        return decisions.policy if decisions is not None else None

    def _files_fingerprint(self) -> tuple:
        try:
            files = policy_files(self.directory)
        except OSError:
            files = []
        return (str(self.directory.resolve()) if self.directory.exists() else None, _fingerprint(files))

    def poll(self) -> bool:
        """Reload when the files changed; True when a new generation was swapped in."""
        from . import metrics

        with self._lock:
            fp = self._files_fingerprint()
            if fp == self._fp:
                return False
            self._fp = fp
            try:
                policy = load_policy(self.directory)
            except (PolicyError, OSError, UnicodeDecodeError) as exc:
                self.last_error = str(exc)
                metrics.POLICY_RELOAD_FAILURES.inc()
                emit("policy_reload_failed", directory=str(self.directory), error=str(exc),
                     keeping=self.current.generation if self.current else None)
                return False
            if self.current is not None and policy.generation == self.current.generation:
                # the directory is back at what is being served: an earlier failed update is no longer pending
                self.last_error = None
                return False
            previous = self.current
            self.decisions = DecisionCache(policy)
            self.last_error = None
            metrics.POLICY_RELOADS.inc()
            if previous is not None:
                metrics.forget_generation(previous.generation)
            metrics.POLICY_GENERATION.labels(policy.generation).set(1)
            emit("policy_loaded", generation=policy.generation,
                 previous=previous.generation if previous else None, pools=sorted(policy.pools))
            return True


TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"


class CertStore:
    """Builds the server's SSLContext from tls.crt/tls.key and rebuilds it when they change.

    gunicorn asks for a context for every new connection (``ssl_context`` hook), so a rotated
    certificate is served from the next handshake on, with no restart and no dropped connection.
    """

    def __init__(self, cert_file: str | Path, key_file: str | Path, check_every: float = 1.0):
        self.cert_file, self.key_file = Path(cert_file), Path(key_file)
        self.check_every = check_every
        self._context: ssl.SSLContext | None = None
        self._fp: tuple | None = None
        self._failed: tuple[tuple, str] | None = None  # files that failed to load, and why: not retried
        self._checked = 0.0
        self.not_after: dt.datetime | None = None
        self._lock = threading.Lock()

    def _build(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_ciphers(TLS12_CIPHERS)  # TLS 1.2: forward-secret AEAD suites only (1.3's are all AEAD)
        context.load_cert_chain(self.cert_file, self.key_file)
        context.set_alpn_protocols(["http/1.1"])
        return context

    def context(self) -> ssl.SSLContext:
        now = time.monotonic()
        if self._context is not None and now - self._checked < self.check_every:
            return self._context
        with self._lock:
            self._checked = now
            fp = _fingerprint([self.cert_file, self.key_file])
            if fp != self._fp or self._context is None:
                from . import metrics

                if self._failed is not None and self._failed[0] == fp:  # the same files failed already
                    if self._context is None:
                        raise ValueError(self._failed[1])
                    return self._context
                try:
                    context = self._build()
                    cert = x509.load_pem_x509_certificates(self.cert_file.read_bytes())[0]
                except (OSError, ssl.SSLError, ValueError) as exc:
                    # a half-written pair (cert and key from different issues) keeps the old context
                    self._failed = (fp, str(exc))
                    metrics.CERT_RELOAD_FAILURES.inc()
                    emit("certificate_reload_failed", cert=str(self.cert_file), error=str(exc),
                         keeping="previous certificate" if self._context is not None else None)
                    if self._context is None:
                        raise
                    return self._context
                self._failed = None
                self._context, self._fp = context, fp
                self.not_after = cert.not_valid_after_utc
                metrics.CERT_RELOADS.inc()
                metrics.CERT_EXPIRY.set(self.not_after.timestamp())
                emit("certificate_loaded", subject=cert.subject.rfc4514_string(), not_after=self.not_after)
        return self._context

    def valid(self) -> bool:
        try:
            self.context()
        except (OSError, ssl.SSLError, ValueError):
            return False
        return self.not_after is not None and self.not_after > dt.datetime.now(dt.UTC)
