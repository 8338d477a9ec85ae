"""A cluster read once, through its API, for commands that run outside it (`trainadmit audit --kubeconfig`).

The view is the live view's (``LiveCluster``: the same lists, pages and answers), filled by one list of
each kind and one discovery instead of watches; the workloads are then listed a second time, page by
page, for the command to judge one at a time (``workloads``), so memory holds one page, not the cluster.
A kind whose CRD is not installed (404) has no objects; any other refusal (403: the credentials may not
list it) is an error naming the kind, since a judgement without it would be incomplete.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator

from .kube import Permission
from .live import PERMISSIONS as VIEW_PERMISSIONS
from .live import WATCHED, ApiError, LiveCluster, _call
from .workloads import WORKLOAD_KINDS

PAGE = 500
POD_KIND = ("", "v1", "pods", "Pod")  # bare Pods are workloads too (those of a controller are its children)
# what `audit --kubeconfig` reads: the view's lists, the Pods, and the served policy's ConfigMap
PERMISSIONS: tuple[Permission, ...] = (
    *(Permission(p.group, p.resource, ("list",)) for p in VIEW_PERMISSIONS),
    Permission("", "pods", ("list",)),
    Permission("", "configmaps", ("get",), ("trainadmit-policies",), namespaced=True),
)


def listed_view(api_client, log: Callable[[str], None] = lambda message: None) -> LiveCluster:
    """Nodes, quotas, referenced kinds, served API groups and workload records, listed once."""
    from kubernetes import client

    view = LiveCluster(client.CoreV1Api(api_client), custom=client.CustomObjectsApi(api_client), page_size=PAGE,
                       log=log)
    view.discover()
    for w in WATCHED:
        try:
            view.list_all(w.name)
        except ApiError as exc:
            if exc.status == 404 and not w.required:
                if w.ref is not None:
                    view.refs_not_served(w.ref)
                elif w.workload is not None:
                    view.workloads.not_served(w.name)
                continue
            raise ApiError(exc.status, f"cannot list {w.resource} ({w.group or 'core'}/{w.version}): {exc.reason}"
                           ) from exc
    return view


def workloads(api_client, page_size: int = PAGE) -> Iterator[dict]:
    """Every stored object of a handled kind (bare Pods included), page by page, with apiVersion and kind."""
    from kubernetes import client

    custom = client.CustomObjectsApi(api_client)
    kinds = [(k.group, k.version, k.plural, k.kind) for k in WORKLOAD_KINDS] + [POD_KIND]
    versions = Counter((group, plural) for group, _, plural, _ in kinds)
    seen: set[str] = set()  # two served versions of one kind list the same objects: their uids, once
    for group, version, plural, kind in kinds:
        api_version = f"{group}/{version}" if group else version
        if group:
            func, args = custom.list_cluster_custom_object, (group, version, plural)
        else:
            func, args = client.CoreV1Api(api_client).list_pod_for_all_namespaces, ()
        token = None
        while True:
            kwargs = {"limit": page_size, "_preload_content": False, "_request_timeout": (10, 120)}
            if token:
                kwargs["_continue"] = token
            try:
                resp = _call(func, *args, **kwargs)
            except ApiError as exc:
                if exc.status == 404:
                    break  # not served here: nothing of it exists
                raise ApiError(exc.status, f"cannot list {plural} ({group or 'core'}/{version}): {exc.reason}"
                               ) from exc
            data = json.loads(resp.data)
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
