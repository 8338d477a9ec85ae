"""The training workloads a cluster runs, and the GPUs each one holds: for the namespace GPU budget.

A namespace's budget (``Quota.spec.gpuQuota``) is a total over its unfinished workloads, so the
cluster views learn the handled kinds too: every kind an adapter handles except bare Pods (every Pod
of the cluster, each status change of each, would reach every webhook process; the apiserver's own
ResourceQuota, which the reconciler materialises from the same budget, counts Pods). A workload holds
what its Pods ask for: per extended resource, the sum over its templates of Pods times the per-Pod amount, as
the engine counts a workload's GPUs. What does not hold anything:

- a child: an object whose controller is a handled kind (a JobSet's Jobs, a TrainJob's JobSet): its
  parent holds the GPUs, as admission judges it through its parent;
- a finished workload: the terminal condition or phase its controller writes (below).

Records are small and immutable (``Held``); the index keeps one per uid and source, answers per
namespace in time independent of how often it is asked, and can keep the objects themselves for the
reports writer (``keep_objects``), which re-decides them.
"""

from __future__ import annotations

import sys
import threading
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..engine.clusterview import NamespaceUsage
from ..engine.workloads import (
    ADAPTERS,
    Adapter,
    InheritedTemplate,
    Workload,
    adapter_for,
    capable,
    pod_resource_total,
)


@dataclass(frozen=True)
class WorkloadKind:
    """One served version of a handled kind, as the views list and watch it."""

    adapter: Adapter
    version: str

    @property
    def group(self) -> str:
        return self.adapter.group

    @property
    def plural(self) -> str:
        return self.adapter.plural

    @property
    def kind(self) -> str:
        return self.adapter.kind

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def source(self) -> str:
        """A name per listed collection (two versions of one kind are two collections of the same objects)."""
        return f"{self.plural}.{self.group or 'core'}/{self.version}"


# every handled kind but bare Pods and the templates other workloads inherit (Trainer's runtimes hold no GPUs)
WORKLOAD_KINDS: tuple[WorkloadKind, ...] = tuple(WorkloadKind(a, v) for a in ADAPTERS
                                                 if a.kind != "Pod" and not capable(a, InheritedTemplate)
                                                 for v in a.versions)

# The condition types (status True) or phases after which a kind's controller runs none of its Pods:
# batch/v1 Job (Complete, Failed); training-operator v1 and mpi-operator v2beta1 (Succeeded, Failed);
# JobSet (Completed, Failed); Trainer TrainJob (Complete, Failed); Volcano Job status.state.phase; KubeRay
# RayJob status.jobDeploymentStatus. A RayCluster and a LeaderWorkerSet run until deleted.
TERMINAL_CONDITIONS: dict[tuple[str, str], frozenset[str]] = {
    ("batch", "Job"): frozenset({"Complete", "Failed"}),
    ("kubeflow.org", "PyTorchJob"): frozenset({"Succeeded", "Failed"}),
    ("kubeflow.org", "MPIJob"): frozenset({"Succeeded", "Failed"}),
    ("jobset.x-k8s.io", "JobSet"): frozenset({"Completed", "Failed"}),
    ("trainer.kubeflow.org", "TrainJob"): frozenset({"Complete", "Failed"}),
}
TERMINAL_PHASES: dict[tuple[str, str], tuple[tuple[str, ...], frozenset[str]]] = {
    ("batch.volcano.sh", "Job"): (("state", "phase"), frozenset({"Completed", "Failed", "Terminated", "Aborted"})),
    ("ray.io", "RayJob"): (("jobDeploymentStatus",), frozenset({"Complete", "Failed"})),
}


def workload_kind(api_version: object, kind: object) -> WorkloadKind | None:
    """The watched kind of an object's apiVersion and kind (None for Pods and kinds not handled)."""
    for wk in WORKLOAD_KINDS:
        if wk.api_version == api_version and wk.kind == kind:
            return wk
    return None


def _group(api_version: object) -> str:
    return api_version.split("/", 1)[0] if isinstance(api_version, str) and "/" in api_version else ""


def finished(obj: dict) -> bool:
    """Whether the workload's controller has ended it (it runs no Pods any more)."""
    status = obj.get("status")
    if not isinstance(status, dict):
        return False
    key = (_group(obj.get("apiVersion")), str(obj.get("kind", "")))
    terminal = TERMINAL_CONDITIONS.get(key)
    if terminal is not None:
        return any(isinstance(c, dict) and c.get("type") in terminal and c.get("status") == "True"
                   for c in status.get("conditions") or [] if isinstance(status.get("conditions"), list))
    phase = TERMINAL_PHASES.get(key)
    if phase is not None:
        value: object = status
        for part in phase[0]:
            value = value.get(part) if isinstance(value, dict) else None
        return value in phase[1]
    return False


def controller_kind(obj: dict) -> str | None:
    """The kind of the object's controller when trainadmit handles it (then the object is a child)."""
    refs = (obj.get("metadata") or {}).get("ownerReferences")
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, dict) and ref.get("controller") is True:
            return ref.get("kind") if adapter_for(ref.get("apiVersion"), ref.get("kind")) is not None else None
    return None


@dataclass(frozen=True, slots=True)
class Held:
    """What one unfinished workload holds: per extended resource, the amount all its Pods ask for.

    Small on purpose: audit keeps one per stored workload while it reads the others (names shared by
    many records, the kind, namespace and resources, are interned)."""

    kind: str
    namespace: str
    name: str
    created: str  # metadata.creationTimestamp (RFC 3339, so it orders as text); "" when not stored yet
    gpus: tuple[tuple[str, int], ...]
    deleting: bool = False

    def amount(self, resource: str) -> int:
        for name, value in self.gpus:
            if name == resource:
                return value
        return 0

    @property
    def order(self) -> tuple[str, str, str]:
        """Creation order (name as the tie-breaker: the apiserver stamps seconds)."""
        return (self.created or "~", self.kind, self.name)

    @property
    def label(self) -> str:
        """How a message names it: kind and name (a namespace's budget message is about one namespace)."""
        return f"{self.kind} {self.name}" + (" (being deleted)" if self.deleting else "")


def resources_held(workload: Workload) -> tuple[tuple[str, int], ...]:
    """Per extended resource (a name with a domain, as device plugins name them), Pods times the per-Pod amount."""
    out: dict[str, int] = {}
    for template in workload.templates:
        for resource in template.resource_names:
            if "/" in resource:
                amount = template.pods * pod_resource_total(template, resource)
                if amount > 0:
                    out[resource] = out.get(resource, 0) + amount
    return tuple(sorted((sys.intern(r), n) for r, n in out.items()))


def held(obj: dict) -> Held | None:
    """The record of a stored workload, or None when it holds nothing (a child, finished, unreadable)."""
    adapter = adapter_for(obj.get("apiVersion"), obj.get("kind"))
    meta = obj.get("metadata")
    if adapter is None or not isinstance(meta, dict) or controller_kind(obj) is not None or finished(obj):
        return None
    try:
        gpus = resources_held(Workload(obj, adapter))
    except (TypeError, AttributeError, ValueError):  # a malformed stored object holds what we cannot read
        return None
    return Held(adapter.kind, sys.intern(str(meta.get("namespace") or "")), str(meta.get("name") or ""),
                str(meta.get("creationTimestamp") or ""), gpus, bool(meta.get("deletionTimestamp")))


MAX_NAMED = 3  # holders a message names; the rest are counted
RUN_SOURCE = "check-run"  # the workloads a `check` run admitted before the one it decides


class _Ordered:
    """One namespace's holders of one resource in creation order, with running totals (an array: one block
    of memory, not one object per workload) and largest holders (a tuple shared by every position where
    they do not change), so "what was there before this one" costs a bisection."""

    def __init__(self, holders: list[Held], resource: str):
        self.resource = resource
        self.holders = sorted((h for h in holders if h.amount(resource) > 0), key=lambda h: h.order)
        self.totals = array("q", [0])
        self.tops: list[tuple[Held, ...]] = [()]
        total, top = 0, ()
        for h in self.holders:
            amount = h.amount(resource)
            total += amount
            if len(top) < MAX_NAMED or amount > top[-1].amount(resource):
                top = _top((*top, h), resource)
            self.totals.append(total)
            self.tops.append(top)
        self.names = {(h.kind, h.name) for h in self.holders}
        self.full = NamespaceUsage(total, len(self.holders), _named(top, resource))

    def before(self, order: tuple[str, str, str]) -> NamespaceUsage:
        i = bisect_left(self.holders, order, key=lambda h: h.order)
        return NamespaceUsage(self.totals[i], i, _named(self.tops[i], self.resource))

    def without(self, exclude: tuple[str, str] | None) -> NamespaceUsage:
        if exclude is None or exclude not in self.names:
            return self.full  # the same object every time: a remembered decision compares it in no time
        holders = [h for h in self.holders if (h.kind, h.name) != exclude]
        return NamespaceUsage(sum(h.amount(self.resource) for h in holders), len(holders),
                              _named(_top(holders, self.resource), self.resource))


def _top(holders: Iterable[Held], resource: str) -> tuple[Held, ...]:
    return tuple(sorted(holders, key=lambda h: (-h.amount(resource), h.order))[:MAX_NAMED])


def _named(holders: tuple[Held, ...], resource: str) -> tuple[tuple[str, int], ...]:
    return tuple((h.label, h.amount(resource)) for h in holders)


def _strip(obj: dict) -> dict:
    """A stored object without what no decision reads and what makes it large (managedFields)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return obj


def _namespace(obj: dict) -> str:
    meta = obj.get("metadata")
    return sys.intern(str(meta.get("namespace") or "")) if isinstance(meta, dict) else ""


class WorkloadIndex:
    """Records of the workloads of every listed collection, by namespace; optionally the objects.

    Writes come from watch threads, reads from request threads: a lock guards writes and the per-
    namespace caches, which a change of that namespace drops. Records are kept per collection, namespace,
    and kind and name (two served versions of one kind list the same objects: a namespace counts each
    once)."""

    def __init__(self, keep_objects: bool = False, on_change: Callable[[str], None] | None = None):
        self.keep_objects = keep_objects
        self.on_change = on_change
        self._lock = threading.Lock()
        self._records: dict[str, dict[str, dict[str, Held]]] = {}  # source -> namespace -> key -> record
        self._objects: dict[str, dict[str, dict[str, dict]]] = {}  # the same, objects (keep_objects)
        self._listed: set[str] = set()
        self._cache: dict[tuple[str, str], _Ordered] = {}
        # for a reader that puts each workload once (audit): the namespaces whose workloads are kept one by one
        # (those with a budget, judged in creation order); elsewhere only totals per resource are kept
        self.keeps: Callable[[str], bool] | None = None
        self._totals: dict[str, dict[str, list[int]]] = {}  # namespace -> resource -> [amount, workloads]

    @property
    def known(self) -> bool:
        """At least one collection was listed: absent workloads then do not exist."""
        return bool(self._listed)

    # ---- changes (callers hold no lock) ------------------------------------------------------------
    @staticmethod
    def _key(obj: dict) -> str:
        """Kind and name within the namespace: one key for one workload, whatever lists it (two served
        versions of a kind, or a stored object and the manifest a `check` run applies over it)."""
        meta = obj.get("metadata") or {}
        if meta.get("name"):
            return f"{obj.get('kind')}/{meta.get('name')}"
        return str(meta.get("uid") or f"{obj.get('kind')}/?{id(obj)}")

    def _set(self, source: str, namespace: str, key: str, obj: dict | None) -> bool:
        """Store (or, with None, forget) one object of ``source``; True when what a decision reads changed."""
        record = held(obj) if obj is not None else None
        if record is not None and self.keeps is not None and not self.keeps(namespace):
            totals = self._totals.setdefault(namespace, {})
            for resource, amount in record.gpus:
                entry = totals.setdefault(resource, [0, 0])
                entry[0] += amount
                entry[1] += 1
            return False
        records = self._records.setdefault(source, {}).setdefault(namespace, {})
        old = records.get(key)
        if record is None:
            records.pop(key, None)
        else:
            records[key] = record
        changed = old != record
        if self.keep_objects:
            objects = self._objects.setdefault(source, {}).setdefault(namespace, {})
            if obj is None:
                changed |= objects.pop(key, None) is not None
            else:
                objects[key] = _strip(obj)
                changed = True
        return changed

    def _changed(self, namespaces: Iterable[str]) -> None:
        namespaces = set(namespaces)
        for key in [k for k in self._cache if k[0] in namespaces]:
            del self._cache[key]

    def _notify(self, namespaces: Iterable[str]) -> None:
        if self.on_change is not None:
            for namespace in sorted(set(namespaces)):
                self.on_change(namespace)

    def put(self, source: str, obj: dict) -> None:
        namespace = _namespace(obj)
        with self._lock:
            changed = self._set(source, namespace, self._key(obj), obj)
            if changed:
                self._changed([namespace])
        if changed:
            self._notify([namespace])

    def delete(self, source: str, obj: dict) -> None:
        namespace = _namespace(obj)
        with self._lock:
            changed = self._set(source, namespace, self._key(obj), None)
            if changed:
                self._changed([namespace])
        if changed:
            self._notify([namespace])

    def replace(self, source: str, items: list[dict]) -> None:
        fresh = {(_namespace(obj), self._key(obj)): obj for obj in items if isinstance(obj, dict)}
        with self._lock:
            touched: set[str] = set()
            held_before = {(ns, key) for ns, keys in self._records.get(source, {}).items() for key in keys}
            held_before |= {(ns, key) for ns, keys in self._objects.get(source, {}).items() for key in keys}
            for namespace, key in held_before - set(fresh):
                if self._set(source, namespace, key, None):
                    touched.add(namespace)
            for (namespace, key), obj in fresh.items():
                if self._set(source, namespace, key, obj):
                    touched.add(namespace)
            self._listed.add(source)
            self._changed(touched)
        self._notify(touched)

    def listed(self, source: str) -> None:
        """``source`` is known whole from now on (a snapshot that holds workloads, or a typed empty list)."""
        with self._lock:
            self._listed.add(source)

    def admitted(self, obj: dict, namespace: str) -> None:
        """A workload a `check` run admitted (it will be created in ``namespace``): it holds GPUs for the
        objects after it, as if the run's objects were applied in order. Only where the namespace's
        workloads are known (``known``): elsewhere the budget bounds each workload alone."""
        if not self.known or not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
            return
        meta = obj["metadata"]
        if not meta.get("namespace"):
            obj = {**obj, "metadata": {**meta, "namespace": namespace}}
        self.put(RUN_SOURCE, obj)

    def not_served(self, source: str) -> None:
        """The cluster does not serve the collection (its CRD is not installed): nothing of it exists."""
        self.replace(source, [])

    # ---- answers ---------------------------------------------------------------------------------
    def _holders(self, namespace: str) -> list[Held]:
        found: dict[str, Held] = {}
        for by_namespace in self._records.values():
            for key, record in by_namespace.get(namespace, {}).items():
                found.setdefault(key, record)
        return list(found.values())

    def holders(self, namespace: str) -> list[Held]:
        with self._lock:
            return sorted(self._holders(namespace), key=lambda h: h.order)

    def usage(self, namespace: str, resource: str, exclude: tuple[str, str] | None = None,
              before: tuple[str, str, str] | None = None) -> NamespaceUsage | None:
        """What the namespace's workloads hold of ``resource``, without ``exclude`` (kind, name), and only
        those created before ``before`` (an order key) when given; None before any collection was listed."""
        if not self.known:
            return None
        if self.keeps is not None and not self.keeps(namespace):
            amount, workloads = self._totals.get(namespace, {}).get(resource, (0, 0))
            return NamespaceUsage(amount, workloads)
        with self._lock:
            ordered = self._cache.get((namespace, resource))
            if ordered is None:
                ordered = self._cache[(namespace, resource)] = _Ordered(self._holders(namespace), resource)
        return ordered.before(before) if before is not None else ordered.without(exclude)

    def objects(self, namespace: str) -> list[dict]:
        """The stored objects of the namespace (``keep_objects``), one per kind and name, in creation order."""
        with self._lock:
            found: dict[str, dict] = {}
            for by_namespace in self._objects.values():
                for key, obj in by_namespace.get(namespace, {}).items():
                    found.setdefault(key, obj)
        return sorted(found.values(), key=order_of)

    def namespaces(self) -> set[str]:
        """Namespaces that hold any kept object or any record."""
        with self._lock:
            return {ns for table in (self._objects, self._records) for by_namespace in table.values()
                    for ns, keys in by_namespace.items() if keys}


def order_of(obj: dict) -> tuple[str, str, str]:
    """The creation-order key of a stored object (the same as ``Held.order``)."""
    meta = obj.get("metadata") or {}
    return (str(meta.get("creationTimestamp") or "~"), str(obj.get("kind") or ""), str(meta.get("name") or ""))


class AsCreated:
    """A cluster view as a stored workload met it when it was created: of its namespace's workloads,
    only those created before it hold GPUs. Audit and reports judge each stored workload this way, so
    that of three Jobs that together exceed a budget, the ones that came after the budget ran out are
    the ones that fail, as admission would have refused them; everything else is the view's own."""

    def __init__(self, view: object, index: WorkloadIndex, order: tuple[str, str, str]):
        self._view, self._index, self._order = view, index, order

    def __getattr__(self, name: str):
        return getattr(self._view, name)

    def namespace_gpus(self, namespace: str, resource: str, exclude: tuple[str, str] | None = None
                       ) -> NamespaceUsage | None:
        return self._index.usage(namespace, resource, exclude, before=self._order)
