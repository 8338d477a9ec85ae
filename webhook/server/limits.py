"""How much a client may send, and for how long: one table shared by the worker that reads requests and the
app that parses them, so the two can never disagree about what is too large.

Why these body limits: the apiserver caps a request body at 3 MiB, but the AdmissionReview carries the
object re-encoded as JSON (defaults and managedFields added, protobuf-submitted objects grow) plus the
envelope. ``/mutate`` sees CREATE only (one object); ``/validate`` also sees UPDATE, which carries
``object`` and ``oldObject``, each up to 3 MiB. Every other path takes no real body.

Every value is a server setting (``options.setting``): each can be given in the environment
(``TRAINADMIT_<FIELD>``, e.g. ``TRAINADMIT_READ_TIMEOUT``; per-path body limits as
``TRAINADMIT_MAX_BODY_BYTES_MUTATE``), the read deadline also as ``--read-timeout``. Tests use short deadlines.
"""

from __future__ import annotations

from dataclasses import dataclass

from .options import AUTO, seconds, setting, whole

MiB = 1024 * 1024

# A worker is replaced after this many requests (plus up to the jitter, at random, so that the workers of a
# replica are not replaced together): it bounds what a process keeps over time at the cost of a new worker's
# start (~1-2 s of CPU) every 20,000 requests. What the CEL library keeps of host-function calls (~0.1-0.2 KB
# per call; 265 bytes per review that fires the bundled memory-per-gpu rule, ~5 MB per worker between
# restarts) is bounded by bytes, not requests: a rule that calls quantity() for every item of a long list
# keeps that much per review (cel_kept_bytes below).
MAX_REQUESTS = 20000
MAX_REQUESTS_JITTER = 4000


@dataclass(frozen=True)
class ReadLimits:
    """Limits on reading one request (seconds and bytes)."""

    read_timeout: float = setting(10.0, env=AUTO, parse=seconds,
                                  help="seconds a client has for the TLS handshake, head and body of one request "
                                       "(408 after)")
    max_head_bytes: int = setting(64 * 1024, flag=None, env=AUTO, parse=whole(1),
                                  help="largest request head (431 above)")
    max_body_bytes: int = setting(64 * 1024, flag=None, env=AUTO, parse=whole(1),
                                  help="largest body on any path without its own limit (health, readiness, metrics)")
    mutate_body_bytes: int = setting(4 * MiB, flag=None, env="TRAINADMIT_MAX_BODY_BYTES_MUTATE", parse=whole(1),
                                     help="largest body on /mutate (413 above)")
    validate_body_bytes: int = setting(8 * MiB, flag=None, env="TRAINADMIT_MAX_BODY_BYTES_VALIDATE", parse=whole(1),
                                       help="largest body on /validate (413 above)")
    noop_body_bytes: int = setting(8 * MiB, flag=None, env="TRAINADMIT_MAX_BODY_BYTES_NOOP", parse=whole(1),
                                   help="largest body on the benchmark floors, as /validate")
    small_body_bytes: int = setting(256 * 1024, flag=None, env=AUTO, parse=whole(1),
                                    help="bodies up to this are read by the event loop and never wait for the "
                                         "in-flight budget")
    max_inflight_body_bytes: int = setting(8 * MiB, flag=None, env=AUTO, parse=whole(1),
                                           help="large bodies being read or answered, per worker process")
    # Estimated memory (cost.estimate) of the reviews being parsed and decided, per worker process. Two workers
    # at the limit with the densest shape measured (estimate 1.18x the real peak) plus the ~90 MB the processes
    # start with stay under a 512Mi container; a 3 MB review of managedFields-heavy objects (an UPDATE of two
    # at etcd's 1.5 MiB limit) is estimated at ~190 MB and still fits alone.
    decide_memory_bytes: int = setting(200 * MiB, flag=None, env=AUTO, parse=whole(1),
                                       help="estimated memory of the reviews being decided, per worker process")
    # Two workers at the limit add 32 MiB to a replica, within the headroom the decide budget leaves in 512Mi;
    # the bundled rules keep at most 265 bytes per review, so request recycling comes first for them
    cel_kept_bytes: int = setting(16 * MiB, flag=None, env=AUTO, parse=whole(1),
                                  help="bytes of CEL host-function calls the CEL library may keep in a worker "
                                       "before the worker is replaced")
    wait_timeout: float = setting(20.0, flag=None, env=AUTO, parse=seconds,
                                  help="seconds a large request waits for the in-flight budget (503 after)")
    send_timeout: float = setting(10.0, flag=None, env=AUTO, parse=seconds,
                                  help="seconds a client has to read its response")
    linger_timeout: float = setting(5.0, flag=None, env=AUTO, parse=seconds,
                                    help="after an early 413/503: seconds the rest of the upload is drained")
    # a TLS handshake and a request head take milliseconds
    shutdown_idle: float = setting(1.0, flag=None, env=AUTO, parse=seconds,
                                   help="at shutdown, a new connection that has not sent its request after this "
                                        "many seconds is closed without waiting for its deadline")

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
