"""A live cluster view: Nodes and ResourceQuotas kept current by list + watch.

The answers come from ``cluster.ClusterIndex`` (the same code as the snapshot view); this module
only keeps the index current. Lists are paginated; a watch that expires (410) relists; bookmarks
keep the resourceVersion fresh. Objects are kept as plain JSON dicts, as the apiserver sends them,
and the view answers "unknown" until the first list of both kinds is in.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

from .index import ClusterIndex


class LiveCluster(ClusterIndex):
    name = "live"

    def __init__(self, core, page_size: int = 500, log: Callable[[str], None] = print,
                 watch_timeout: int = 300):
        super().__init__()
        self.core = core
        self.page_size = page_size
        self.log = log
        self.watch_timeout = watch_timeout
        self.synced = threading.Event()
        self._listed: set[str] = set()
        self.relists = 0

    def knows_nodes(self) -> bool:
        return self.synced.is_set()

    def knows_quotas(self) -> bool:
        return self.synced.is_set()

    def _kinds(self):
        return {
            "nodes": (self.core.list_node, self.put_node, self.delete_node, self.replace_nodes),
            "resourcequotas": (self.core.list_resource_quota_for_all_namespaces, self.put_quota,
                               self.delete_quota, self.replace_quotas),
        }

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
