"""The placement gate's view of Pods and Nodes: only what choosing a domain needs, kept current by list + watch.

Invariant: ``PodStore`` holds every Pod that can hold or will hold an extended resource (a GPU) or that carries the
placement gate or its annotations, reduced to ``PodFacts`` (node, phase, requests of extended resources, gates,
owner, the placement annotations, the scheduling constraints a node must meet); every Node reduced to
``cluster.index.NodeFacts``. Each change sets ``changed``, which wakes the ungater (``cluster.placement``): placement
reacts to events, never to a period. Pods that request no extended resource and are not gated are not kept (they
take no GPU), so memory follows the GPU Pods, not every Pod of the cluster.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass

from ..grammars.quantity import QuantityError, parse_quantity
from .index import NodeFacts
from .live import ApiError, _call, watch_events

STANDARD = frozenset({"cpu", "memory", "ephemeral-storage", "pods"})
TERMINAL = frozenset({"Succeeded", "Failed"})


def extended(name: str) -> bool:
    """A resource the scheduler counts per node as an integer and trainadmit places by: a device plugin's."""
    return name not in STANDARD and not name.startswith("hugepages-") and "/" in name


def _count(value: object) -> int:
    try:
        return int(parse_quantity(str(value)))
    except (QuantityError, ValueError, TypeError):
        return 0


def pod_requests(spec: dict) -> dict[str, int]:
    """Extended resources one Pod holds: the sum of its containers' requests (a limit stands for a missing request),
    or its largest init container's, whichever is larger, as the scheduler counts them."""
    def of(container: dict) -> dict[str, int]:
        res = container.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        return {k: _count(v) for k, v in merged.items() if extended(str(k))}

    total: dict[str, int] = {}
    for c in spec.get("containers") or []:
        for k, v in of(c).items():
            total[k] = total.get(k, 0) + v
    for c in spec.get("initContainers") or []:
        for k, v in of(c).items():
            total[k] = max(total.get(k, 0), v)
    return {k: v for k, v in total.items() if v > 0}


@dataclass(frozen=True)
class PodFacts:
    namespace: str
    name: str
    uid: str
    created: str
    node: str
    phase: str
    deleting: bool
    gated: bool  # carries the placement gate
    gates: tuple[str, ...]  # every scheduling gate, in order (the patch removes ours by its index)
    requests: tuple[tuple[str, int], ...]
    placement: str  # the template annotation (JSON), "" when none
    domain: str  # the annotation the ungater wrote, "" when none
    owner: tuple[str, str, str, str] | None  # the controller: (apiVersion, kind, name, uid)
    node_selector: tuple[tuple[str, str], ...]
    tolerations: tuple[tuple[str, str, str, str], ...]  # (key, operator, value, effect)
    affinity_terms: str  # required node affinity's nodeSelectorTerms as JSON ("" when none)

    @property
    def active(self) -> bool:
        """Holds or will hold its node's resources: not ended, not on its way out."""
        return self.phase not in TERMINAL and not self.deleting

    @classmethod
    def of(cls, obj: dict, gate: str, domain_key: str) -> PodFacts:
        meta, spec, status = (obj.get(k) or {} for k in ("metadata", "spec", "status"))
        annotations = meta.get("annotations") or {}
        gates = tuple(str(g.get("name")) for g in spec.get("schedulingGates") or [] if isinstance(g, dict))
        owner = next(((str(o.get("apiVersion")), str(o.get("kind")), str(o.get("name")), str(o.get("uid")))
                      for o in meta.get("ownerReferences") or [] if isinstance(o, dict) and o.get("controller")), None)
        tolerations = tuple((str(t.get("key") or ""), str(t.get("operator") or "Equal"), str(t.get("value") or ""),
                             str(t.get("effect") or "")) for t in spec.get("tolerations") or [] if isinstance(t, dict))
        terms = ((((spec.get("affinity") or {}).get("nodeAffinity") or {})
                  .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms"))
        return cls(str(meta.get("namespace") or ""), str(meta.get("name") or ""), str(meta.get("uid") or ""),
                   str(meta.get("creationTimestamp") or ""), str(spec.get("nodeName") or ""),
                   str(status.get("phase") or "Pending"), bool(meta.get("deletionTimestamp")), gate in gates, gates,
                   tuple(sorted(pod_requests(spec).items())), str(annotations.get(gate) or ""),
                   str(annotations.get(domain_key) or ""), owner,
                   tuple(sorted((str(k), str(v)) for k, v in (spec.get("nodeSelector") or {}).items())),
                   tolerations, json.dumps(terms, sort_keys=True) if terms else "")

    @property
    def kept(self) -> bool:
        return bool(self.requests or self.gated or self.placement or self.domain)


class PodStore:
    """Pods (``PodFacts``) by uid and Nodes (``NodeFacts``) by name, with ``changed`` set on every change."""

    def __init__(self, gate: str, domain_key: str) -> None:
        self.gate, self.domain_key = gate, domain_key
        self.pods: dict[str, PodFacts] = {}
        self.nodes: dict[str, NodeFacts] = {}
        self.lock = threading.Lock()
        self.changed = threading.Event()
        self.listed: set[str] = set()  # "pods", "nodes" once listed

    @property
    def synced(self) -> bool:
        return {"pods", "nodes"} <= self.listed

    def apply(self, kind: str, event: str, obj: dict) -> None:
        with self.lock:
            if kind == "nodes":
                name = str((obj.get("metadata") or {}).get("name") or "")
                if event == "DELETED":
                    self.nodes.pop(name, None)
                else:
                    facts = NodeFacts.of(obj)
                    if self.nodes.get(name) == facts:
                        return  # a heartbeat: nothing placement reads changed
                    self.nodes[name] = facts
            else:
                pod = PodFacts.of(obj, self.gate, self.domain_key)
                if event == "DELETED" or not pod.kept:
                    if self.pods.pop(pod.uid, None) is None:
                        return
                else:
                    if self.pods.get(pod.uid) == pod:
                        return
                    self.pods[pod.uid] = pod
        self.changed.set()

    def replace(self, kind: str, items: list[dict]) -> None:
        with self.lock:
            if kind == "nodes":
                self.nodes = {str((o.get("metadata") or {}).get("name") or ""): NodeFacts.of(o) for o in items}
            else:
                pods = (PodFacts.of(o, self.gate, self.domain_key) for o in items)
                self.pods = {p.uid: p for p in pods if p.kept}
            self.listed.add(kind)
        self.changed.set()

    def snapshot(self) -> tuple[list[PodFacts], dict[str, NodeFacts]]:
        with self.lock:
            return list(self.pods.values()), dict(self.nodes)


@dataclass
class Watcher:
    """List + watch of Pods (all namespaces) and Nodes into a ``PodStore``; a watch that expires relists."""

    core: object  # kubernetes.client.CoreV1Api
    store: PodStore
    log: Callable[[str], None] = print
    page_size: int = 500
    watch_timeout: int = 60

    def _func(self, kind: str) -> Callable:
        return self.core.list_pod_for_all_namespaces if kind == "pods" else self.core.list_node  # type: ignore[attr-defined]

    def list_all(self, kind: str) -> str:
        items: list[dict] = []
        token = None
        while True:
            kwargs: dict = {"limit": self.page_size, "_preload_content": False, "_request_timeout": (10, 60)}
            if token:
                kwargs["_continue"] = token
            data = json.loads(_call(self._func(kind), **kwargs).data)
            items.extend(data.get("items") or [])
            token = (data.get("metadata") or {}).get("continue")
            if not token:
                break
        self.store.replace(kind, items)
        return str((data.get("metadata") or {}).get("resourceVersion", ""))

    def watch(self, kind: str, rv: str, stop: threading.Event) -> str:
        resp = _call(self._func(kind), watch=True, resource_version=rv, allow_watch_bookmarks=True,
                     timeout_seconds=self.watch_timeout, _preload_content=False,
                     _request_timeout=(10, self.watch_timeout + 15))
        try:
            for kind_of, obj in watch_events(resp):
                if kind_of in ("ADDED", "MODIFIED", "DELETED"):
                    self.store.apply(kind, kind_of, obj)
                rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                if stop.is_set():
                    break
        finally:
            resp.release_conn()
        return rv

    def run(self, kind: str, stop: threading.Event) -> None:
        backoff = 1.0
        while not stop.is_set():
            try:
                rv = self.list_all(kind)
                backoff = 1.0
                while not stop.is_set():
                    rv = self.watch(kind, rv, stop)
            except ApiError as exc:
                if exc.status == 410:
                    continue
                self.log(f"placement: {kind}: {exc.status} {exc.reason}; retrying in {backoff:.0f}s")
            except Exception as exc:
                self.log(f"placement: {kind}: {exc!r}; retrying in {backoff:.0f}s")
            stop.wait(backoff)
            backoff = min(backoff * 2, 30.0)

    def start(self, stop: threading.Event) -> None:
        for kind in ("pods", "nodes"):
            threading.Thread(target=self.run, args=(kind, stop), name=f"placement-{kind}", daemon=True).start()


__all__ = ["PodFacts", "PodStore", "Watcher", "pod_requests"]
