"""Answers to the engine's cluster questions (``engine.clusterview.ClusterView``) from API objects.

``ClusterIndex`` answers from Node, ResourceQuota and the referenced kinds (PriorityClass, PVC,
NetworkAttachmentDefinition, queues, DRA claims and DeviceClasses, Trainer's runtimes), and is the one
implementation behind both ``SnapshotCluster`` (saved lists, what `trainadmit check --cluster` reads) and
``live.LiveCluster`` (kept current by list + watch). Answers must cost the same at 100 nodes as at
10,000, so nothing is recomputed per request: an index per pool keeps its member count and, per
topology label, how many members each domain has; node changes update those counters in place, and
changes that keep what the indices read (status heartbeats) cost a comparison.

Capacity indices also classify each member: usable (Ready, schedulable, every NoSchedule/NoExecute
taint tolerated, GPUs allocatable, the pool's health labels present), cordoned (usable but for
``spec.unschedulable``) or unusable. Their key includes the workload's tolerations, so they are
built on first use per toleration set (a few per pool in practice) and kept in a bounded cache.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..engine.clusterview import Capacity, Discovered, Presence, RefKind, Unusable
from ..grammars.quantity import QuantityError, parse_quantity
from .workloads import NamespaceUsage, WorkloadIndex

if TYPE_CHECKING:  # types only: `check --cluster` runs on cached policy records too (policy.cache)
    from ..policy.models import NodeLabelRequirement, PoolSpec, TopologyLevel

USABLE, CORDONED, UNUSABLE = 0, 1, 2
MAX_CAPACITY_INDICES = 64
# taints the node lifecycle controller mirrors from a condition or from spec.unschedulable
CONDITION_TAINTS = {"node.kubernetes.io/not-ready": "NotReady", "node.kubernetes.io/unreachable": "NotReady"}
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


def tolerates(tolerations: tuple[tuple[str, str, str, str], ...], key: str, value: str, effect: str) -> bool:
    """Whether ``tolerations`` ((key, operator, value, effect) each) tolerate a taint, as the scheduler matches them:
    an empty effect matches every effect, ``Exists`` with no key every key."""
    for t_key, operator, t_value, t_effect in tolerations:
        if t_effect and t_effect != effect:
            continue
        if operator == "Exists" and (not t_key or t_key == key):
            return True
        if operator == "Equal" and t_key == key and t_value == value:
            return True
    return False


@dataclass(frozen=True)
class NodeFacts:
    """What the indices read from a Node; equal facts mean an update changes nothing."""

    labels: dict
    ready: bool
    unschedulable: bool
    taints: tuple[tuple[str, str, str], ...]  # (key, value, effect), NoSchedule and NoExecute only
    allocatable: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, obj: dict) -> NodeFacts:
        meta, spec, status = (obj.get(k) or {} for k in ("metadata", "spec", "status"))
        ready = any(isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
                    for c in status.get("conditions") or [])
        taints = tuple(sorted((str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
                              for t in spec.get("taints") or []
                              if isinstance(t, dict) and t.get("effect") in ("NoSchedule", "NoExecute")))
        allocatable = tuple(sorted((str(k), str(v)) for k, v in (status.get("allocatable") or {}).items()))
        return cls(dict(meta.get("labels") or {}), ready, bool(spec.get("unschedulable")), taints, allocatable)


@dataclass(frozen=True)
class Health:
    """What makes a node usable for one workload of one pool."""

    resource: str
    selector: tuple[tuple[str, str], ...]
    tolerations: tuple[tuple[str, str, str, str], ...]  # (key, operator, value, effect)

    @classmethod
    def of(cls, pool: PoolSpec, tolerations: tuple[dict, ...]) -> Health:
        tols = tuple(sorted({(str(t.get("key") or ""), str(t.get("operator") or "Equal"), str(t.get("value") or ""),
                              str(t.get("effect") or "")) for t in tolerations}))
        return cls(pool.gpu.resource, tuple(sorted(pool.healthSelector.items())), tols)

    def tolerates(self, key: str, value: str, effect: str) -> bool:
        return tolerates(self.tolerations, key, value, effect)

    def classify(self, facts: NodeFacts) -> tuple[int, str]:
        """(USABLE | CORDONED | UNUSABLE, reason) of one node."""
        missing = [f"{k}={v}" for k, v in self.selector if facts.labels.get(k) != v]
        if missing:
            return UNUSABLE, f"without health label {', '.join(missing)}"
        if not facts.ready:
            return UNUSABLE, "NotReady"
        gpus = dict(facts.allocatable).get(self.resource)
        try:
            has_gpus = gpus is not None and parse_quantity(gpus) > 0
        except QuantityError:
            has_gpus = False
        if not has_gpus:
            return UNUSABLE, f"with 0 allocatable {self.resource}"
        for key, value, effect in facts.taints:
            if key == UNSCHEDULABLE_TAINT or self.tolerates(key, value, effect):
                continue
            if key in CONDITION_TAINTS:
                return UNUSABLE, CONDITION_TAINTS[key]
            return UNUSABLE, f"with taint {key}{'=' + value if value else ''}:{effect} not tolerated"
        if facts.unschedulable:
            return CORDONED, "cordoned"
        return USABLE, ""


class _PoolIndex:
    """The nodes one pool selector matches (and, for a pool's required node labels, that meet those
    requirements too): per state (all USABLE when ``health`` is None) the count, and per topology label
    how many of each state sit in each domain."""

    def __init__(self, selector: dict[str, str], health: Health | None, nodes: dict[str, NodeFacts],
                 requirements: Sequence[NodeLabelRequirement] = ()):
        self.selector = selector
        self.health = health
        self.requirements = tuple(requirements)
        self._nodes = nodes
        self.state: dict[str, int] = {}
        self.counts = [0, 0, 0]
        for name, facts in nodes.items():
            if self.matches(facts.labels):
                st = self._classify(facts)
                self.state[name] = st
                self.counts[st] += 1
        self.domains: dict[str, list[Counter]] = {}
        self._largest: dict[tuple[str, str], int] = {}  # (label key, figure) -> max, dropped on any change

    def matches(self, labels: dict) -> bool:
        return all(labels.get(k) == v for k, v in self.selector.items()) and \
            all(r.matches(labels) for r in self.requirements)

    def _classify(self, facts: NodeFacts) -> int:
        return USABLE if self.health is None else self.health.classify(facts)[0]

    def domain(self, key: str) -> list[Counter]:
        counters = self.domains.get(key)
        if counters is None:
            counters = [Counter(), Counter(), Counter()]
            for name, st in self.state.items():
                value = self._nodes[name].labels.get(key)
                if value is not None:
                    counters[st][value] += 1
            self.domains[key] = counters
        return counters

    def largest(self, key: str, figure: str) -> int:
        """Max over the domains of ``key`` of: total, usable or eventually (usable + cordoned)."""
        cached = self._largest.get((key, figure))
        if cached is None:
            usable, cordoned, unusable = self.domain(key)
            values = set(usable) | set(cordoned) | set(unusable)
            if figure == "usable":
                cached = max((usable[v] for v in values), default=0)
            elif figure == "eventually":
                cached = max((usable[v] + cordoned[v] for v in values), default=0)
            else:
                cached = max((usable[v] + cordoned[v] + unusable[v] for v in values), default=0)
            self._largest[(key, figure)] = cached
        return cached

    def update(self, name: str, old: NodeFacts | None, new: NodeFacts | None) -> None:
        self._largest.clear()
        old_state = self.state.pop(name, None)
        if old_state is not None and old is not None:
            self.counts[old_state] -= 1
            for key, counters in self.domains.items():
                value = old.labels.get(key)
                if value is not None:
                    counters[old_state][value] -= 1
                    if counters[old_state][value] <= 0:
                        del counters[old_state][value]
        if new is not None and self.matches(new.labels):
            st = self._classify(new)
            self.state[name] = st
            self.counts[st] += 1
            for key, counters in self.domains.items():
                value = new.labels.get(key)
                if value is not None:
                    counters[st][value] += 1


def _key(obj: dict) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace", "") or "", meta.get("name", "") or ""


def slim(kind: RefKind, obj: dict) -> dict:
    """What the engine reads of a referenced object: its name, for PVCs their access modes, for DRA claims
    their device requests (and what an allocation gave each), for DeviceClasses the resource they serve, for
    Trainer's runtimes their spec (the JobSet template the TrainJobs' Pods come from)."""
    meta = obj.get("metadata") or {}
    out: dict = {"metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")}}
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    if kind.kind == "PersistentVolumeClaim":
        out["spec"] = {"accessModes": spec.get("accessModes")}
        out["status"] = {"phase": status.get("phase"), "accessModes": status.get("accessModes")}
    elif kind.kind == "ResourceClaimTemplate":
        out["spec"] = {"spec": {"devices": {"requests": ((spec.get("spec") or {}).get("devices") or {}).get(
            "requests")}}}
    elif kind.kind == "ResourceClaim":
        out["spec"] = {"devices": {"requests": (spec.get("devices") or {}).get("requests")}}
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results")
        if isinstance(results, list):
            out["status"] = {"allocation": {"devices": {"results": [
                {"request": r.get("request")} for r in results if isinstance(r, dict)]}}}
    elif kind.kind == "DeviceClass":
        out["spec"] = {"extendedResourceName": spec.get("extendedResourceName")}
    elif kind.group == "trainer.kubeflow.org":
        out.update({"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind") or kind.kind, "spec": spec})
    return out


def kept(kind: RefKind, obj: dict) -> bool:
    """Whether a view keeps the object: not the ResourceClaims the apiserver makes from a template for each Pod
    (owned by the Pod; no workload names them), of which there is one per Pod of every DRA workload."""
    if kind.kind != "ResourceClaim":
        return True
    owners = (obj.get("metadata") or {}).get("ownerReferences") or []
    return not any(isinstance(o, dict) and o.get("kind") == "Pod" and o.get("controller") for o in owners)


class ClusterIndex:
    """Nodes, ResourceQuotas, referenced objects and workloads, answering the ``ClusterView`` questions."""

    name = "index"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes: dict[str, NodeFacts] = {}
        self._indices: OrderedDict[tuple, _PoolIndex] = OrderedDict()
        self._quotas: dict[str, dict[str, dict]] = {}  # namespace -> name -> ResourceQuota
        self._refs: dict[str, dict[tuple[str, str], dict]] = {}  # kind -> (namespace, name) -> slim object
        self._ref_state: dict[str, Presence] = {}  # kind -> missing (listed) | not_served; absent: unknown
        self._discovered: Discovered | None = None  # the apiserver's version and served group/versions
        self.workloads = WorkloadIndex()  # the handled kinds' workloads, for the namespace GPU budget

    def knows_nodes(self) -> bool:
        return True

    def knows_quotas(self) -> bool:
        return True

    # ---- ClusterView: sizes and capacity ------------------------------------------------------
    def _index(self, pool: PoolSpec, health: Health | None = None,
               requirements: Sequence[NodeLabelRequirement] = ()) -> _PoolIndex:
        key = (tuple(sorted(pool.nodeSelector.items())), health, tuple(r.identity for r in requirements))
        index = self._indices.get(key)
        if index is None:
            with self._lock:
                index = self._indices.get(key)
                if index is None:
                    index = self._indices[key] = _PoolIndex(dict(pool.nodeSelector), health, self._nodes,
                                                            requirements)
                    if len(self._indices) > MAX_CAPACITY_INDICES:  # drop the oldest capacity index
                        oldest = next(k for k in self._indices if k[1] is not None or k[2])
                        del self._indices[oldest]
        return index

    def pool_nodes(self, pool: PoolSpec) -> int | None:
        if not self.knows_nodes():
            return None
        return sum(self._index(pool).counts)

    def pool_nodes_matching(self, pool: PoolSpec, requirements: Sequence[NodeLabelRequirement]) -> int | None:
        """Pool nodes meeting ``requirements`` (a pool's required node labels): an index of its own per
        set of requirements, kept current by node events like the others."""
        if not self.knows_nodes():
            return None
        return sum(self._index(pool, None, requirements).counts)

    def largest_domain(self, pool: PoolSpec, level: TopologyLevel) -> int | None:
        if not self.knows_nodes():
            return None
        index = self._index(pool)
        with self._lock:
            return index.largest(level.nodeLabel, "total")

    def capacity(self, pool: PoolSpec, level: TopologyLevel | None, tolerations: tuple[dict, ...]) -> Capacity | None:
        if not self.knows_nodes():
            return None
        index = self._index(pool, Health.of(pool, tolerations))
        with self._lock:
            if level is None:
                usable, cordoned, unusable = index.counts
                return Capacity(usable, usable + cordoned, usable + cordoned + unusable)
            key = level.nodeLabel
            return Capacity(index.largest(key, "usable"), index.largest(key, "eventually"), index.largest(key, "total"))

    def unusable(self, pool: PoolSpec, level: TopologyLevel | None, tolerations: tuple[dict, ...]) -> Unusable | None:
        """Walks one domain's members: only for the message of a denial, never on the admitted path."""
        if not self.knows_nodes():
            return None
        health = Health.of(pool, tolerations)
        index = self._index(pool, health)
        with self._lock:
            domain = None
            if level is not None:
                usable, cordoned, unusable = index.domain(level.nodeLabel)
                values = set(usable) | set(cordoned) | set(unusable)
                if not values:
                    return None
                domain = max(sorted(values), key=lambda v: (usable[v] + cordoned[v], usable[v] + cordoned[v]
                                                            + unusable[v]))
            reasons: dict[str, list[str]] = {}
            counts = [0, 0, 0]
            for name in index.state:
                facts = self._nodes[name]
                if level is not None and facts.labels.get(level.nodeLabel) != domain:
                    continue
                st, reason = health.classify(facts)
                counts[st] += 1
                if st != USABLE:
                    reasons.setdefault(reason, []).append(name)
        return Unusable(domain, sum(counts), counts[USABLE], counts[USABLE] + counts[CORDONED], reasons)

    def gpu_quota(self, namespace: str, resource: str) -> tuple[int, int] | None:
        return self._quota(namespace, f"requests.{resource}")

    def device_quota(self, namespace: str, device_class: str) -> tuple[int, int] | None:
        return self._quota(namespace, f"{device_class}.deviceclass.resource.k8s.io/devices")

    def _quota(self, namespace: str, key: str) -> tuple[int, int] | None:
        if not self.knows_quotas():
            return None
        best = None
        for quota in list(self._quotas.get(namespace, {}).values()):
            status = quota.get("status") or {}
            hard_raw = (status.get("hard") or (quota.get("spec") or {}).get("hard") or {}).get(key)
            if hard_raw is None:
                continue
            try:
                hard = int(parse_quantity(hard_raw))
                used = int(parse_quantity((status.get("used") or {}).get(key, "0")))
            except QuantityError:
                continue
            if best is None or hard - used < best[0] - best[1]:
                best = (hard, used)  # the quota with the least room is the one that binds
        return best

    def namespace_gpus(self, namespace: str, resource: str, exclude: tuple[str, str] | None = None
                       ) -> NamespaceUsage | None:
        """What the namespace's unfinished workloads (but ``exclude``, a kind and name) hold of ``resource``."""
        return self.workloads.usage(namespace, resource, exclude)

    # ---- ClusterView: references and freshness -------------------------------------------------
    def reference(self, kind: RefKind, name: str, namespace: str | None = None) -> tuple[Presence, dict | None]:
        state = self._ref_state.get(kind.kind)
        if state is None:
            return Presence.unknown, None
        if state is Presence.not_served:
            return state, None
        obj = self._refs.get(kind.kind, {}).get((namespace or "" if kind.namespaced else "", name))
        return (Presence.present, obj) if obj is not None else (Presence.missing, None)

    def serves(self, api_version: str) -> bool | None:
        discovered = self._discovered
        return None if discovered is None else discovered.serves(api_version)

    def discovered(self) -> Discovered | None:
        return self._discovered

    def stale(self) -> str | None:
        return None

    def reconciler(self) -> str | None:
        return None  # objects alone do not say whether a reconciler runs: the server wraps its view to say

    # ---- changes: nodes -------------------------------------------------------------------------
    def put_node(self, obj: dict) -> None:
        name = (obj.get("metadata") or {}).get("name")
        if not name:
            return
        facts = NodeFacts.of(obj)
        with self._lock:
            old = self._nodes.get(name)
            if old == facts:
                return
            self._nodes[name] = facts
            for index in self._indices.values():
                index.update(name, old, facts)

    def delete_node(self, obj: dict) -> None:
        name = (obj.get("metadata") or {}).get("name")
        with self._lock:
            old = self._nodes.pop(name, None)
            if old is not None:
                for index in self._indices.values():
                    index.update(name, old, None)

    def replace_nodes(self, items: list[dict]) -> None:
        with self._lock:
            self._nodes.clear()
            self._indices.clear()  # rebuilt lazily from the fresh set
        for item in items:
            self.put_node(item)

    def quota_object(self, namespace: str, name: str) -> dict | None:
        """One stored ResourceQuota (the budget reconciler compares its own with the policy)."""
        return self._quotas.get(namespace, {}).get(name)

    # ---- changes: quotas ----------------------------------------------------------------------
    def put_quota(self, obj: dict) -> None:
        namespace, name = _key(obj)
        self._quotas.setdefault(namespace, {})[name] = obj

    def delete_quota(self, obj: dict) -> None:
        namespace, name = _key(obj)
        self._quotas.get(namespace, {}).pop(name, None)

    def replace_quotas(self, items: list[dict]) -> None:
        fresh: dict[str, dict[str, dict]] = {}
        for obj in items:
            namespace, name = _key(obj)
            fresh.setdefault(namespace, {})[name] = obj
        self._quotas = fresh  # swapped whole: readers see the old or the new set, never half

    # ---- changes: referenced objects and served APIs -----------------------------------------------
    def put_ref(self, kind: RefKind, obj: dict) -> None:
        if kept(kind, obj):
            self._refs.setdefault(kind.kind, {})[_key(obj)] = slim(kind, obj)
        self._ref_state.setdefault(kind.kind, Presence.missing)

    def delete_ref(self, kind: RefKind, obj: dict) -> None:
        self._refs.get(kind.kind, {}).pop(_key(obj), None)

    def replace_refs(self, kind: RefKind, items: list[dict]) -> None:
        self._refs[kind.kind] = {_key(obj): slim(kind, obj) for obj in items if kept(kind, obj)}  # swapped whole
        self._ref_state[kind.kind] = Presence.missing  # listed: anything not in it is missing

    def refs_not_served(self, kind: RefKind) -> None:
        self._refs.pop(kind.kind, None)
        self._ref_state[kind.kind] = Presence.not_served

    def set_served(self, api_versions: set[str], version: tuple[int, int] | None = None, git_version: str = "") -> None:
        """What discovery found; the same object is kept while nothing changed, so that a decision that
        remembered it compares by identity."""
        found = Discovered(version, git_version, frozenset(api_versions))
        if found != self._discovered:
            self._discovered = found
