"""A real Kubernetes control plane (etcd + kube-apiserver) for integration tests, envtest style.

Why: a fake apiserver cannot tell us what the real one does with our webhook configuration
(``matchConditions`` in CEL, ``namespaceSelector``, ``failurePolicy``, reinvocation, defaulting before
admission, pruning of unknown fields after a patch, RBAC). This module starts the two upstream server
binaries itself, from a folder named by ``KUBEBUILDER_ASSETS`` (controller-runtime's envtest
convention), on free loopback ports, with a throwaway CA, and stops exactly the processes it started.

There is no kubelet, scheduler or controller-manager: nothing creates Pods for Jobs, namespaces get no
``default`` ServiceAccount (see :meth:`ControlPlane.ensure_namespace`), deleted namespaces stay
Terminating (use a fresh namespace per test), and Pod/Node status only changes when a test writes it.

Dependencies: stdlib, ``cryptography``, ``PyYAML``, ``urllib3`` (a dependency of ``kubernetes``), and
``kubernetes`` only for :meth:`ControlPlane.api_client`. What these binaries do without controllers
(and the flags the tier uses) is summed up in docs/testing.md; this module knows
nothing about trainadmit (tests/support/kube_fixtures.py does). Raw REST (:class:`KubeHTTP`) is used for
everything else because it does not depend on the generated client's internals (``ApiClient.call_api``
changed its signature in kubernetes 37), supports several ``Impersonate-Group`` headers, dry-run and
server-side apply, and returns plain dicts that compare directly with YAML manifests.
"""

from __future__ import annotations

import base64
import builtins
import contextlib
import copy
import ctypes
import datetime as dt
import functools
import hashlib
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote, urlencode, urlsplit

import urllib3
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from support import suite_processes

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

__all__ = [
    "ASSETS_ENV",
    "CertPair",
    "CertificateAuthority",
    "ClusterFeatures",
    "ControlPlane",
    "ControlPlaneError",
    "KubeError",
    "KubeHTTP",
    "SchedulingControlPlane",
    "assets_from_env",
    "job_pod",
    "load_manifests",
    "scheduling_assets_from_env",
    "wait_until",
    "webhook_configs_for_url",
]

ASSETS_ENV = "KUBEBUILDER_ASSETS"
_SHM_PREFIX = "controlplane-etcd-"
_RUN_PREFIX = "controlplane-"
_CRD_HASH_ANNOTATION = "controlplane.test/spec-sha256"
JSON = dict[str, Any]


class ControlPlaneError(RuntimeError):
    """The control plane could not be started (the message carries the tail of the logs)."""


class KubeError(RuntimeError):
    """An apiserver error response. ``status`` is the HTTP code, ``body`` the decoded ``Status`` object."""

    def __init__(self, method: str, path: str, status: int, body: Any) -> None:
        self.method, self.path, self.status, self.body = method, path, status, body
        self.reason: str = body.get("reason", "") if isinstance(body, dict) else ""
        self.message: str = body.get("message", str(body)) if isinstance(body, dict) else str(body)
        super().__init__(f"{method} {path}: HTTP {status} {self.reason}: {self.message}")


# --------------------------------------------------------------------------------------------- utilities


def assets_from_env() -> Path | None:
    """The ``KUBEBUILDER_ASSETS`` folder if it is set and holds both binaries, else None."""
    value = os.environ.get(ASSETS_ENV, "").strip()
    if not value:
        return None
    path = Path(value)
    return path if all(os.access(path / b, os.X_OK) for b in ("kube-apiserver", "etcd")) else None


def wait_until(predicate: Callable[[], Any], *, timeout: float, interval: float = 0.05, what: str = "condition") -> Any:
    """``support.server.wait_until`` for the apiserver, where an exception means "not yet" (CRD establishment,
    discovery and the webhook configuration cache are eventually consistent): poll, never sleep."""
    from support.server import wait_until as poll

    def attempt() -> Any:
        try:
            return predicate()
        except Exception:
            return None

    return poll(attempt, timeout, f"timed out after {timeout:.0f}s waiting for {what}", interval)


def load_manifests(*sources: str | Path | Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> list[JSON]:
    """Objects from YAML files, folders of ``*.yaml``/``*.yml``/``*.json``, dicts or lists of dicts.

    ``List`` kinds are flattened; empty documents are skipped. Files in a folder are read in name order.
    """
    out: list[JSON] = []
    for src in sources:
        if isinstance(src, Mapping):
            docs: Iterable[Any] = [src]
        elif isinstance(src, str | Path):
            p = Path(src)
            files = sorted(f for f in p.iterdir() if f.suffix in (".yaml", ".yml", ".json")) if p.is_dir() else [p]
            docs = [d for f in files for d in _load_yaml_file(str(f.resolve()), f.stat().st_mtime_ns)]
        else:
            docs = list(src)
        for d in docs:
            if not d:
                continue
            if d.get("kind", "").endswith("List") and "items" in d:
                out.extend(copy.deepcopy(i) for i in d["items"])
            else:
                out.append(copy.deepcopy(dict(d)))
    return out


_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.lru_cache(maxsize=256)
def _load_yaml_file(path: str, mtime_ns: int) -> tuple[Any, ...]:
    """Parsed documents of a file, cached per (path, mtime). Why: big CRDs are slow to parse (a 1.3 MB
    CRD takes ~4 s with PyYAML's pure-Python loader, ~0.7 s with libyaml), and suites load them often."""
    with open(path, "rb") as f:
        return tuple(yaml.load_all(f, Loader=_YAML_LOADER))  # CSafeLoader or SafeLoader: no arbitrary objects


def webhook_configs_for_url(
    manifests: Iterable[Mapping[str, Any]], base_url: str, ca_pem: bytes, *, name_suffix: str = ""
) -> list[JSON]:
    """Point every webhook of the (Mutating|Validating)WebhookConfigurations in ``manifests`` at ``base_url``.

    Everything is kept verbatim except ``clientConfig``, which becomes ``{url: base_url + path, caBundle}``;
    ``path`` is the ``service.path`` (or the path of an existing ``url``). Why: with no cluster DNS and no
    Service routing, the apiserver reaches a webhook running in the test process only by URL. The
    serving certificate must carry the IP SAN of the URL's host (127.0.0.1), and a URL webhook must be
    https. Other kinds are dropped. ``name_suffix`` renames the configurations (not the webhooks).
    """
    ca_b64 = base64.b64encode(ca_pem).decode()
    out: list[JSON] = []
    for doc in manifests:
        if doc.get("kind") not in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            continue
        cfg = copy.deepcopy(dict(doc))
        cfg.get("metadata", {}).pop("resourceVersion", None)
        if name_suffix:
            cfg["metadata"]["name"] += name_suffix
        for hook in cfg.get("webhooks", []):
            cc = hook.get("clientConfig", {})
            path = (cc.get("service") or {}).get("path") or (urlsplit(cc["url"]).path if cc.get("url") else "") or "/"
            hook["clientConfig"] = {"url": base_url.rstrip("/") + path, "caBundle": ca_b64}
        out.append(cfg)
    return out


def job_pod(job: Mapping[str, Any], index: int = 0, *, uid: str | None = None) -> JSON:
    """The Pod the Job controller would create for ``job`` (there is no controller here to do it).

    Template metadata and spec, ``generateName``-free name ``<job>-<index>``, the labels the controller
    adds, and a controller ``ownerReference`` to the Job. ``uid`` defaults to the Job's ``metadata.uid``
    (present on an object returned by the apiserver).
    """
    meta = job["metadata"]
    tmpl = copy.deepcopy(job["spec"]["template"])
    job_uid = uid or meta.get("uid") or str(uuid.uuid4())
    labels = {**tmpl.get("metadata", {}).get("labels", {}), "batch.kubernetes.io/job-name": meta["name"],
              "job-name": meta["name"], "batch.kubernetes.io/controller-uid": job_uid, "controller-uid": job_uid}
    annotations = dict(tmpl.get("metadata", {}).get("annotations", {}))
    if job["spec"].get("completionMode") == "Indexed":
        labels["batch.kubernetes.io/job-completion-index"] = str(index)
        annotations["batch.kubernetes.io/job-completion-index"] = str(index)
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": f"{meta['name']}-{index}", "namespace": meta.get("namespace", "default"),
            "labels": labels, "annotations": annotations,
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": job_uid,
                                 "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": tmpl["spec"],
    }


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _remove_orphaned_dirs() -> None:
    """Delete run dirs and /dev/shm etcd data left by earlier runs whose test process was killed (SIGKILL).

    Only our own prefixes, and only when the pid recorded in the ``owner`` file no longer exists.
    """
    for d in [*Path("/dev/shm").glob(f"{_SHM_PREFIX}*"), *Path(tempfile.gettempdir()).glob(f"{_RUN_PREFIX}*")]:
        try:
            owner = int((d / "owner").read_text())
        except (OSError, ValueError):
            continue
        if not Path(f"/proc/{owner}").exists():
            shutil.rmtree(d, ignore_errors=True)


def _shutdown(procs: list[subprocess.Popen[bytes]], paths: list[Path]) -> None:
    """Finalizer of a ControlPlane: stop its processes, then delete its temporary directories."""
    _terminate(procs)
    procs.clear()
    for p in paths:
        shutil.rmtree(p, ignore_errors=True)
    paths.clear()


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask Linux to SIGKILL the child when the forking thread dies (test runner killed or timed out).

    SIGKILL, not SIGTERM: a SIGTERMed kube-apiserver whose etcd is already gone hangs in graceful
    shutdown for a long time, and the data is throwaway anyway.
    """
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _terminate(procs: list[subprocess.Popen[bytes]], grace: float = 3.0) -> None:
    """SIGTERM each process group we started, newest first, SIGKILL after ``grace`` seconds, and reap.

    Newest first: kube-apiserver before etcd, else the apiserver's shutdown waits on a dead etcd.
    3 s: an apiserver logs "apiserver is exiting" about 1 s after SIGTERM, but after the suite (a
    compacted etcd, watch caches behind it) the process then lingered another 8-9 s in storage-stats
    calls that time out; its data is throwaway, so it is not waited for.

    Only groups whose leader we have not reaped yet are signalled: an unreaped child keeps its pid,
    so its group id cannot have been reused by an unrelated process.
    """
    for proc in reversed(procs):
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# ---------------------------------------------------------------------------------------------- certs


@dataclass(frozen=True)
class CertPair:
    """A PEM certificate and its PEM private key."""

    cert_pem: bytes
    key_pem: bytes

    def write(self, directory: str | Path, stem: str) -> tuple[Path, Path]:
        """Write ``stem.crt`` and ``stem.key`` (mode 0600) into ``directory``; return both paths."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        crt, key = d / f"{stem}.crt", d / f"{stem}.key"
        crt.write_bytes(self.cert_pem)
        key.touch(mode=0o600)
        key.write_bytes(self.key_pem)
        return crt, key


class CertificateAuthority:
    """A throwaway ECDSA P-256 CA. It signs the apiserver, admin and (for tests) webhook certificates."""

    def __init__(self, common_name: str = "controlplane-test-ca") -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = dt.datetime.now(dt.UTC)
        self._name = name
        self.cert = (
            x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self.cert_pem = self.cert.public_bytes(serialization.Encoding.PEM)
        self.key_pem = _key_pem(self._key)

    def issue(
        self, common_name: str, *, organizations: Sequence[str] = (), ips: Sequence[str] = (),
        dns_names: Sequence[str] = (), server: bool = False, client: bool = False, days: int = 3650,
    ) -> CertPair:
        """A leaf certificate. ``server`` and ``client`` select the extended key usages."""
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        now = dt.datetime.now(dt.UTC)
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + ([ExtendedKeyUsageOID.CLIENT_AUTH]
                                                                          if client else [])
        builder = (
            x509.CertificateBuilder().subject_name(x509.Name(attrs)).issuer_name(self._name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False, key_cert_sign=False,
                                         crl_sign=False, content_commitment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), critical=False)
        )
        if usages:
            builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        sans += [x509.DNSName(d) for d in dns_names]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return CertPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


# ------------------------------------------------------------------------------------------------ REST


class _Discovery:
    """apiVersion -> kind -> (plural, namespaced), fetched lazily and refetched on a miss (new CRDs)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_gv: dict[str, dict[str, tuple[str, bool]]] = {}

    def lookup(self, http: KubeHTTP, api_version: str, kind: str) -> tuple[str, bool]:
        with self._lock:
            known = self._by_gv.get(api_version)
        if known is None or kind not in known:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            try:
                res = http.request("GET", base)
            except KubeError as exc:
                if exc.status == 404:
                    raise KeyError(f"apiVersion {api_version} is not served") from exc
                raise
            known = {r["kind"]: (r["name"], bool(r["namespaced"])) for r in res.get("resources", [])
                     if "/" not in r["name"]}
            with self._lock:
                self._by_gv[api_version] = known
        if kind not in known:
            raise KeyError(f"kind {kind} is not served in {api_version}")
        return known[kind]

    def invalidate(self) -> None:
        with self._lock:
            self._by_gv.clear()


class KubeHTTP:
    """Plain JSON REST against the apiserver, as the admin or as an impersonated user.

    Why not the generated client for everything: dicts compare directly with YAML manifests, any kind
    works (CRDs included) without a dynamic-client discovery cache on disk, and impersonation with
    several groups needs repeated ``Impersonate-Group`` headers, which ``ApiClient`` cannot send.
    """

    def __init__(
        self, base_url: str, *, ca_file: str | Path, cert_file: str | Path | None = None,
        key_file: str | Path | None = None, bearer_token: str | None = None, as_user: str | None = None,
        as_groups: Sequence[str] = (), timeout: float = 30.0, discovery: _Discovery | None = None,
        pool: urllib3.PoolManager | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.as_user, self.as_groups = as_user, tuple(as_groups)
        self.timeout = timeout
        self._discovery = discovery or _Discovery()
        self._pool = pool or urllib3.PoolManager(
            maxsize=16, cert_reqs="CERT_REQUIRED", ca_certs=str(ca_file),
            cert_file=str(cert_file) if cert_file else None, key_file=str(key_file) if key_file else None,
        )
        self._base_headers = urllib3.HTTPHeaderDict({"Accept": "application/json", "User-Agent": "controlplane.py"})
        if bearer_token:
            self._base_headers["Authorization"] = f"Bearer {bearer_token}"
        if as_user:
            self._base_headers["Impersonate-User"] = as_user
        for g in self.as_groups:
            self._base_headers.add("Impersonate-Group", g)

    def impersonate(self, user: str, groups: Sequence[str] = ()) -> KubeHTTP:
        """The same connection pool, acting as ``user`` (e.g. ``system:serviceaccount:ns:sa``).

        For a service-account user with no ``groups``, the apiserver itself adds ``system:serviceaccounts``
        and ``system:serviceaccounts:<ns>``; ``system:authenticated`` is always added.
        """
        clone = copy.copy(self)
        clone.as_user, clone.as_groups = user, tuple(groups)
        clone._base_headers = urllib3.HTTPHeaderDict({k: v for k, v in self._base_headers.items()
                                                      if not k.lower().startswith("impersonate-")})
        clone._base_headers["Impersonate-User"] = user
        for g in groups:
            clone._base_headers.add("Impersonate-Group", g)
        return clone

    # -- transport

    def request(
        self, method: str, path: str, body: Any = None, *, query: Mapping[str, Any] | None = None,
        content_type: str = "application/json", timeout: float | None = None, raw: bool = False,
    ) -> Any:
        """One HTTP call; JSON in and out. Raises :class:`KubeError` on a non-2xx answer."""
        url = self.base_url + path
        if query:
            url += "?" + urlencode({k: v for k, v in query.items() if v is not None}, doseq=True)
        headers = urllib3.HTTPHeaderDict(self._base_headers)
        data: bytes | None = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = content_type
        resp = self._pool.request(method, url, body=data, headers=headers, timeout=timeout or self.timeout,
                                  retries=False)
        if raw and resp.status < 300:
            return resp.data
        try:
            decoded = json.loads(resp.data) if resp.data else {}
        except ValueError:
            decoded = resp.data.decode(errors="replace")
        if resp.status >= 300:
            raise KubeError(method, path, resp.status, decoded)
        return decoded

    # -- paths

    def path_for(
        self, api_version: str, kind: str, namespace: str | None = None, name: str | None = None,
        subresource: str | None = None,
    ) -> str:
        """The REST path of a collection or object, by discovery (refreshed when a kind is unknown)."""
        plural, namespaced = self._discovery.lookup(self, api_version, kind)
        p = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        if namespaced:
            p += f"/namespaces/{quote(namespace or 'default')}"
        p += f"/{plural}"
        if name:
            p += f"/{quote(name)}"
            if subresource:
                p += f"/{subresource}"
        return p

    def _obj_path(self, obj: Mapping[str, Any], *, with_name: bool = True, subresource: str | None = None) -> str:
        meta = obj.get("metadata", {})
        return self.path_for(obj["apiVersion"], obj["kind"], meta.get("namespace"),
                             meta.get("name") if with_name else None, subresource)

    # -- verbs

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> JSON:
        return self.request("GET", self.path_for(api_version, kind, namespace, name))

    def get_or_none(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> JSON | None:
        try:
            return self.get(api_version, kind, name, namespace)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, api_version: str, kind: str, namespace: str | None = None, **query: Any) -> JSON:
        """The List object (``items`` and ``metadata.resourceVersion``); ``query`` e.g. labelSelector=..."""
        return self.request("GET", self.path_for(api_version, kind, namespace), query=query)

    def create(self, obj: Mapping[str, Any], *, dry_run: bool = False, field_validation: str | None = None) -> JSON:
        """POST; works with ``generateName``. ``dry_run`` runs all admission (webhooks too) and stores nothing."""
        query = {"dryRun": "All" if dry_run else None, "fieldValidation": field_validation}
        return self.request("POST", self._obj_path(obj, with_name=False), dict(obj), query=query)

    def replace(self, obj: Mapping[str, Any], *, subresource: str | None = None) -> JSON:
        """PUT (needs ``metadata.resourceVersion`` unless the kind allows unconditional update)."""
        return self.request("PUT", self._obj_path(obj, subresource=subresource), dict(obj))

    def patch(self, obj_ref: Mapping[str, Any], patch: Any, *, kind: str = "merge",
              subresource: str | None = None, dry_run: bool = False) -> JSON:
        """PATCH with ``kind`` = merge | strategic | json (an RFC 6902 list); ``obj_ref`` names the object."""
        ctype = {"merge": "application/merge-patch+json", "strategic": "application/strategic-merge-patch+json",
                 "json": "application/json-patch+json"}[kind]
        return self.request("PATCH", self._obj_path(obj_ref, subresource=subresource), patch, content_type=ctype,
                            query={"dryRun": "All" if dry_run else None})

    def apply(self, objs: Mapping[str, Any] | Iterable[Mapping[str, Any]], *, server_side: bool = False,
              field_manager: str = "controlplane", dry_run: bool = False) -> builtins.list[JSON]:
        """Create each object, or replace it (GET resourceVersion + PUT) when it exists; return what is stored.

        Why create-or-replace by default: it is what a test means by "make it exactly this", and it is
        cheap. Server-side apply (``server_side=True``, force) merges with fields owned by others instead,
        but costs far more on big objects: re-applying an unchanged 1.3 MB CRD takes ~7 s against ~1.5 s
        for a PUT. Objects with only ``generateName`` are always created. ``status`` in a manifest is
        ignored for kinds with a status subresource (write it with :meth:`update_status`).
        """
        items = [objs] if isinstance(objs, Mapping) else list(objs)
        dry = {"dryRun": "All" if dry_run else None}
        out = []
        for obj in items:
            if not obj.get("metadata", {}).get("name"):
                out.append(self.create(obj, dry_run=dry_run))
            elif server_side:
                query = {"fieldManager": field_manager, "force": "true", **dry}
                out.append(self.request("PATCH", self._obj_path(obj), dict(obj), query=query,
                                        content_type="application/apply-patch+yaml"))
            else:
                out.append(self._create_or_replace(obj, dry))
        return out

    def _create_or_replace(self, obj: Mapping[str, Any], dry: Mapping[str, Any]) -> JSON:
        try:
            return self.request("POST", self._obj_path(obj, with_name=False), dict(obj), query=dry)
        except KubeError as exc:
            if exc.status != 409 or exc.reason != "AlreadyExists":
                raise
        for attempt in range(5):
            cur = self.request("GET", self._obj_path(obj))
            body = copy.deepcopy(dict(obj))
            body["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
            try:
                return self.request("PUT", self._obj_path(obj), body, query=dry)
            except KubeError as exc:  # someone else wrote in between: re-read and retry
                if exc.status != 409 or attempt == 4:
                    raise
        raise AssertionError("unreachable")

    def update_status(self, obj: Mapping[str, Any]) -> JSON:
        """Write ``obj.status`` through the status subresource, as a kubelet or controller would.

        ``obj`` may omit ``metadata.resourceVersion``: the current one is fetched and used (last write wins).
        """
        body = copy.deepcopy(dict(obj))
        if not body.get("metadata", {}).get("resourceVersion"):
            cur = self.request("GET", self._obj_path(obj))
            body["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
        return self.request("PUT", self._obj_path(obj, subresource="status"), body)

    def delete(self, obj_ref: Mapping[str, Any], *, missing_ok: bool = True, propagation: str | None = None) -> None:
        """DELETE one object; with no controller-manager, dependents are NOT garbage-collected."""
        body = {"propagationPolicy": propagation} if propagation else None
        try:
            self.request("DELETE", self._obj_path(obj_ref), body)
        except KubeError as exc:
            if not (missing_ok and exc.status == 404):
                raise

    def watch(self, api_version: str, kind: str, namespace: str | None = None, *, resource_version: str | None = None,
              timeout_seconds: int = 5, **query: Any) -> Iterator[JSON]:
        """Stream watch events (``{"type", "object"}``) until the server ends the watch after ``timeout_seconds``.

        An expired ``resource_version`` arrives as ``{"type": "ERROR", "object": Status(code=410)}`` on an
        HTTP 200 stream, not as an HTTP error: that is what an informer's relist logic must handle.
        """
        q = {"watch": "1", "resourceVersion": resource_version, "timeoutSeconds": str(timeout_seconds), **query}
        url = self.base_url + self.path_for(api_version, kind, namespace) + "?" + urlencode(
            {k: v for k, v in q.items() if v is not None})
        resp = self._pool.request("GET", url, headers=urllib3.HTTPHeaderDict(self._base_headers), preload_content=False,
                                  timeout=urllib3.Timeout(connect=self.timeout, read=timeout_seconds + 30),
                                  retries=False)
        try:
            if resp.status >= 300:
                data = resp.read()
                raise KubeError("WATCH", url, resp.status, json.loads(data) if data else {})
            buf = b""
            for chunk in resp.stream(65536):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
            if buf.strip():
                yield json.loads(buf)
        finally:
            resp.release_conn()

    def invalidate_discovery(self) -> None:
        self._discovery.invalidate()


# ----------------------------------------------------------------------------------------- control plane


class ControlPlane:
    """etcd + kube-apiserver on free loopback ports, started from ``assets_dir`` (or ``$KUBEBUILDER_ASSETS``).

    Use as a context manager or call :meth:`start` / :meth:`stop`. Flags follow the project's
    ``control-plane`` script: RBAC authorization, a client-certificate admin in ``system:masters``,
    service-account signing keys, service CIDR 10.96.0.0/16. ``extra_args`` are appended to the
    apiserver flags (a later flag wins), e.g. ``["--feature-gates=GenericWorkload=true",
    "--runtime-config=scheduling.k8s.io/v1alpha2=true"]``.

    The processes are started in their own process groups (so the test runner's Ctrl-C does not reach
    them half-way) and are asked to die with the starting thread (``PR_SET_PDEATHSIG``); :meth:`stop`,
    a failed :meth:`start`, garbage collection and interpreter exit all terminate exactly those groups.
    """

    def __init__(
        self, assets_dir: str | Path | None = None, *, run_dir: str | Path | None = None,
        extra_args: Sequence[str] = (), etcd_args: Sequence[str] = (), etcd_in_memory: bool = True,
        ready_timeout: float = 90.0, keep_run_dir: bool = False,
    ) -> None:
        """Configure; nothing starts before :meth:`start`.

        ``assets_dir`` defaults to ``$KUBEBUILDER_ASSETS``. ``etcd_in_memory`` puts etcd's data on
        /dev/shm: no fsync cost on slow CI disks (on this machine's disk it made little difference).
        ``run_dir`` (default: a fresh temporary folder, deleted by :meth:`stop` unless ``keep_run_dir``)
        receives ``pki/``, ``kubeconfig`` and the two logs.
        """
        assets = Path(assets_dir) if assets_dir else assets_from_env()
        missing = [b for b in ("kube-apiserver", "etcd") if assets is None or not os.access(assets / b, os.X_OK)]
        if assets is None or missing:
            raise ControlPlaneError(f"no executable {' and '.join(missing)} in {assets or '$' + ASSETS_ENV}: set "
                                    f"{ASSETS_ENV} to a folder with kube-apiserver and etcd")
        self.assets = assets.resolve()
        self.extra_args = list(extra_args)
        self.etcd_args = list(etcd_args)
        self.etcd_in_memory = etcd_in_memory and Path("/dev/shm").is_dir()
        self.ready_timeout = ready_timeout
        self.keep_run_dir = keep_run_dir
        self._run_dir_arg = Path(run_dir).resolve() if run_dir else None
        self.run_dir = self._run_dir_arg or Path(tempfile.gettempdir())  # the real one is made by start()
        self._procs: list[subprocess.Popen[bytes]] = []  # shared with the finalizer: mutate, never rebind
        self._paths: list[Path] = []  # removed by stop() / the finalizer
        self._etcd_data: Path | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._discovery = _Discovery()
        self._admin: KubeHTTP | None = None
        self.port = 0
        self.etcd_port = 0
        self.start_seconds: float | None = None
        self.stop_seconds: float | None = None
        self.ca: CertificateAuthority | None = None

    # -- lifecycle

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def kubeconfig(self) -> Path:
        """A kubeconfig file with the cluster-admin client certificate (for ``kubectl --kubeconfig``)."""
        return self.run_dir / "kubeconfig"

    @property
    def pki(self) -> Path:
        return self.run_dir / "pki"

    @property
    def ca_pem(self) -> bytes:
        assert self.ca is not None, "not started"
        return self.ca.cert_pem

    @property
    def pids(self) -> dict[str, int]:
        return {Path(cast("list[str]", p.args)[0]).name: p.pid for p in self._procs if p.poll() is None}

    def start(self, attempts: int = 3) -> ControlPlane:
        """Start etcd then kube-apiserver; return when ``/readyz`` answers 200. Retries port clashes.

        Any failure (including KeyboardInterrupt) stops what was started before the error propagates.
        """
        if self._procs:
            raise ControlPlaneError("already started")
        t0 = time.monotonic()
        _remove_orphaned_dirs()
        self.run_dir = self._run_dir_arg or Path(tempfile.mkdtemp(prefix=_RUN_PREFIX))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._paths.clear()
        if self._run_dir_arg is None and not self.keep_run_dir:
            self._paths.append(self.run_dir)
            (self.run_dir / "owner").write_text(str(os.getpid()))
        # Runs once: from stop(), or when this object is garbage-collected, or at interpreter exit.
        self._finalizer = weakref.finalize(self, _shutdown, self._procs, self._paths)
        try:
            self._write_pki()
            for attempt in range(attempts):
                try:
                    self._start_once()
                    break
                except ControlPlaneError as exc:
                    _terminate(self._procs)
                    self._procs.clear()
                    self._drop_etcd_data()
                    if "address already in use" not in str(exc).lower() or attempt == attempts - 1:
                        raise
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0
        return self

    def stop(self) -> float:
        """Terminate exactly the processes this object started (SIGTERM to each process group, apiserver
        first; SIGKILL after 3 s), remove the temporary directories, and return the seconds taken."""
        t0 = time.monotonic()
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
        self._etcd_data = None
        if self._admin is not None:
            self._admin._pool.clear()
        self.stop_seconds = time.monotonic() - t0
        return self.stop_seconds

    def _drop_etcd_data(self) -> None:
        if self._etcd_data is not None:
            shutil.rmtree(self._etcd_data, ignore_errors=True)
            with contextlib.suppress(ValueError):
                self._paths.remove(self._etcd_data)
            self._etcd_data = None

    def _write_pki(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.ca = CertificateAuthority()
        pki = self.pki
        pki.mkdir(exist_ok=True)
        (pki / "ca.crt").write_bytes(self.ca.cert_pem)
        (pki / "ca.key").touch(mode=0o600)
        (pki / "ca.key").write_bytes(self.ca.key_pem)
        self.ca.issue("kube-apiserver", server=True, ips=["127.0.0.1", "10.96.0.1"],
                      dns_names=["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"],
                      ).write(pki, "apiserver")
        self.ca.issue("admin", organizations=["system:masters"], client=True).write(pki, "admin")
        sa_key = ec.generate_private_key(ec.SECP256R1())  # ES256 service-account tokens
        (pki / "sa.key").touch(mode=0o600)
        (pki / "sa.key").write_bytes(_key_pem(sa_key))
        (pki / "sa.pub").write_bytes(sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))

    def _spawn(self, binary: str, args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [str(self.assets / binary), *args], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env=env, start_new_session=True, preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        self._procs.append(proc)
        suite_processes.register(proc)  # the suite's end sweeps it too, whatever happens to this object
        return proc

    def _start_once(self) -> None:
        self.etcd_port, peer, self.port = _free_port(), _free_port(), _free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("ETCD_")}  # etcd reads ETCD_* as flags
        if self.etcd_in_memory:
            self._etcd_data = Path(tempfile.mkdtemp(prefix=_SHM_PREFIX, dir="/dev/shm"))
            self._paths.append(self._etcd_data)
            (self._etcd_data / "owner").write_text(str(os.getpid()))
            data = self._etcd_data / "data"
            data.mkdir()
        else:
            data = Path(tempfile.mkdtemp(prefix="etcd-data-", dir=self.run_dir))
        data.chmod(0o700)
        etcd_log, kas_log = self.run_dir / "etcd.log", self.run_dir / "kube-apiserver.log"
        etcd = self._spawn("etcd", [
            "--name=test", f"--data-dir={data}",
            f"--listen-client-urls=http://127.0.0.1:{self.etcd_port}",
            f"--advertise-client-urls=http://127.0.0.1:{self.etcd_port}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}", f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=test=http://127.0.0.1:{peer}", "--initial-cluster-state=new",
            "--quota-backend-bytes=4294967296", "--log-level=warn", *self.etcd_args,
        ], etcd_log, env)
        pool = urllib3.PoolManager(retries=False, timeout=2.0)

        def etcd_healthy() -> bool:
            if etcd.poll() is not None:
                raise ControlPlaneError(f"etcd exited with {etcd.returncode}:\n{_tail(etcd_log)}")
            with contextlib.suppress(urllib3.exceptions.HTTPError):
                r = pool.request("GET", f"http://127.0.0.1:{self.etcd_port}/health")
                return r.status == 200 and json.loads(r.data).get("health") == "true"
            return False

        self._poll(etcd_healthy, "etcd /health", etcd_log)
        pki = self.pki
        kas = self._spawn("kube-apiserver", [
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            f"--secure-port={self.port}", "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--cert-dir={self.run_dir / 'kas-certs'}", f"--client-ca-file={pki / 'ca.crt'}",
            f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--service-account-key-file={pki / 'sa.pub'}", f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc", "--authorization-mode=RBAC",
            "--service-cluster-ip-range=10.96.0.0/16", "--allow-privileged=true", "--profiling=false", "--v=1",
            *self.extra_args,
        ], kas_log, os.environ.copy())
        admin = self.admin_http()

        def kas_ready() -> bool:
            if kas.poll() is not None:
                raise ControlPlaneError(f"kube-apiserver exited with {kas.returncode}:\n{_tail(kas_log)}")
            with contextlib.suppress(urllib3.exceptions.HTTPError, KubeError):
                admin.request("GET", "/readyz", raw=True, timeout=2.0)
                return True
            return False

        self._poll(kas_ready, "kube-apiserver /readyz", kas_log)
        self._write_kubeconfig()

    def _poll(self, ready: Callable[[], bool], what: str, log: Path) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while not ready():
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"{what} not ready after {self.ready_timeout:.0f}s:\n{_tail(log)}")
            time.sleep(0.05)

    def _write_kubeconfig(self) -> None:
        pki = self.pki

        def b64(name: str) -> str:
            return base64.b64encode((pki / name).read_bytes()).decode()

        cfg = {
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test",
                          "cluster": {"server": self.url, "certificate-authority-data": b64("ca.crt")}}],
            "users": [{"name": "admin", "user": {"client-certificate-data": b64("admin.crt"),
                                                 "client-key-data": b64("admin.key")}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin"}}],
        }
        self.kubeconfig.write_text(yaml.safe_dump(cfg))

    # -- clients

    def admin_http(self) -> KubeHTTP:
        """The raw REST client as cluster-admin (client certificate in ``system:masters``)."""
        if self._admin is None or self._admin.base_url != self.url:
            self._admin = KubeHTTP(self.url, ca_file=self.pki / "ca.crt", cert_file=self.pki / "admin.crt",
                                   key_file=self.pki / "admin.key", discovery=self._discovery)
        return self._admin

    @property
    def http(self) -> KubeHTTP:
        return self.admin_http()

    def http_as(self, user: str, groups: Sequence[str] = ()) -> KubeHTTP:
        """A raw REST client impersonating ``user`` (RBAC is evaluated by the real authorizer)."""
        return self.admin_http().impersonate(user, groups)

    def api_client(self, as_user: str | None = None, as_group: str | None = None) -> ApiClient:
        """A ``kubernetes.client.ApiClient`` as cluster-admin, or impersonating ``as_user`` (and one group).

        ``ApiClient`` keeps headers in a dict, so only one ``Impersonate-Group`` fits: use :meth:`http_as`
        or :meth:`can_i` for several groups. A service-account user gets its groups from the apiserver.
        """
        from kubernetes import client as k8s

        conf = k8s.Configuration()
        conf.host = self.url
        conf.ssl_ca_cert = str(self.pki / "ca.crt")
        conf.cert_file = str(self.pki / "admin.crt")
        conf.key_file = str(self.pki / "admin.key")
        conf.verify_ssl = True
        api = k8s.ApiClient(conf)
        if as_user:
            api.set_default_header("Impersonate-User", as_user)
        if as_group:
            api.set_default_header("Impersonate-Group", as_group)
        return api

    def service_account_kubeconfig(self, path: str | Path, namespace: str, name: str, seconds: int = 3600) -> Path:
        """A kubeconfig that authenticates as a ServiceAccount with a real bound token (TokenRequest API).

        Why not impersonation: a process under test (a server, a controller) then runs exactly as it would
        in a Pod, every call authenticated and authorized as that account by the real authorizer.
        """
        req = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": seconds}}
        token = self.http.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", req)[
            "status"]["token"]
        cfg = {
            "apiVersion": "v1", "kind": "Config", "current-context": name,
            "clusters": [{"name": "test", "cluster": {
                "server": self.url, "certificate-authority-data": base64.b64encode(self.ca_pem).decode()}}],
            "users": [{"name": name, "user": {"token": token}}],
            "contexts": [{"name": name, "context": {"cluster": "test", "user": name, "namespace": namespace}}],
        }
        out = Path(path)
        out.write_text(yaml.safe_dump(cfg))
        out.chmod(0o600)
        return out

    def compact_etcd(self) -> int:
        """Compact etcd at its current revision (what the apiserver does every --etcd-compaction-interval); return it.

        A watch that the apiserver serves from etcd (a resource whose watch cache is off, e.g. with
        ``--watch-cache-sizes=nodes#0``) from an older resourceVersion then gets 410 Gone. Uses etcd's
        v3 JSON gateway on the client port.
        """
        pool = urllib3.PoolManager(retries=False, timeout=10.0)
        base = f"http://127.0.0.1:{self.etcd_port}/v3/kv"
        key = base64.b64encode(b"/").decode()
        revision = int(json.loads(pool.request("POST", f"{base}/range", body=json.dumps({"key": key, "limit": 1}))
                                  .data)["header"]["revision"])
        answer = pool.request("POST", f"{base}/compaction", body=json.dumps({"revision": revision, "physical": True}))
        if answer.status != 200:
            raise ControlPlaneError(f"etcd compaction at {revision}: HTTP {answer.status} {answer.data[:200]!r}")
        return revision

    def can_i(self, user: str, verb: str, resource: str, *, group: str = "", namespace: str | None = None,
              name: str | None = None, subresource: str | None = None, groups: Sequence[str] = ()) -> bool:
        """Ask the real authorizer (SubjectAccessReview) whether ``user`` may ``verb`` the resource.

        For a service-account user with no ``groups``, the SA groups are filled in as the apiserver's
        authenticator would (SubjectAccessReview does not add them by itself).
        """
        if not groups and user.startswith("system:serviceaccount:"):
            ns = user.split(":")[2]
            groups = ["system:serviceaccounts", f"system:serviceaccounts:{ns}", "system:authenticated"]
        attrs = {"verb": verb, "resource": resource, "group": group, "namespace": namespace, "name": name,
                 "subresource": subresource}
        sar = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
               "spec": {"user": user, "groups": list(groups),
                        "resourceAttributes": {k: v for k, v in attrs.items() if v}}}
        res = self.http.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", sar)
        return bool(res["status"].get("allowed"))

    # -- objects

    def apply(self, objs: Mapping[str, Any] | Iterable[Mapping[str, Any]], **kw: Any) -> list[JSON]:
        """Create-or-replace as the admin (see :meth:`KubeHTTP.apply`)."""
        return self.http.apply(objs, **kw)

    def ensure_namespace(self, name: str, labels: Mapping[str, str] | None = None,
                         service_accounts: Sequence[str] = ("default",)) -> JSON:
        """Create or update a namespace and its ServiceAccounts (``default`` unless told otherwise).

        Why: with no controller-manager nobody creates the ``default`` ServiceAccount, and the
        ServiceAccount admission plugin refuses Pods without one ("serviceaccount "default" not found").
        The alternative is starting with ``--disable-admission-plugins=ServiceAccount``. Deleted
        namespaces stay Terminating forever here, so prefer a fresh namespace per test.
        """
        ns: JSON = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        if labels:
            ns["metadata"]["labels"] = dict(labels)
        out = self.apply(ns)[0]
        self.apply([{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa, "namespace": name}}
                    for sa in service_accounts])
        return out

    def install_crds(self, *paths: str | Path | Mapping[str, Any], timeout: float = 120.0) -> list[str]:
        """Apply every CustomResourceDefinition in ``paths``; return when each is Established and served.

        Cost grows with schema size: a CRD that embeds a PodTemplateSpec (JobSet, MPIJob, RayJob, ...)
        takes 1-4 s of apiserver CPU and ~40-110 MiB of apiserver memory; small ones ~0.1 s. Install
        them once per session; a CRD whose spec is unchanged (tracked by an annotation) is not rewritten.

        "Established" alone is not enough: discovery (and so REST paths of the new kind) can lag a moment,
        so this also waits until ``/apis/<group>/<version>`` lists the plural for every served version.
        """
        crds = [d for d in load_manifests(*paths) if d.get("kind") == "CustomResourceDefinition"]
        http = self.http
        applied: list[JSON] = []
        for crd in crds:  # skip unchanged CRDs: each write of a big CRD costs the apiserver 1-4 s of CPU
            digest = hashlib.sha256(json.dumps(crd["spec"], sort_keys=True).encode()).hexdigest()
            crd.setdefault("metadata", {}).setdefault("annotations", {})[_CRD_HASH_ANNOTATION] = digest
            cur = http.get_or_none("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd["metadata"]["name"])
            if cur is not None and cur["metadata"].get("annotations", {}).get(_CRD_HASH_ANNOTATION) == digest:
                applied.append(cur)
            else:
                applied.append(self.apply(crd)[0])

        def ready(crd: JSON) -> bool:
            cur = http.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd["metadata"]["name"])
            conds = {c["type"]: c["status"] for c in cur.get("status", {}).get("conditions", [])}
            if conds.get("Established") != "True":
                return False
            spec = cur["spec"]
            for v in spec["versions"]:
                if v.get("served"):
                    res = http.request("GET", f"/apis/{spec['group']}/{v['name']}")
                    if spec["names"]["plural"] not in {r["name"] for r in res.get("resources", [])}:
                        return False
            return True

        for crd in applied:
            wait_until(functools.partial(ready, crd), timeout=timeout,
                       what=f"CRD {crd['metadata']['name']} established")
        http.invalidate_discovery()
        return [c["metadata"]["name"] for c in applied]

    # -- webhooks

    def register_webhooks(self, manifests: str | Path | Iterable[Mapping[str, Any]], base_url: str,
                          ca_pem: bytes | None = None) -> list[JSON]:
        """Apply the webhook configurations of ``manifests`` with clientConfig pointed at ``base_url``.

        The apiserver picks new configurations up asynchronously (an informer): follow this with
        :meth:`wait_webhooks_active` before relying on them.
        """
        docs = load_manifests(manifests) if isinstance(manifests, str | Path) else list(manifests)
        return self.apply(webhook_configs_for_url(docs, base_url, ca_pem or self.ca_pem))

    def webhook_calls(self) -> dict[str, float]:
        """webhook name -> number of calls the apiserver made to it so far (from its ``/metrics``).

        Counts every call, whatever the outcome (``apiserver_admission_webhook_admission_duration_seconds``
        is observed for allowed, rejected, and failed calls alike).
        """
        text = self.http.request("GET", "/metrics", raw=True).decode()
        counts: dict[str, float] = {}
        for m in re.finditer(r'^apiserver_admission_webhook_admission_duration_seconds_count\{([^}]*)\} (\S+)$',
                             text, re.M):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            counts[labels.get("name", "")] = counts.get(labels.get("name", ""), 0.0) + float(m.group(2))
        return counts

    def wait_webhooks_active(self, probes: Mapping[str, Any] | Sequence[Mapping[str, Any]],
                             webhook_names: Iterable[str], *, timeout: float = 30.0,
                             interval: float = 0.05) -> float:
        """Dry-run-create ``probes`` until the apiserver has called every webhook in ``webhook_names``.

        Why: the apiserver serves admission from an informer cache of webhook configurations, so a
        configuration just created is honoured only a moment later. A dry-run create goes through all of
        admission (webhooks included, when they declare ``sideEffects: None``) and stores nothing; the
        apiserver's own call counters say whether each webhook was reached, whatever the webhook
        answered and whether the probe was refused. The probes must match the webhooks' rules,
        namespaceSelector and matchConditions. Returns the seconds it took.
        """
        items = [probes] if isinstance(probes, Mapping) else list(probes)
        names = set(webhook_names)
        t0 = time.monotonic()
        before = self.webhook_calls()

        def active() -> bool:
            for p in items:
                with contextlib.suppress(KubeError):
                    self.http.create(p, dry_run=True)
            now = self.webhook_calls()
            return all(now.get(n, 0.0) > before.get(n, 0.0) for n in names)

        wait_until(active, timeout=timeout, interval=interval, what=f"webhooks {sorted(names)} to be called")
        return time.monotonic() - t0

    # -- diagnostics

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(f"--- {n}\n{_tail(self.run_dir / n, lines)}" for n in ("etcd.log", "kube-apiserver.log"))


# ------------------------------------------------------------------ scheduler and controller-manager

SCHEDULING_BINARIES = ("kube-scheduler", "kube-controller-manager")
# OpenShift's controller-manager (the workplace's binaries) has this extra controller, which writes an
# OpenShift ConfigMap into every namespace; upstream's has no such controller and refuses its name.
_OPENSHIFT_CONTROLLER = "service-ca-certificate-publisher-controller"
# No kubelet ever heartbeats: with the default grace periods the node-lifecycle controller marks every
# Node Unknown after about 50 s and taints it unreachable. With these it never does, yet it still lifts
# the not-ready taint admission puts on a new Node and taints a Node a test posts Ready=False.
_NODE_GRACE = ("--node-monitor-grace-period=87600h", "--node-startup-grace-period=87600h")


def scheduling_assets_from_env() -> Path | None:
    """The ``KUBEBUILDER_ASSETS`` folder if it also holds kube-scheduler and kube-controller-manager.

    envtest's own assets (setup-envtest) have only kube-apiserver, etcd and kubectl: tests that need
    Pods made by controllers and bound by a scheduler skip there.
    """
    assets = assets_from_env()
    if assets is None or not all(os.access(assets / b, os.X_OK) for b in SCHEDULING_BINARIES):
        return None
    return assets


@dataclass(frozen=True)
class ClusterFeatures:
    """What one control plane with controllers runs with: feature gates (on every component, as a
    cluster sets them) and API versions served (``--runtime-config``). ``name`` names the configuration
    (tests that share one configuration share one control plane)."""

    name: str
    feature_gates: tuple[str, ...] = ()
    runtime_config: tuple[str, ...] = ()
    apiserver_args: tuple[str, ...] = ()
    controller_manager_args: tuple[str, ...] = ()
    scheduler_args: tuple[str, ...] = ()

    @property
    def gate_flag(self) -> list[str]:
        return [f"--feature-gates={','.join(f'{g}=true' for g in self.feature_gates)}"] if self.feature_gates else []


class SchedulingControlPlane(ControlPlane):
    """etcd, kube-apiserver, kube-controller-manager and kube-scheduler: Jobs get Pods from the real Job
    controller, Pods get bound by the real scheduler, owned objects are garbage-collected, new
    namespaces get their ``default`` ServiceAccount. There is still no kubelet: a bound Pod stays
    Pending (write its status through the status subresource), and a Pod that has not ended stays
    Terminating when deleted (:meth:`force_delete_pods`).

    Flags follow the workplace's ``control-plane`` script: each component with its own client
    certificate (``system:kube-controller-manager``, ``system:kube-scheduler``, bound by the
    apiserver's bootstrap RBAC, as kubeadm sets them up), each controller with its own ServiceAccount
    (``--use-service-account-credentials``: the Pods a webhook sees are created by
    ``system:serviceaccount:kube-system:job-controller``), ``--leader-elect=false``, the node grace
    periods above, the flex-volume directory inside the run dir (else the controller-manager creates
    one under /usr/libexec on the host). Started after the apiserver, stopped before it.
    """

    def __init__(self, assets_dir: str | Path | None = None, *, features: ClusterFeatures, **kw: Any) -> None:
        self.features = features
        extra = [*features.gate_flag, *(f"--runtime-config={r}" for r in features.runtime_config),
                 *features.apiserver_args, *kw.pop("extra_args", ())]
        super().__init__(assets_dir, extra_args=extra, **kw)
        missing = [b for b in SCHEDULING_BINARIES if not os.access(self.assets / b, os.X_OK)]
        if missing:
            raise ControlPlaneError(f"no executable {' and '.join(missing)} in {self.assets}")
        self.component_ports: dict[str, int] = {}
        self.component_seconds: float | None = None

    def start(self, attempts: int = 3) -> SchedulingControlPlane:
        super().start(attempts)
        t0 = time.monotonic()
        try:
            self._start_components()
        except BaseException:
            self.stop()
            raise
        self.component_seconds = time.monotonic() - t0
        self.start_seconds = (self.start_seconds or 0.0) + self.component_seconds
        return self

    def _component_kubeconfig(self, who: str) -> Path:
        assert self.ca is not None
        crt, key = self.ca.issue(f"system:{who}", client=True).write(self.pki, who)
        cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "test",
               "clusters": [{"name": "test", "cluster": {"server": self.url, "certificate-authority": str(
                   self.pki / "ca.crt")}}],
               "users": [{"name": who, "user": {"client-certificate": str(crt), "client-key": str(key)}}],
               "contexts": [{"name": "test", "context": {"cluster": "test", "user": who}}]}
        path = self.run_dir / f"{who}.kubeconfig"
        path.write_text(yaml.safe_dump(cfg))
        return path

    def _serving_args(self, who: str) -> list[str]:
        assert self.ca is not None
        if not (self.pki / "serving.crt").exists():
            self.ca.issue("localhost", server=True, ips=["127.0.0.1"], dns_names=["localhost"]).write(self.pki, "serving")
        kubeconfig, port = self._component_kubeconfig(who), _free_port()
        self.component_ports[who] = port
        return [f"--kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1", f"--secure-port={port}", f"--tls-cert-file={self.pki / 'serving.crt'}",
                f"--tls-private-key-file={self.pki / 'serving.key'}", f"--client-ca-file={self.pki / 'ca.crt'}",
                "--leader-elect=false", "--profiling=false", "--v=1"]

    def _controllers(self) -> str:
        """``*``, less OpenShift's publisher controller where the binary has it."""
        try:
            out = subprocess.run([str(self.assets / "kube-controller-manager"), "--help"], capture_output=True,
                                 timeout=30, check=False).stdout
        except (OSError, subprocess.TimeoutExpired):
            out = b""
        return f"*,-{_OPENSHIFT_CONTROLLER}" if _OPENSHIFT_CONTROLLER.encode() in out else "*"

    def _start_components(self) -> None:
        pki, env = self.pki, os.environ.copy()
        flex = self.run_dir / "flexvolume"
        flex.mkdir(exist_ok=True)
        kcm_log, sched_log = self.run_dir / "kube-controller-manager.log", self.run_dir / "kube-scheduler.log"
        kcm = self._spawn("kube-controller-manager", [
            *self._serving_args("kube-controller-manager"), f"--controllers={self._controllers()}",
            "--use-service-account-credentials=true", f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}", f"--cluster-signing-cert-file={pki / 'ca.crt'}",
            f"--cluster-signing-key-file={pki / 'ca.key'}", f"--flex-volume-plugin-dir={flex}", *_NODE_GRACE,
            *self.features.gate_flag, *self.features.controller_manager_args,
        ], kcm_log, env)
        sched = self._spawn("kube-scheduler", [
            *self._serving_args("kube-scheduler"), *self.features.gate_flag, *self.features.scheduler_args,
        ], sched_log, env)
        pool = urllib3.PoolManager(retries=False, timeout=2.0, cert_reqs="CERT_REQUIRED", ca_certs=str(pki / "ca.crt"))
        admin = self.admin_http()

        def healthy(proc: subprocess.Popen[bytes], log: Path, path: str, accept: Callable[[str], bool]) -> bool:
            if proc.poll() is not None:
                raise ControlPlaneError(f"{Path(cast('list[str]', proc.args)[0]).name} exited with "
                                        f"{proc.returncode}:\n{_tail(log)}")
            port = self.component_ports[Path(cast("list[str]", proc.args)[0]).name]
            with contextlib.suppress(urllib3.exceptions.HTTPError):
                r = pool.request("GET", f"https://127.0.0.1:{port}{path}")
                return r.status == 200 and accept(r.data.decode(errors="replace"))
            return False

        def kcm_ready() -> bool:
            """Its controllers are built and starting, and the serviceaccount controller made default/default
            (the ServiceAccount admission plugin refuses Pods in a namespace without it)."""
            if not healthy(kcm, kcm_log, "/healthz?verbose", lambda text: "-controller ok" in text):
                return False
            return admin.get_or_none("v1", "ServiceAccount", "default", "default") is not None

        self._poll(kcm_ready, "kube-controller-manager /healthz", kcm_log)
        self._poll(lambda: healthy(sched, sched_log, "/readyz", lambda _: True), "kube-scheduler /readyz", sched_log)

    def ensure_namespace(self, name: str, labels: Mapping[str, str] | None = None,
                         service_accounts: Sequence[str] = ()) -> JSON:
        """Create the namespace and wait for the ``default`` ServiceAccount its controller makes."""
        out = super().ensure_namespace(name, labels, service_accounts)
        wait_until(lambda: self.http.get("v1", "ServiceAccount", "default", name), timeout=60,
                   what=f"ServiceAccount {name}/default")
        return out

    def force_delete_pods(self, namespace: str, label_selector: str | None = None) -> int:
        """Delete Pods with grace period 0, as ``kubectl delete --grace-period=0 --force`` does: without a
        kubelet nothing ever confirms a running Pod's end, so a plain delete leaves it Terminating for good,
        holding its node's resources. Returns how many were deleted."""
        pods = self.http.list("v1", "Pod", namespace, labelSelector=label_selector)["items"]
        for pod in pods:
            with contextlib.suppress(KubeError):
                self.http.request("DELETE", self.http.path_for("v1", "Pod", namespace, pod["metadata"]["name"]),
                                  {"gracePeriodSeconds": 0})
        return len(pods)

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(f"--- {n}\n{_tail(self.run_dir / n, lines)}" for n in (
            "etcd.log", "kube-apiserver.log", "kube-controller-manager.log", "kube-scheduler.log"))
