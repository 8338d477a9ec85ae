"""A cluster view listed once from a live cluster: what `trainadmit check --kubeconfig` decides against.

The lists are the live view's (``live.WATCHED``, the one declaration of what a cluster view needs:
Nodes, ResourceQuotas and every kind a decision may name), read with the same paginated
``LiveCluster.list_all`` and discovery, once, without watches, so `check` with a kubeconfig and `check
--cluster` with a saved snapshot of the same cluster answer alike; a kind whose CRD is not installed
counts as not served. Read-only: ``PERMISSIONS`` is all it calls (``list``; discovery is open to every
authenticated user through ``system:discovery``), and deploy/ci/check-clusterrole.yaml grants exactly
that to CI service accounts (tests/project/test_deploy.py compares them).

`trainadmit audit --kubeconfig` reads the same view (its lists include the handled workload kinds: what
each namespace's workloads hold), then every workload page by page (``workloads``: one page in memory, not
the cluster), and the served policy's ConfigMap: ``AUDIT_PERMISSIONS``.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator

from .kube import Permission
from .live import WATCHED, ApiError, LiveCluster, _call
from .workloads import WORKLOAD_KINDS

MAX_KUBECONFIG_BYTES = 1024 * 1024
PAGE = 500
PERMISSIONS: tuple[Permission, ...] = tuple(sorted({Permission(w.group, w.resource, ("list",)) for w in WATCHED},
                                                   key=lambda p: (p.group, p.resource)))
SERVED_POLICY = ("trainadmit-system", "trainadmit-policies")  # the ConfigMap the webhook mounts its policy from
POD_KIND = ("", "v1", "pods", "Pod")  # bare Pods are workloads too (those of a controller are its children)
AUDIT_PERMISSIONS: tuple[Permission, ...] = (
    *PERMISSIONS, Permission("", "pods", ("list",)),
    # the StatefulSet a Pod carrying trainadmit's provenance names, and its group's leader Pod (cluster.owners)
    Permission("", "pods", ("get",)), Permission("apps", "statefulsets", ("get",)),
    Permission("", "configmaps", ("get",), (SERVED_POLICY[1],), namespaced=True),
)


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
                   page_size: int = 500, client_api=None, keeps=None) -> LiveCluster:
    """List every kind of ``WATCHED`` once (and the served API groups) into a view; ``kubeconfig`` None
    means the service account in a Pod, else $KUBECONFIG or ~/.kube/config (or ``client_api``, a client
    made by ``api_client``; ``keeps``: see ``WorkloadIndex.keeps``)."""
    from kubernetes import client

    api_client = client_api if client_api is not None else _api_client(kubeconfig, context)
    view = LiveCluster(client.CoreV1Api(api_client), page_size=page_size, log=lambda _: None)
    view.name = f"live ({api_client.configuration.host})"
    view.workloads.keeps = keeps
    current = "discovery (/apis)"
    try:
        view.discover()
        for watched in WATCHED:
            current = watched.resource if not watched.group else f"{watched.resource}.{watched.group}"
            try:
                view.list_all(watched.name)
            except ApiError as exc:
                if exc.status == 404 and not watched.required and watched.ref is not None:
                    view.refs_not_served(watched.ref)  # its CRD is not installed: nothing of it can exist
                    continue
                if exc.status == 404 and not watched.required and watched.workload is not None:
                    view.workloads.not_served(watched.name)  # likewise: no workload of that kind exists
                    continue
                raise
    except ApiError as exc:
        hint = " (deploy/ci/check-clusterrole.yaml grants what it needs)" if exc.status == 403 else ""
        raise ListError(f"{current}: {exc.status} {exc.reason}{hint}") from exc
    except Exception as exc:  # unreachable server, TLS failure, timeout: urllib3 raises several types
        raise ListError(f"{current} at {api_client.configuration.host}: {_first_line(exc)}") from exc
    return view


def api_client(kubeconfig: str | None = None, context: str | None = None):
    """The client ``listed_cluster`` uses (``ListError`` when the kubeconfig cannot be used)."""
    return _api_client(kubeconfig, context)


def workloads(client_api, page_size: int = PAGE) -> Iterator[dict]:
    """Every stored object of a handled kind (bare Pods included), page by page, with apiVersion and kind;
    a kind that is not served has none. ``ListError`` names a list the credentials may not read."""
    from kubernetes import client

    custom = client.CustomObjectsApi(client_api)
    kinds = [(k.group, k.version, k.plural, k.kind) for k in WORKLOAD_KINDS] + [POD_KIND]
    versions = Counter((group, plural) for group, _, plural, _ in kinds)
    seen: set[str] = set()  # two served versions of one kind list the same objects: their uids, once
    for group, version, plural, kind in kinds:
        api_version = f"{group}/{version}" if group else version
        if group:
            func, args = custom.list_cluster_custom_object, (group, version, plural)
        else:
            func, args = client.CoreV1Api(client_api).list_pod_for_all_namespaces, ()
        token = None
        while True:
            kwargs = {"limit": page_size, "_preload_content": False, "_request_timeout": (10, 120)}
            if token:
                kwargs["_continue"] = token
            try:
                data = json.loads(_call(func, *args, **kwargs).data)
            except ApiError as exc:
                if exc.status == 404:
                    break  # not served here: nothing of it exists
                raise ListError(f"{plural}.{group or 'core'}: {exc.status} {exc.reason}") from exc
            except Exception as exc:  # unreachable server, TLS failure, timeout
                raise ListError(f"{plural}.{group or 'core'}: {_first_line(exc)}") from exc
            for item in data.get("items") or []:
                if not isinstance(item, dict):
                    continue
                uid = str((item.get("metadata") or {}).get("uid") or "")
                if uid and versions[(group, plural)] > 1:
                    if uid in seen:
                        continue
                    seen.add(uid)
                item.setdefault("apiVersion", api_version)
                item.setdefault("kind", kind)
                yield item
            token = (data.get("metadata") or {}).get("continue")
            if not token:
                break


def served_policy_files(client_api, namespace: str, name: str) -> dict[str, str]:
    """The files of the served policy's ConfigMap (``ListError`` when it cannot be read)."""
    from kubernetes import client

    try:
        resp = _call(client.CoreV1Api(client_api).read_namespaced_config_map, name, namespace,
                     _preload_content=False, _request_timeout=(10, 30))
    except ApiError as exc:
        raise ListError(f"the served policy ConfigMap {namespace}/{name}: {exc.status} {exc.reason}") from exc
    except Exception as exc:
        raise ListError(f"the served policy ConfigMap {namespace}/{name}: {_first_line(exc)}") from exc
    data = (json.loads(resp.data) or {}).get("data") or {}
    if not data:
        raise ListError(f"the served policy ConfigMap {namespace}/{name} holds no files")
    return {key: text for key, text in data.items() if "/" not in key and not key.startswith(".")}
