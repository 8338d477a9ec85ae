"""Access to the Kubernetes API for the parts that need it (cluster view, certificates, reconciler)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass


@dataclass(frozen=True)
class Permission:
    """One RBAC rule a component of the server needs: verbs on a resource, cluster-wide unless
    ``namespaced`` (then in the server's own namespace), limited to ``names`` when given.

    Each component declares what it calls next to the code that calls it; deploy/base/rbac.yaml
    grants exactly their union (a test compares them, and the integration tier asks the real
    authorizer)."""

    group: str
    resource: str
    verbs: tuple[str, ...]
    names: tuple[str, ...] = ()
    namespaced: bool = False


def load_config() -> None:
    """The pod's service account in a cluster, the local kubeconfig elsewhere."""
    from kubernetes import config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        # $KUBECONFIG read now: the client reads it once, when it is first imported
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None)


def identity() -> str:
    """This replica's name as a Lease holder: the pod name (downward API), else the host name."""
    return os.environ.get("POD_NAME") or socket.gethostname()
