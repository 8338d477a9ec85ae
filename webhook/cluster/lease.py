"""A coordination.k8s.io/v1 Lease: at most one replica acts at a time, another takes over when the
holder stops renewing. Used by the certificate controller, the PodGroup reconciler, the preflight status and the
placement gate's ungater.

The names of their Leases are here, where the certificate controller can import them without the engine
and the policy models (``access`` imports both); ``access.LEASE_PERMISSIONS`` grants them all."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

CERTS_LEASE = "trainadmit-certs"
RECONCILER_LEASE = "trainadmit-reconciler"
PREFLIGHT_STATUS_LEASE = "trainadmit-preflight-status"
PLACEMENT_LEASE = "trainadmit-placement"


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass
class LeaderLease:
    coordination: object  # kubernetes.client.CoordinationV1Api
    namespace: str
    name: str
    identity: str
    duration_seconds: int = 60
    clock: Callable[[], dt.datetime] = utcnow
    log: Callable[[str], None] = print

    def hold(self) -> bool:
        """Acquire or renew; True while this replica holds the Lease."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        now = self.clock()
        try:
            lease = self.coordination.read_namespaced_lease(self.name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            body = client.V1Lease(
                metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
                spec=client.V1LeaseSpec(holder_identity=self.identity, lease_duration_seconds=self.duration_seconds,
                                        acquire_time=now, renew_time=now, lease_transitions=0))
            try:
                self.coordination.create_namespaced_lease(self.namespace, body)
                return True
            except ApiException as exc2:
                if exc2.status == 409:
                    return False
                raise
        spec = lease.spec
        holder = spec.holder_identity
        renewed = spec.renew_time or spec.acquire_time
        expired = renewed is None or renewed + dt.timedelta(seconds=spec.lease_duration_seconds or 0) < now
        if holder != self.identity and not expired:
            return False
        if holder != self.identity:
            spec.holder_identity = self.identity
            spec.acquire_time = now
            spec.lease_transitions = (spec.lease_transitions or 0) + 1
            self.log(f"taking over lease {self.name} from {holder}")
        spec.renew_time = now
        try:
            self.coordination.replace_namespaced_lease(self.name, self.namespace, lease)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True
