"""Every Kubernetes permission the code declares it uses (the live view, the reconciler, the preflight status,
the Leases, the certificate controller): deploy/'s RBAC must grant exactly these (tests/project/test_deploy.py),
and the real authorizer must allow them (tests/integration/test_cluster_on_apiserver.py)."""

from __future__ import annotations


def declared_permissions() -> tuple:
    """The permissions of every component the server runs, in one tuple (duplicates kept)."""
    from trainadmit.certs.incluster import PERMISSIONS as CERTS
    from trainadmit.cluster.access import LEASE_PERMISSIONS, reconciler_permissions
    from trainadmit.cluster.live import PERMISSIONS as VIEW
    from trainadmit.cluster.preflight_status import PERMISSIONS as PREFLIGHT

    return (*VIEW, *reconciler_permissions(), *PREFLIGHT, *LEASE_PERMISSIONS, *CERTS)
