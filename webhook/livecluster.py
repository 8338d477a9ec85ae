"""A live cluster view: Nodes and ResourceQuotas kept current by list + watch.

The engine asks three questions (``ClusterView``). Answering them must cost the same at 100 nodes
as at 10,000, so nothing is recomputed per request: an index per node selector (the pools') keeps
its member count and, per topology label, how many members each domain has; node events update
those counters in place, and events that do not change a node's labels (status heartbeats) cost a
dict comparison. Lists are paginated; a watch that expires (410) relists; bookmarks keep the
resourceVersion fresh. Objects are kept as plain JSON dicts, exactly as the apiserver sends them.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable

from .policy.models import PoolSpec, TopologyLevel
from .quantity import QuantityError, parse_quantity


class _SelectorIndex:
    def __init__(self, selector: dict[str, str], labels_by_node: dict[str, dict]):
        self.selector = selector
        self.members: set[str] = {n for n, labels in labels_by_node.items() if self.matches(labels)}
        self.domains: dict[str, Counter] = {}
        self.largest: dict[str, int] = {}  # cached max per label key, dropped when its counter changes
        self._labels = labels_by_node

    def matches(self, labels: dict) -> bool:
        return all(labels.get(k) == v for k, v in self.selector.items())

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


class LiveCluster:
    name = "live"

    def __init__(self, core, page_size: int = 500, log: Callable[[str], None] = print,
                 watch_timeout: int = 300):
        self.core = core
        self.page_size = page_size
        self.log = log
        self.watch_timeout = watch_timeout
        self.synced = threading.Event()
        self._lock = threading.Lock()
        self._labels: dict[str, dict] = {}
        self._indices: dict[tuple, _SelectorIndex] = {}
        self._quotas: dict[str, dict[str, dict]] = {}  # namespace -> name -> ResourceQuota
        self._listed: set[str] = set()
        self.relists = 0

    # ---- ClusterView ----------------------------------------------------------------------------
    def _index(self, pool: PoolSpec) -> _SelectorIndex:
        key = tuple(sorted(pool.nodeSelector.items()))
        index = self._indices.get(key)
        if index is None:
            with self._lock:
                index = self._indices.get(key)
                if index is None:
                    index = self._indices[key] = _SelectorIndex(dict(pool.nodeSelector), self._labels)
        return index

    def pool_nodes(self, pool: PoolSpec) -> int | None:
        if not self.synced.is_set():
            return None
        return len(self._index(pool).members)

    def largest_domain(self, pool: PoolSpec, level: TopologyLevel) -> int | None:
        if not self.synced.is_set():
            return None
        index = self._index(pool)
        with self._lock:
            return index.largest_domain(level.nodeLabel)

    def gpu_quota(self, namespace: str, resource: str) -> tuple[int, int] | None:
        if not self.synced.is_set():
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
                best = (hard, used)
        return best

    # ---- keeping it current -----------------------------------------------------------------------
    def _put_node(self, obj: dict) -> None:
        meta = obj.get("metadata") or {}
        name = meta.get("name")
        if not name:
            return
        labels = dict(meta.get("labels") or {})
        with self._lock:
            old = self._labels.get(name)
            if old == labels:
                return
            self._labels[name] = labels
            for index in self._indices.values():
                index.update(name, old, labels)

    def _delete_node(self, obj: dict) -> None:
        name = (obj.get("metadata") or {}).get("name")
        with self._lock:
            old = self._labels.pop(name, None)
            if old is not None:
                for index in self._indices.values():
                    index.update(name, old, None)

    def _put_quota(self, obj: dict) -> None:
        meta = obj.get("metadata") or {}
        self._quotas.setdefault(meta.get("namespace", ""), {})[meta.get("name", "")] = obj

    def _delete_quota(self, obj: dict) -> None:
        meta = obj.get("metadata") or {}
        self._quotas.get(meta.get("namespace", ""), {}).pop(meta.get("name", ""), None)

    def _kinds(self):
        return {
            "nodes": (self.core.list_node, self._put_node, self._delete_node, self._replace_nodes),
            "resourcequotas": (self.core.list_resource_quota_for_all_namespaces, self._put_quota,
                               self._delete_quota, self._replace_quotas),
        }

    def _replace_nodes(self, items: list[dict]) -> None:
        with self._lock:
            self._labels.clear()
            self._indices.clear()  # rebuilt lazily from the fresh list
        for item in items:
            self._put_node(item)

    def _replace_quotas(self, items: list[dict]) -> None:
        fresh: dict[str, dict[str, dict]] = {}
        for obj in items:
            meta = obj.get("metadata") or {}
            fresh.setdefault(meta.get("namespace", ""), {})[meta.get("name", "")] = obj
        self._quotas = fresh  # swapped whole: readers see the old or the new set, never half

    def list_all(self, kind: str) -> str:
        """Paginated list; replaces the kind's contents; returns the list's resourceVersion."""
        func, _, _, replace = self._kinds()[kind]
        items: list[dict] = []
        token = None
        while True:
            kwargs = {"limit": self.page_size, "_preload_content": False}
            if token:
                kwargs["_continue"] = token
            data = json.loads(func(**kwargs).data)
            items.extend(data.get("items") or [])
            token = (data.get("metadata") or {}).get("continue")
            if not token:
                break
        replace(items)
        self._listed.add(kind)
        if self._listed >= {"nodes", "resourcequotas"}:
            self.synced.set()
        return str((data.get("metadata") or {}).get("resourceVersion", ""))

    def watch(self, kind: str, resource_version: str, stop: threading.Event) -> str:
        """Apply watch events until the stream ends and return the last resourceVersion seen;
        raises ApiException(410) when the resourceVersion expired (the caller relists)."""
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        func, put, delete, _ = self._kinds()[kind]
        w = watch.Watch()
        rv = resource_version
        for event in w.stream(func, resource_version=rv, allow_watch_bookmarks=True,
                              timeout_seconds=self.watch_timeout, deserialize=False):
            kind_of, obj = event.get("type"), event.get("object") or {}
            if kind_of == "ERROR":
                raise ApiException(status=obj.get("code"), reason=obj.get("reason"))
            if kind_of in ("ADDED", "MODIFIED"):
                put(obj)
            elif kind_of == "DELETED":
                delete(obj)
            rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
            if stop.is_set():
                w.stop()
                break
        return rv

    def run(self, kind: str, stop: threading.Event) -> None:
        from kubernetes.client.exceptions import ApiException

        backoff = 1.0
        while not stop.is_set():
            try:
                rv = self.list_all(kind)
                backoff = 1.0
                while not stop.is_set():
                    rv = self.watch(kind, rv, stop)
            except ApiException as exc:
                if exc.status == 410:
                    self.relists += 1
                    self.log(f"cluster view: {kind} watch expired; relisting")
                    continue
                self.log(f"cluster view: {kind}: {exc.status} {exc.reason}; retrying in {backoff:.0f}s")
            except Exception as exc:
                self.log(f"cluster view: {kind}: {exc!r}; retrying in {backoff:.0f}s")
            time.sleep(backoff)
            backoff = min(backoff * 2, 30.0)

    def start(self, stop: threading.Event) -> None:
        for kind in ("nodes", "resourcequotas"):
            threading.Thread(target=self.run, args=(kind, stop), name=f"watch-{kind}", daemon=True).start()
