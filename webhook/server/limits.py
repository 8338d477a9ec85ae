"""How much a client may send, and for how long: one table shared by the worker that reads requests and the
app that parses them, so the two can never disagree about what is too large.

Why these body limits: the apiserver caps a request body at 3 MiB, but the AdmissionReview carries the
object re-encoded as JSON (defaults and managedFields added, protobuf-submitted objects grow) plus the
envelope. ``/mutate`` sees CREATE only (one object); ``/validate`` also sees UPDATE, which carries
``object`` and ``oldObject``, each up to 3 MiB. Every other path takes no real body.

Every value can be overridden from the environment (``TRAINADMIT_<FIELD>``, e.g. ``TRAINADMIT_READ_TIMEOUT``;
per-path body limits as ``TRAINADMIT_MAX_BODY_BYTES_MUTATE``): ``trainadmit serve`` passes its options to the
workers that way, and tests use short deadlines.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

MiB = 1024 * 1024

# A worker is replaced after this many requests (plus up to the jitter, at random, so that the workers of a
# replica are not replaced together): it bounds what a process keeps over time (the CEL library's host
# functions leak ~0.1-0.3 KB per call: ~10 MB per worker between restarts) at the cost of
# a new worker's start (~1-2 s of CPU) every 20,000 requests.
MAX_REQUESTS = 20000
MAX_REQUESTS_JITTER = 4000


def _env_number(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value else default


@dataclass(frozen=True)
class ReadLimits:
    """Limits on reading one request (seconds and bytes)."""

    read_timeout: float = 10.0  # TLS handshake + head + body of one request, from accept or its first byte
    max_head_bytes: int = 64 * 1024
    max_body_bytes: int = 64 * 1024  # any path without its own limit (health, readiness, metrics)
    mutate_body_bytes: int = 4 * MiB
    validate_body_bytes: int = 8 * MiB
    noop_body_bytes: int = 8 * MiB  # the benchmark floor takes what /validate takes
    small_body_bytes: int = 256 * 1024  # read by the event loop, never waits for the in-flight budget
    max_inflight_body_bytes: int = 8 * MiB  # large bodies being read or answered, per worker process
    # estimated memory (cost.estimate) of the reviews being parsed and decided, per worker process. Two workers
    # at the limit with the densest shape measured (estimate 1.18x the real peak) plus the ~90 MB the processes
    # start with stay under a 512Mi container; a 3 MB review of managedFields-heavy objects (an UPDATE of two
    # at etcd's 1.5 MiB limit) is estimated at ~190 MB and still fits alone.
    decide_memory_bytes: int = 200 * MiB
    wait_timeout: float = 20.0  # a large request waiting for the in-flight budget (503 after)
    send_timeout: float = 10.0  # a client that does not read its response
    linger_timeout: float = 5.0  # after an early 413/503: how long the rest of the upload is drained
    # at shutdown, a new connection that has not sent its request after this long (from accept) is closed
    # without waiting for its deadline; a TLS handshake and a request head take milliseconds
    shutdown_idle: float = 1.0

    def is_large(self, body_bytes: int) -> bool:
        """Large bodies are read under the in-flight budget, bypass the decision memo and trigger a trim."""
        return body_bytes > self.small_body_bytes

    def body_limit(self, path: str) -> int:
        """The largest body accepted on ``path`` (exact match: the app has no other POST routes)."""
        return {"/mutate": self.mutate_body_bytes, "/validate": self.validate_body_bytes,
                "/noop": self.noop_body_bytes, "/noop-patch": self.noop_body_bytes}.get(path, self.max_body_bytes)

    @property
    def largest_body(self) -> int:
        return max(self.mutate_body_bytes, self.validate_body_bytes, self.noop_body_bytes, self.max_body_bytes)

    @classmethod
    def from_env(cls) -> ReadLimits:
        values = {}
        for f in fields(cls):
            name = f"TRAINADMIT_{f.name.upper()}"
            if f.name.endswith("_body_bytes") and f.name.split("_")[0] in ("mutate", "validate", "noop"):
                name = f"TRAINADMIT_MAX_BODY_BYTES_{f.name.split('_')[0].upper()}"
            number = _env_number(name, f.default)  # type: ignore[arg-type]
            values[f.name] = int(number) if isinstance(f.default, int) else number
        return cls(**values)
