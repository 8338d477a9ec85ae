"""Every Kubernetes permission the code declares it uses (the live view, the reconciler, the preflight status,
the Leases, the certificate controller, the metrics port's filter): deploy/'s RBAC must grant exactly these (tests/project/test_deploy.py),
and the real authorizer must allow them (tests/integration/test_cluster_on_apiserver.py)."""

from __future__ import annotations


def declared_permissions() -> tuple:
    """The permissions of every component the server runs, in one tuple (duplicates kept)."""
    from trainadmit.certs.incluster import PERMISSIONS as CERTS
    from trainadmit.cluster.access import LEASE_PERMISSIONS, reconciler_permissions
    from trainadmit.cluster.live import PERMISSIONS as VIEW
    from trainadmit.cluster.preflight_status import PERMISSIONS as PREFLIGHT
    from trainadmit.server.app import SCALE_PERMISSIONS
    from trainadmit.server.metrics_auth import PERMISSIONS as METRICS_AUTH

    return (*VIEW, *reconciler_permissions(), *PREFLIGHT, *LEASE_PERMISSIONS, *CERTS, *SCALE_PERMISSIONS,
            *METRICS_AUTH)


def declared(certs: bool) -> set[tuple]:
    """(group, resource, verb, name, namespaced) of every call the server makes; ``certs``: with ``--manage-certs``'s
    (the in-cluster-certs overlay grants those)."""
    from trainadmit.certs.incluster import PERMISSIONS as CERTS

    return {(p.group, p.resource, v, n, p.namespaced) for p in declared_permissions() for v in p.verbs
            for n in (p.names or ("",)) if certs or p not in CERTS}
