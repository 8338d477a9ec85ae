"""What ``trainadmit serve`` checks before gunicorn starts, each failure one line naming the file or address.

Why before: a problem found inside a worker surfaces as a worker boot error (gunicorn exits 3 after pages of
traceback), or not at all: a garbage certificate would start a server whose every handshake fails, the error
appearing only at the first connection; a port in use made gunicorn retry five times, log ten lines and exit
1. Checked here, the process exits with the documented code (2, like any unreadable input) before it listens.
"""

from __future__ import annotations

import datetime as dt
import errno
import socket
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from .options import sources
from .settings import Listen


class StartupError(Exception):
    """A startup input is unusable; the message names the file and says what is wrong."""


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise StartupError(f"{what} {path} does not exist") from None
    except OSError as exc:
        raise StartupError(f"cannot read {what} {path}: {exc.strerror or exc}") from None


def check_tls_pair(cert_file: str | Path, key_file: str | Path) -> None:
    """The pair is readable PEM, the key is the certificate's, and the certificate has not expired."""
    cert_path, key_path = Path(cert_file), Path(key_file)
    cert_pem, key_pem = _read(cert_path, "the TLS certificate"), _read(key_path, "the TLS key")
    try:
        cert = x509.load_pem_x509_certificates(cert_pem)[0]
    except ValueError:
        raise StartupError(f"the TLS certificate {cert_path} is not a PEM certificate") from None
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        raise StartupError(f"the TLS key {key_path} is not an unencrypted PEM private key") from None
    if key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo) != \
            cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo):
        raise StartupError(f"the TLS key {key_path} does not belong to the certificate {cert_path}")
    if cert.not_valid_after_utc <= dt.datetime.now(dt.UTC):
        raise StartupError(f"the TLS certificate {cert_path} expired at {cert.not_valid_after_utc.isoformat()}")
    try:  # what the server will do with them, for anything the checks above do not cover
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert_path, key_path)
    except (OSError, ValueError) as exc:
        raise StartupError(f"the TLS pair {cert_path} / {key_path} cannot be served: {exc}") from None


def check_cluster_files(paths: list[str]) -> None:
    """Each cluster snapshot file reads as one (the server loads them again in every worker)."""
    from ..cluster.snapshot import SnapshotCluster, SnapshotError

    for path in paths:
        try:
            SnapshotCluster.from_files([path])
        except FileNotFoundError:
            raise StartupError(f"the cluster snapshot {path} does not exist") from None
        except OSError as exc:
            raise StartupError(f"cannot read the cluster snapshot {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise StartupError(f"the cluster snapshot {path} is not UTF-8 text") from None
        except SnapshotError as exc:
            cause = exc.__cause__
            mark = getattr(cause, "problem_mark", None)
            if mark is not None:  # a YAML error spans several lines with a caret: its line and problem instead
                message = f"{path}:{mark.line + 1}: not valid YAML: {getattr(cause, 'problem', None) or cause}"
            else:
                message = str(exc).splitlines()[0]
                message = message if message.startswith(path) else f"{path}: {message}"
            raise StartupError(message) from None


def check_kube_config() -> None:
    """The in-cluster service account or a kubeconfig is there (``--cluster-live``, ``--reconcile``,
    ``--manage-certs`` talk to the API from the first second)."""
    import os

    import yaml
    from kubernetes.config import ConfigException

    from ..cluster.kube import load_config

    try:
        load_config()
    except (ConfigException, OSError, ValueError, yaml.YAMLError) as exc:
        where = os.environ.get("KUBECONFIG") or "~/.kube/config"
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise StartupError(f"no Kubernetes API access: not in a cluster (no service account) and the kubeconfig "
                           f"{where} is missing or unusable ({reason})") from None


def bind_listeners(listen: Listen) -> tuple[socket.socket, socket.socket | None]:
    """The admission listener and the metrics listener (None when ``--metrics-bind-address`` is 0), bound."""
    metrics_flag = sources(Listen, "metrics_bind_address")
    if listen.metrics_port == listen.port:
        raise StartupError(f"cannot listen on {listen.metrics_address}: {metrics_flag} names the admission port "
                           f"{listen.port} (the metrics listener needs its own)")
    admission = bind_listener(listen.host, listen.port, listen.address)
    if listen.metrics_port is None:
        return admission, None
    try:
        return admission, bind_listener(listen.metrics_host, listen.metrics_port, listen.metrics_address,
                                        metrics_flag)
    except StartupError:
        admission.close()
        raise


def bind_listener(host: str, port: int, address: str, flag: str | None = None) -> socket.socket:
    """The server's listening socket, bound (gunicorn listens on it and serves from it). ``address``: how the
    messages name it; ``flag``: the setting that gives both its host and port (else --host and --port)."""
    try:
        family, kind, proto, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                               flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as exc:
        raise StartupError(f"cannot listen on {address}: {host} is not an address or a known host name "
                           f"({exc.strerror})") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn: restarts past TIME_WAIT
    try:
        sock.bind(sockaddr)
    except OSError as exc:
        sock.close()
        port_flag, host_flag = (flag, flag) if flag else (sources(Listen, "port"), sources(Listen, "host"))
        why = {errno.EADDRINUSE: f"the port is in use (another server listens there: stop it, or choose another "
                                 f"{port_flag})",
               errno.EADDRNOTAVAIL: f"that address is not one of this machine's (choose another {host_flag})",
               errno.EACCES: f"permission denied (ports below 1024 need privileges: choose another {port_flag})"}
        raise StartupError(f"cannot listen on {address}: {why.get(exc.errno, exc.strerror or str(exc))}") \
            from None
    return sock
