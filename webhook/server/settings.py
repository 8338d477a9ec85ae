"""Every setting of ``trainadmit serve``, as one tree of dataclasses read in one place.

``trainadmit serve``'s parser is built from this tree (``add_arguments``), its values are read from the
flags and the environment once, in the server's main process (``load``), and the same object then reaches
gunicorn's configuration (``gunicorn_app``), the workers' request reader (``limits``) and the app: gunicorn
forks its workers from that process, so they inherit it as it is, with nothing passed through the
environment in between.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from . import options
from .limits import MAX_REQUESTS, MAX_REQUESTS_JITTER, ReadLimits
from .options import AUTO, SettingError, name, one_of, path, seconds, setting, whole

WORKER_CLASSES = ("deadline", "gthread")


@dataclass(frozen=True)
class AppSettings:
    """What a worker's app decides with: the policy, the cluster view, and whether the floors are served."""

    policy_dir: str = setting("policies", short="-p", flag="--policy", env="TRAINADMIT_POLICY_DIR", parse=path,
                              help="policy directory, reloaded when its files change")
    reload_interval: float = setting(2.0, env=AUTO, parse=seconds,
                                     help="seconds between checks of the policy directory")
    cluster_files: tuple[str, ...] = setting((), flag="--cluster", env="TRAINADMIT_CLUSTER_SNAPSHOT", parse=path,
                                             repeat=True, metavar="FILE",
                                             help="cluster snapshot file (saved lists of nodes, quotas, ...); "
                                                  "repeatable")
    cluster_live: bool = setting(False, env=AUTO, switch=True,
                                 help="watch Nodes, ResourceQuotas and the objects decisions name (pool capacity, "
                                      "usable nodes, domain sizes, remaining GPU quota, PriorityClasses, claims, "
                                      "networks, queues)")
    cluster_max_age: float = setting(180.0, env=AUTO, parse=seconds,
                                     help="seconds after which a live view that could not be confirmed is stale: "
                                          "/readyz fails and decisions follow rule cluster.view-stale")
    enable_noop: bool = setting(False, env=AUTO, switch=True,
                                help="also serve POST /noop and /noop-patch, the benchmarks' floors (never in "
                                     "production)")


@dataclass(frozen=True)
class TLSFiles:
    cert_file: str | None = setting(None, flag="--tls-cert", env="TRAINADMIT_TLS_CERT", parse=path, metavar="FILE",
                                    help="serving certificate, PEM, reloaded when it changes")
    key_file: str | None = setting(None, flag="--tls-key", env="TRAINADMIT_TLS_KEY", parse=path, metavar="FILE",
                                   help="its private key, PEM")


def _joined(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def bind_address(text: str) -> str:
    """``host:port``, ``:port`` (every address) or ``0`` (off), as controller-runtime's ``--metrics-bind-address``
    takes it; returned as given (``metrics_host``/``metrics_port`` split it)."""
    value = text.strip()
    if value == "0":
        return value
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 1 <= int(port) <= 65535 or (host.startswith("[") != host.endswith("]")):
        raise ValueError("takes host:port, :port or 0 (off)")
    return value


bind_address.metavar = "HOST:PORT"  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Listen:
    """The admission listener (``host``, ``port``: ``/mutate``, ``/validate`` and the bare ``/healthz`` and
    ``/readyz`` the kubelet probes) and the metrics listener (``/metrics`` and the detailed ``/readyz``), apart so
    that what reaches the webhook port learns nothing of the policy or the cluster."""

    host: str = setting("0.0.0.0", parse=name, help="address to listen on")
    port: int = setting(8443, parse=whole(1, 65535), help="HTTPS port")
    metrics_bind_address: str = setting("0", env=AUTO, parse=bind_address,
                                        help="where /metrics and the detailed /readyz are served (HTTPS, the same "
                                             "certificate): host:port, :port for every address, 0 for nowhere; the "
                                             "admission port serves neither")
    metrics_auth: bool = setting(False, env=AUTO, switch=True,
                                 help="on the metrics listener, authenticate the bearer token (TokenReview) and "
                                      "authorize get on the non-resource URL /metrics (SubjectAccessReview), as "
                                      "controller-runtime's WithAuthenticationAndAuthorization and kube-rbac-proxy do")

    @property
    def address(self) -> str:
        return _joined(self.host, self.port)

    @property
    def metrics_port(self) -> int | None:
        """The metrics listener's port; None when it is off."""
        return None if self.metrics_bind_address == "0" else int(self.metrics_bind_address.rpartition(":")[2])

    @property
    def metrics_host(self) -> str:
        host = self.metrics_bind_address.rpartition(":")[0].strip("[]")
        return host or "0.0.0.0"

    @property
    def metrics_address(self) -> str:
        return _joined(self.metrics_host, self.metrics_port or 0)


@dataclass(frozen=True)
class Processes:
    """gunicorn's processes and threads."""

    workers: int = setting(2, parse=whole(1), help="worker processes")
    threads: int = setting(8, parse=whole(1), help="request threads per worker")
    timeout: int = setting(30, parse=whole(1), help="seconds a worker may go silent before it is replaced")
    graceful_timeout: int = setting(20, parse=whole(0), help="seconds to finish the requests in flight at shutdown")
    # the kube-apiserver keeps its connections to a webhook open: closing idle ones early costs a TLS handshake
    keepalive: int = setting(75, parse=whole(1), help="seconds an idle kept-alive connection stays open")
    max_requests: int = setting(MAX_REQUESTS, parse=whole(0),
                                help="requests after which a worker is replaced, bounding what it keeps (0: never)")
    max_requests_jitter: int = setting(MAX_REQUESTS_JITTER, parse=whole(0),
                                       help="up to this many more, at random, so that workers are not replaced "
                                            "together")
    worker_class: str = setting("deadline", parse=one_of(*WORKER_CLASSES),
                                help="deadline: requests read under --read-timeout before a thread takes them; "
                                     "gthread: gunicorn's own, without read deadlines (benchmark baseline)")


@dataclass(frozen=True)
class Controllers:
    """The Lease-elected loops that run beside the server, in its controllers' process (``controller_process``)."""

    manage_certs: bool = setting(False, switch=True,
                                 help="in-cluster mode: create and rotate the TLS Secret and the caBundle "
                                      "(Lease-elected)")
    reconcile: bool = setting(False, switch=True,
                              help="also run the PodGroup reconciler and the preflight status (Lease-elected)")
    namespace: str = setting("trainadmit-system", env="POD_NAMESPACE", parse=name,
                             help="namespace of the Leases, the TLS Secret and the Service")
    service: str = setting("trainadmit", parse=name, help="Service name the certificate is issued for")


@dataclass(frozen=True)
class ServerSettings:
    app: AppSettings = field(default_factory=AppSettings)
    tls: TLSFiles = field(default_factory=TLSFiles)
    listen: Listen = field(default_factory=Listen)
    processes: Processes = field(default_factory=Processes)
    limits: ReadLimits = field(default_factory=ReadLimits)
    controllers: Controllers = field(default_factory=Controllers)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.add_arguments(parser, ServerSettings)


def load(args: argparse.Namespace | None = None, environ: Mapping[str, str] | None = None) -> ServerSettings:
    """The settings from ``args`` (``trainadmit serve``'s flags) and ``environ``; ``SettingError`` names the
    first bad value."""
    return options.read(ServerSettings, args, environ)


def replace(settings: ServerSettings, **sections: dict) -> ServerSettings:
    """``settings`` with some fields of some sections replaced: ``replace(s, app={"reload_interval": 3600})``."""
    return dataclasses.replace(settings, **{key: dataclasses.replace(getattr(settings, key), **values)
                                            for key, values in sections.items()})


__all__ = ["AppSettings", "Controllers", "Listen", "Processes", "ReadLimits", "ServerSettings", "SettingError",
           "TLSFiles", "add_arguments", "load", "replace"]
