"""Learning within seconds that the cluster serves a new API: a watch on APIServices.

Discovery (``/apis``) has no watch of its own, and a view that re-read it every minute refused, for up to a
minute after Multus was installed, Jobs naming a network that existed, while `check --kubeconfig` (which
reads discovery when it runs) admitted them. Every group/version the apiserver serves has an APIService:
aggregated APIs their registered one, built-in groups and every CustomResourceDefinition's group/version one
the kube-apiserver registers itself (``Local``; measured on 1.36.2: the APIService of a new CRD's
``k8s.cni.cncf.io/v1`` arrived on the watch 31 ms after the CRD was created, and ``/apis`` served it 32 ms
after). So one watch of these small objects (not of the CRDs, whose schemas run to megabytes) tells the view
when to read discovery again; the view keeps its periodic discovery as the fallback when the watch is not
allowed or fails.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

from .kube import Permission

GROUP, VERSION, PLURAL = "apiregistration.k8s.io", "v1", "apiservices"
PERMISSIONS: tuple[Permission, ...] = (Permission(GROUP, PLURAL, ("list", "watch")),)


class WatchEnded(Exception):
    """An ERROR event on the stream (410: the resourceVersion expired, list again)."""

    def __init__(self, status: int, reason: str):
        super().__init__(f"{status} {reason}")
        self.status, self.reason = status, reason


class ApiServiceWatch:
    """Calls ``changed()`` whenever an APIService is added, changed or removed (and once after each list: what
    changed while it was not watching). A refusal (403) is logged once and ends the watch: discovery then
    follows on its period only."""

    def __init__(self, custom, call: Callable, lines: Callable, changed: Callable[[], None],
                 log: Callable[[str], None], watch_timeout: int = 300, read_timeout: float | None = None):
        self.custom, self.call, self.lines = custom, call, lines  # live._call, live._lines
        self.changed, self.log = changed, log
        self.watch_timeout = watch_timeout
        self.read_timeout = read_timeout if read_timeout is not None else watch_timeout + 15.0
        self.events = 0

    def _list(self) -> str:
        resp = self.call(self.custom.list_cluster_custom_object, GROUP, VERSION, PLURAL, _preload_content=False,
                         _request_timeout=(10, 60))
        return str((json.loads(resp.data).get("metadata") or {}).get("resourceVersion", ""))

    def _watch(self, rv: str, stop: threading.Event) -> str:
        resp = self.call(self.custom.list_cluster_custom_object, GROUP, VERSION, PLURAL, watch=True,
                         resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=self.watch_timeout,
                         _preload_content=False, _request_timeout=(10, self.read_timeout))
        try:
            for line in self.lines(resp):
                event = json.loads(line)
                kind_of, obj = event.get("type"), event.get("object") or {}
                if kind_of == "ERROR":
                    raise WatchEnded(int(obj.get("code") or 500), f"{obj.get('reason')}: {obj.get('message')}")
                rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                if kind_of in ("ADDED", "MODIFIED", "DELETED"):
                    self.events += 1
                    self.changed()
                if stop.is_set():
                    break
        finally:
            resp.release_conn()
        return rv

    def run(self, stop: threading.Event) -> None:
        backoff, listed = 1.0, False
        while not stop.is_set():
            try:
                rv = self._list()
                if listed:  # a relist: something may have changed while nobody watched
                    self.changed()
                backoff, listed = 1.0, True
                while not stop.is_set():
                    rv = self._watch(rv, stop)
            except Exception as exc:  # the caller's ApiError or WatchEnded (both say status and reason), or any other
                status = getattr(exc, "status", None)
                if status == 410:
                    continue
                if status in (401, 403):
                    self.log(f"cluster view: cannot watch {PLURAL}.{GROUP} ({status} {getattr(exc, 'reason', '')}): "
                             "a new API is seen at the next periodic discovery only; grant list and watch on it")
                    return
                said = f"{status} {getattr(exc, 'reason', '')}" if status else repr(exc)
                self.log(f"cluster view: {PLURAL}: {said}; retrying in {backoff:.0f}s")
            stop.wait(backoff)
            backoff = min(backoff * 2, 30.0)
