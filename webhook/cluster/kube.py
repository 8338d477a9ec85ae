"""Access to the Kubernetes API for the parts that need it (cluster view, certificates, reconciler)."""

from __future__ import annotations

import os
import socket


def load_config() -> None:
    """The pod's service account in a cluster, the local kubeconfig elsewhere."""
    from kubernetes import config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()


def identity() -> str:
    """This replica's name as a Lease holder: the pod name (downward API), else the host name."""
    return os.environ.get("POD_NAME") or socket.gethostname()
