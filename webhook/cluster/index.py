"""Answers to the engine's cluster questions (``engine.clusterview.ClusterView``) from API objects.

``ClusterIndex`` answers from Node and ResourceQuota objects and is the one implementation behind
both ``SnapshotCluster`` (saved NodeList/ResourceQuotaList files, what `trainadmit check --cluster`
reads) and ``live.LiveCluster`` (kept current by list + watch). Answers must cost the same at 100 nodes as
at 10,000, so nothing is recomputed per request: an index per node selector (the pools') keeps its
member count and, per topology label, how many members each domain has; node changes update those
counters in place, and changes that keep a node's labels (status heartbeats) cost a dict comparison.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..grammars.quantity import QuantityError, parse_quantity

if TYPE_CHECKING:  # types only: `check --cluster` runs on cached policy records too (policy.cache)
    from ..policy.models import NodeLabelRequirement, PoolSpec, TopologyLevel


class _SelectorIndex:
    """The nodes one pool selector matches (and, for a pool's required node labels, that meet those
    requirements too), and per topology label how many sit in each domain."""

    def __init__(self, selector: dict[str, str], labels_by_node: dict[str, dict],
                 requirements: Sequence[NodeLabelRequirement] = ()):
        self.selector = selector
        self.requirements = tuple(requirements)
        self.members: set[str] = {n for n, labels in labels_by_node.items() if self.matches(labels)}
        self.domains: dict[str, Counter] = {}
        self.largest: dict[str, int] = {}  # cached max per label key, dropped when a counter changes
        self._labels = labels_by_node

    def matches(self, labels: dict) -> bool:
        return all(labels.get(k) == v for k, v in self.selector.items()) and \
            all(r.matches(labels) for r in self.requirements)

    def domain(self, key: str) -> Counter:
        counter = self.domains.get(key)
        if counter is None:
            counter = Counter(self._labels[n].get(key) for n in self.members)
            counter.pop(None, None)
            self.domains[key] = counter
        return counter

    def largest_domain(self, key: str) -> int:
        value = self.largest.get(key)
        if value is None:
            value = self.largest[key] = max(self.domain(key).values(), default=0)
        return value

    def update(self, name: str, old: dict | None, new: dict | None) -> None:
        self.largest.clear()
        if old is not None and name in self.members:
            self.members.discard(name)
            for key, counter in self.domains.items():
                value = old.get(key)
                if value is not None:
                    counter[value] -= 1
                    if counter[value] <= 0:
                        del counter[value]
        if new is not None and self.matches(new):
            self.members.add(name)
            for key, counter in self.domains.items():
                value = new.get(key)
                if value is not None:
                    counter[value] += 1


def _key(obj: dict) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace", ""), meta.get("name", "")


class ClusterIndex:
    """Nodes (by their labels) and ResourceQuotas, answering the ``ClusterView`` questions."""

    name = "index"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._labels: dict[str, dict] = {}
        self._indices: dict[tuple, _SelectorIndex] = {}
        self._quotas: dict[str, dict[str, dict]] = {}  # namespace -> name -> ResourceQuota

    def knows_nodes(self) -> bool:
        return True

    def knows_quotas(self) -> bool:
        return True

    # ---- ClusterView ------------------------------------------------------------------------
    def _index(self, pool: PoolSpec, requirements: Sequence[NodeLabelRequirement] = ()) -> _SelectorIndex:
        key = (tuple(sorted(pool.nodeSelector.items())), tuple(r.identity for r in requirements))
        index = self._indices.get(key)
        if index is None:
            with self._lock:
                index = self._indices.get(key)
                if index is None:
                    index = self._indices[key] = _SelectorIndex(dict(pool.nodeSelector), self._labels, requirements)
        return index

    def pool_nodes(self, pool: PoolSpec) -> int | None:
        if not self.knows_nodes():
            return None
        return len(self._index(pool).members)

    def largest_domain(self, pool: PoolSpec, level: TopologyLevel) -> int | None:
        if not self.knows_nodes():
            return None
        index = self._index(pool)
        with self._lock:
            return index.largest_domain(level.nodeLabel)

    def pool_nodes_matching(self, pool: PoolSpec, requirements: Sequence[NodeLabelRequirement]) -> int | None:
        """Pool nodes meeting ``requirements``: an index of its own per set of requirements, kept current
        by the same node events, so the answer costs a look-up at any cluster size."""
        if not self.knows_nodes():
            return None
        return len(self._index(pool, requirements).members)

    def gpu_quota(self, namespace: str, resource: str) -> tuple[int, int] | None:
        if not self.knows_quotas():
            return None
        key = f"requests.{resource}"
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

    # ---- changes ------------------------------------------------------------------------------
    def put_node(self, obj: dict) -> None:
        name = (obj.get("metadata") or {}).get("name")
        if not name:
            return
        labels = dict((obj.get("metadata") or {}).get("labels") or {})
        with self._lock:
            old = self._labels.get(name)
            if old == labels:
                return
            self._labels[name] = labels
            for index in self._indices.values():
                index.update(name, old, labels)

    def delete_node(self, obj: dict) -> None:
        name = (obj.get("metadata") or {}).get("name")
        with self._lock:
            old = self._labels.pop(name, None)
            if old is not None:
                for index in self._indices.values():
                    index.update(name, old, None)

    def replace_nodes(self, items: list[dict]) -> None:
        with self._lock:
            self._labels.clear()
            self._indices.clear()  # rebuilt lazily from the fresh set
        for item in items:
            self.put_node(item)

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
