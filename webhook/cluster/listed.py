"""A cluster view listed once from a live cluster: what `trainadmit check --kubeconfig` decides against.

The lists are the live view's (``live.WATCHED``, the one declaration of what a cluster view needs:
Nodes, ResourceQuotas and every kind a decision may name), read with the same paginated
``LiveCluster.list_all`` and discovery, once, without watches, so `check` with a kubeconfig and `check
--cluster` with a saved snapshot of the same cluster answer alike; a kind whose CRD is not installed
counts as not served. Read-only: ``PERMISSIONS`` is all it calls (``list``; discovery is open to every
authenticated user through ``system:discovery``), and deploy/ci/check-clusterrole.yaml grants exactly
that to CI service accounts (tests/test_deploy.py compares them).
"""

from __future__ import annotations

import os

from .kube import Permission
from .live import WATCHED, ApiError, LiveCluster

MAX_KUBECONFIG_BYTES = 1024 * 1024
PERMISSIONS: tuple[Permission, ...] = tuple(Permission(w.group, w.name, ("list",)) for w in WATCHED)


class ListError(Exception):
    """The view could not be built: no usable kubeconfig, the cluster unreachable, a list refused."""


def _api_client(kubeconfig: str | None, context: str | None):
    from kubernetes import client, config

    if kubeconfig is None and context is None:  # a Pod's service account first, as `serve` does
        configuration = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=configuration)
            return client.ApiClient(configuration)
        except config.ConfigException:
            pass
    path = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    if not os.path.isfile(path):
        raise ListError(f"{path}: no such kubeconfig file")
    if os.path.getsize(path) > MAX_KUBECONFIG_BYTES:  # the client parses it in pure Python: seconds per MiB
        raise ListError(f"{path}: larger than {MAX_KUBECONFIG_BYTES // 1024} KiB: not a kubeconfig")
    _looks_like_kubeconfig(path)
    try:
        return config.new_client_from_config(config_file=path, context=context)
    except Exception as exc:  # ConfigException, a YAML or key error of a damaged file, a missing certificate
        raise ListError(f"{path}: not a usable kubeconfig: {_first_line(exc)}") from exc


def _looks_like_kubeconfig(path: str) -> None:
    """A first look with libyaml, so that a file that is not a kubeconfig is refused in milliseconds
    (the client's pure-Python parser takes seconds on a large or deeply nested one)."""
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError) as exc:
        raise ListError(f"{path}: not a kubeconfig: {_first_line(exc)}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("clusters"), list):
        raise ListError(f"{path}: not a kubeconfig (no clusters list)")


def _first_line(exc: Exception) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def listed_cluster(kubeconfig: str | None = None, context: str | None = None,
                   page_size: int = 500) -> LiveCluster:
    """List every kind of ``WATCHED`` once (and the served API groups) into a view; ``kubeconfig`` None
    means the service account in a Pod, else $KUBECONFIG or ~/.kube/config."""
    from kubernetes import client

    api_client = _api_client(kubeconfig, context)
    view = LiveCluster(client.CoreV1Api(api_client), page_size=page_size, log=lambda _: None)
    view.name = f"live ({api_client.configuration.host})"
    current = "discovery (/apis)"
    try:
        view.discover()
        for watched in WATCHED:
            current = watched.name if not watched.group else f"{watched.name}.{watched.group}"
            try:
                view.list_all(watched.name)
            except ApiError as exc:
                if exc.status == 404 and not watched.required and watched.ref is not None:
                    view.refs_not_served(watched.ref)  # its CRD is not installed: nothing of it can exist
                    continue
                raise
    except ApiError as exc:
        hint = " (deploy/ci/check-clusterrole.yaml grants what it needs)" if exc.status == 403 else ""
        raise ListError(f"{current}: {exc.status} {exc.reason}{hint}") from exc
    except Exception as exc:  # unreachable server, TLS failure, timeout: urllib3 raises several types
        raise ListError(f"{current} at {api_client.configuration.host}: {_first_line(exc)}") from exc
    return view
