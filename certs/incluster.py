"""In-cluster certificate mode: create the TLS Secret when absent, keep it rotated, inject the CA.

An alternative to cert-manager. Every replica runs the loop, but only the holder of a
``coordination.k8s.io`` Lease writes: the others keep checking the Lease and take over when its
holder stops renewing it. Writes carry the ``resourceVersion`` they read, so two writers can never
overwrite each other silently (the loser gets 409 Conflict and retries on the next pass). The
replicas themselves pick the new files up through the Secret volume mount (``runtime.CertStore``).
"""

from __future__ import annotations

import base64
import datetime as dt
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..cluster.kube import Permission
from ..cluster.lease import CERTS_LEASE
from . import pki

SECRET_KEYS = ("tls.crt", "tls.key", "ca.crt", "ca.key")
SECRET = "trainadmit-tls"
WEBHOOK_CONFIGURATION = "trainadmit"
# what reconcile() and inject_live() call (deploy/base/rbac.yaml grants exactly this, with the Lease's)
PERMISSIONS: tuple[Permission, ...] = (
    Permission("", "secrets", ("get", "update"), (SECRET,), namespaced=True),
    Permission("", "secrets", ("create",), namespaced=True),  # create cannot be limited by name
    Permission("admissionregistration.k8s.io", "mutatingwebhookconfigurations", ("get", "update"),
               (WEBHOOK_CONFIGURATION,)),
    Permission("admissionregistration.k8s.io", "validatingwebhookconfigurations", ("get", "update"),
               (WEBHOOK_CONFIGURATION,)),
)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@dataclass
class CertController:
    core: object  # kubernetes.client.CoreV1Api
    coordination: object  # kubernetes.client.CoordinationV1Api
    admission: object  # kubernetes.client.AdmissionregistrationV1Api
    namespace: str = "trainadmit-system"
    service: str = "trainadmit"
    secret: str = SECRET
    lease: str = CERTS_LEASE
    webhook: str = WEBHOOK_CONFIGURATION
    identity: str = "trainadmit"
    lease_seconds: int = 60
    clock: Callable[[], dt.datetime] = pki.utcnow
    log: Callable[[str], None] = print

    def __post_init__(self) -> None:
        from ..cluster.lease import LeaderLease

        self._lease = LeaderLease(self.coordination, self.namespace, self.lease, self.identity, self.lease_seconds,
                                  self.clock, lambda m: self.log(f"certs: {m}"))

    def hold_lease(self) -> bool:
        """Acquire or renew the Lease; True when this replica may write."""
        return self._lease.hold()

    # ---- the Secret --------------------------------------------------------------------------
    def reconcile(self) -> str:
        """One pass as leader: create or rotate the Secret, then make the caBundle match it."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        now = self.clock()
        with tempfile.TemporaryDirectory(prefix="trainadmit-certs-") as tmp:
            d = Path(tmp)
            try:
                secret = self.core.read_namespaced_secret(self.secret, self.namespace)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                secret = None
            if secret is None or not all(k in (secret.data or {}) for k in SECRET_KEYS):
                pki.issue(d, self.service, self.namespace, now=now)
                data = {k: _b64((d / k).read_bytes()) for k in SECRET_KEYS}
                if secret is None:
                    body = client.V1Secret(metadata=client.V1ObjectMeta(name=self.secret, namespace=self.namespace),
                                           type="kubernetes.io/tls", data=data)
                    try:
                        self.core.create_namespaced_secret(self.namespace, body)
                    except ApiException as exc:
                        if exc.status == 409:
                            return "secret created by another replica meanwhile"
                        raise
                    action = "created secret"
                else:
                    secret.data = data
                    self.core.replace_namespaced_secret(self.secret, self.namespace, secret)
                    action = "re-issued incomplete secret"
            else:
                for key in SECRET_KEYS:
                    pki.write_private(d / key, base64.b64decode(secret.data[key]))
                result = pki.rotate(d, now=now)
                action = result.reason
                if result.rotated_ca or result.rotated_serving or result.dropped_old_ca:
                    secret.data = {k: _b64((d / k).read_bytes()) for k in SECRET_KEYS}
                    try:
                        self.core.replace_namespaced_secret(self.secret, self.namespace, secret)
                    except ApiException as exc:
                        if exc.status == 409:
                            return "secret changed meanwhile; retrying next pass"
                        raise
            bundle = (d / "ca.crt").read_bytes()
        injected = self.inject(bundle)
        return action + (f"; {injected}" if injected else "")

    def inject(self, bundle: bytes) -> str:
        from .inject import inject_live

        return "; ".join(inject_live(self.admission, bundle, self.webhook))

    def step(self) -> str:
        if not self.hold_lease():
            return "not the lease holder"
        return self.reconcile()

    def run(self, stop: threading.Event, interval: float = 30.0) -> None:
        while not stop.is_set():
            try:
                message = self.step()
                if message != "not the lease holder" and message != "nothing due":
                    self.log(f"certs: {message}")
            except Exception as exc:
                self.log(f"certs: pass failed: {exc!r}")
            stop.wait(interval)


def from_kubeconfig(**kwargs) -> CertController:
    """A controller using the in-cluster service account (or the local kubeconfig)."""
    from kubernetes import client

    from ..cluster.kube import identity, load_config

    load_config()
    kwargs.setdefault("identity", identity())
    return CertController(client.CoreV1Api(), client.CoordinationV1Api(), client.AdmissionregistrationV1Api(),
                          **kwargs)
