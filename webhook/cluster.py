"""The engine's view of the cluster: pool sizes, topology domain sizes, namespace GPU quota.

The engine only asks questions through ``ClusterView``; it never lists nodes itself. ``NoCluster``
answers "unknown" (the policy's own figures are used), ``SnapshotCluster`` answers from a saved
NodeList/ResourceQuotaList (what `trainadmit check --cluster` reads), and a live informer-backed
view can implement the same three methods later. Each answer is computed once per pool or
namespace and cached, so a request costs the same at 100 nodes as at 10,000.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Protocol

import yaml

from .policy.models import PoolSpec, TopologyLevel
from .quantity import QuantityError, parse_quantity


class ClusterView(Protocol):
    name: str

    def pool_nodes(self, pool: PoolSpec) -> int | None:
        """Nodes of the pool, or None when unknown."""

    def largest_domain(self, pool: PoolSpec, level: TopologyLevel) -> int | None:
        """Pool nodes in the largest domain of ``level``, or None when unknown."""

    def gpu_quota(self, namespace: str, resource: str) -> tuple[int, int] | None:
        """(hard, used) of the namespace's binding ResourceQuota on ``requests.<resource>``."""


class NoCluster:
    name = "none"

    def pool_nodes(self, pool: PoolSpec) -> int | None:
        return None

    def largest_domain(self, pool: PoolSpec, level: TopologyLevel) -> int | None:
        return None

    def gpu_quota(self, namespace: str, resource: str) -> tuple[int, int] | None:
        return None


class SnapshotError(ValueError):
    pass


class SnapshotCluster:
    """A cluster view built from saved API objects (Node, NodeList, ResourceQuota, ResourceQuotaList, List)."""

    def __init__(self, objects: list[dict], name: str = "snapshot"):
        self.name = name
        self.nodes: list[dict] = []
        self.quotas: list[dict] = []
        for obj in objects:
            self._add(obj)
        self._pool_cache: dict[tuple, list[dict]] = {}
        self._domain_cache: dict[tuple, int] = {}

    def _add(self, obj: object) -> None:
        if not isinstance(obj, dict):
            raise SnapshotError("a cluster snapshot holds Kubernetes objects (mappings)")
        kind = obj.get("kind", "")
        if kind.endswith("List") and isinstance(obj.get("items"), list):
            for item in obj["items"]:
                if isinstance(item, dict) and "kind" not in item:
                    item = {**item, "kind": kind[: -len("List")]}
                self._add(item)
        elif kind == "Node":
            self.nodes.append(obj)
        elif kind == "ResourceQuota":
            self.quotas.append(obj)
        elif kind in ("Status",):
            raise SnapshotError(f"snapshot holds an API error: {obj.get('message', obj.get('reason'))}")

    @classmethod
    def from_files(cls, paths: list[str]) -> SnapshotCluster:
        objects: list[dict] = []
        for path in paths:
            text = Path(path).read_text()
            try:
                if path.endswith(".jsonl"):
                    docs = [json.loads(line)["object"] for line in text.splitlines() if line.strip()]
                else:
                    docs = [d for d in yaml.safe_load_all(text) if d is not None]
            except (yaml.YAMLError, json.JSONDecodeError, KeyError, TypeError) as exc:
                raise SnapshotError(f"{path}: not a cluster snapshot: {exc}") from exc
            objects.extend(docs)
        return cls(objects, name=",".join(paths))

    def _pool_members(self, pool: PoolSpec) -> list[dict]:
        key = tuple(sorted(pool.nodeSelector.items()))
        members = self._pool_cache.get(key)
        if members is None:
            selector = pool.nodeSelector
            members = []
            for node in self.nodes:
                labels = (node.get("metadata") or {}).get("labels") or {}
                if all(labels.get(k) == v for k, v in selector.items()):
                    members.append(node)
            self._pool_cache[key] = members
        return members

    def pool_nodes(self, pool: PoolSpec) -> int | None:
        if not self.nodes:
            return None
        return len(self._pool_members(pool))

    def largest_domain(self, pool: PoolSpec, level: TopologyLevel) -> int | None:
        if not self.nodes:
            return None
        key = (tuple(sorted(pool.nodeSelector.items())), level.nodeLabel)
        size = self._domain_cache.get(key)
        if size is None:
            counts = Counter(
                ((n.get("metadata") or {}).get("labels") or {}).get(level.nodeLabel)
                for n in self._pool_members(pool)
            )
            counts.pop(None, None)
            size = max(counts.values(), default=0)
            self._domain_cache[key] = size
        return size

    def gpu_quota(self, namespace: str, resource: str) -> tuple[int, int] | None:
        key = f"requests.{resource}"
        best: tuple[int, int] | None = None
        for quota in self.quotas:
            if (quota.get("metadata") or {}).get("namespace") != namespace:
                continue
            status = quota.get("status") or {}
            hard_raw = (status.get("hard") or (quota.get("spec") or {}).get("hard") or {}).get(key)
            if hard_raw is None:
                continue
            used_raw = (status.get("used") or {}).get(key, "0")
            try:
                hard, used = int(parse_quantity(hard_raw)), int(parse_quantity(used_raw))
            except QuantityError:
                continue
            if best is None or hard - used < best[0] - best[1]:
                best = (hard, used)
        return best
