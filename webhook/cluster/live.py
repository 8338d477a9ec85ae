"""A live cluster view: Nodes, ResourceQuotas, the referenced kinds and the training workloads, kept
current by list + watch.

The answers come from ``cluster.ClusterIndex`` (the same code as the snapshot view); this module
only keeps the index current, and says how old it is. Lists are paginated; a watch that expires
(410, as an HTTP status or as an ERROR event) relists; bookmarks keep the resourceVersion fresh.
Objects are kept as plain JSON dicts, as the apiserver sends them, and the view answers "unknown"
until the first list of every required kind and the first discovery (``/version`` and ``/apis``) are in.

Kinds a CRD adds (Multus networks, Volcano queues, Kueue local queues, the operators' workloads) are
optional: a 404 on their list means the cluster does not serve them, which the engine reports as such
(a workload kind that is not served has no workloads). A watch on APIServices (``api_watch``) wakes discovery
whenever an API is added or removed, and a kind not served is listed as soon as discovery shows its
group/version (within seconds of its CRD), else again after ``crd_recheck`` seconds. Workloads are kept as
the small records of ``cluster.workloads`` (what each holds, for the namespace GPU budget), or whole for the
reports writer (``keep_workloads``); ``on_workload`` hears every workload event (the PodGroup reconciler reacts
to a created workload at once).

Freshness: each kind records when it was last known current (a list completed, a watch opened, an
event or bookmark arrived, a watch ended normally after its ``timeoutSeconds``). Watches carry a
client read timeout, so a connection that stalls without closing raises instead of hanging. When
the oldest kind is older than ``max_age`` the view is stale: ``/readyz`` fails, and decisions made
meanwhile report ``cluster.view-stale`` and ignore the view.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..engine.clusterview import CORE_REFERENCE_KINDS, REFERENCE_KINDS, RefKind
from . import api_watch
from .index import ClusterIndex
from .kube import Permission
from .workloads import WORKLOAD_KINDS, WorkloadIndex, WorkloadKind


@dataclass(frozen=True)
class Watched:
    """One kind the view lists and watches."""

    name: str  # the resource (plural)
    group: str
    version: str
    required: bool  # needed for the first sync; optional kinds may be unserved (their CRD is not installed)
    ref: RefKind | None = None
    workload: WorkloadKind | None = None
    plural: str = ""  # when ``name`` is not the resource (workload collections: one per served version)

    @property
    def resource(self) -> str:
        return self.plural or self.name


WATCHED: tuple[Watched, ...] = (
    Watched("nodes", "", "v1", True),
    Watched("resourcequotas", "", "v1", True),
    *(Watched(k.plural, k.group, k.version, k in CORE_REFERENCE_KINDS, k) for k in REFERENCE_KINDS),
    *(Watched(k.source, k.group, k.version, k.group == "batch", workload=k, plural=k.plural) for k in WORKLOAD_KINDS),
)
# what the view needs from RBAC (deploy/base/rbac.yaml grants it; tests/project/test_deploy.py compares)
PERMISSIONS: tuple[Permission, ...] = (
    *(Permission(w.group, w.name, ("list", "watch")) for w in WATCHED if w.workload is None),
    *(Permission(group, plural, ("list", "watch")) for group, plural in sorted({(w.group, w.resource) for w in WATCHED
                                                                              if w.workload is not None})),
    *api_watch.PERMISSIONS)
# after an API changed, discovery is read again at these delays until it shows the change (it follows the
# APIService within milliseconds on 1.36.2; an aggregated API may take longer to become available)
DISCOVERY_RETRIES: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0)


class ApiError(Exception):
    """A non-2xx answer, or an ERROR event on a watch stream."""

    def __init__(self, status: int, reason: str):
        super().__init__(f"{status} {reason}")
        self.status, self.reason = status, reason


def _call(func: Callable, *args, **kwargs):
    """Call a generated client function for its raw response; any non-2xx answer becomes ApiError.

    The client raises ApiException on a non-2xx answer even with ``_preload_content=False``, so what it
    returns is always a 2xx; the apiserver's own message (a Status in the body) says more than the
    HTTP reason phrase ("nodes is forbidden: User ... cannot list ..." rather than "Forbidden")."""
    from kubernetes.client.exceptions import ApiException

    try:
        return func(*args, **kwargs)
    except ApiException as exc:
        raise ApiError(int(exc.status or 0), _message(exc)) from exc


def _message(exc) -> str:
    """The ``message`` of the Status the apiserver sent, else the HTTP reason phrase."""
    try:
        message = json.loads(exc.body or "").get("message")
    except (ValueError, TypeError, AttributeError):
        message = None
    return str(message or exc.reason or "")


def _lines(resp):
    """Lines of a streamed watch response, as they arrive."""
    buf = b""
    for chunk in resp.stream(65536, decode_content=False):
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.strip():
                yield line
    if buf.strip():
        yield buf


def watch_events(resp):
    """(type, object) of each event of a streamed watch response; a watch ``ERROR`` event (410 Gone: the
    resourceVersion expired) raises ApiError, so every watcher relists the same way."""
    for line in _lines(resp):
        event = json.loads(line)
        kind_of, obj = event.get("type"), event.get("object") or {}
        if kind_of == "ERROR":
            raise ApiError(int(obj.get("code") or 500), f"{obj.get('reason')}: {obj.get('message')}")
        yield kind_of, obj


class LiveCluster(ClusterIndex):
    name = "live"

    def __init__(self, core, page_size: int = 500, log: Callable[[str], None] = print, watch_timeout: int = 60,
                 custom=None, max_age: float | None = None, read_timeout: float | None = None,
                 crd_recheck: float = 60.0, discovery_interval: float = 60.0,
                 clock: Callable[[], float] = time.monotonic, keep_workloads: bool = False,
                 on_change: Callable[[str, str], None] | None = None, watch_apis: bool = True,
                 on_workload: Callable[[str, dict], None] | None = None):
        super().__init__()
        self.on_change = on_change  # (what changed: "workloads" | "resourcequotas", namespace)
        # (event type, object) of every workload event and every workload a (re)list returns ("ADDED"), called on
        # the watch thread: it must return at once (the PodGroup reconciler queues it)
        self.on_workload = on_workload
        self.workloads = WorkloadIndex(keep_workloads, self._workloads_changed if on_change else None)
        self.core = core
        self.custom = custom
        self.page_size = page_size
        self.log = log
        self.watch_timeout = watch_timeout
        self.read_timeout = read_timeout if read_timeout is not None else watch_timeout + 15.0
        self.max_age = max_age
        self.crd_recheck = crd_recheck
        self.discovery_interval = discovery_interval
        self.clock = clock
        self.synced = threading.Event()
        self._listed: set[str] = set()
        self._fresh: dict[str, float] = {}
        self.relists = 0
        self.bookmarks = 0
        self._by_name = {w.name: w for w in WATCHED}
        self.watch_apis = watch_apis
        self._apis_changed = threading.Event()  # set by the APIService watch: read discovery again
        self._served_changed = threading.Condition()  # notified when discovery shows other group/versions

    def knows_nodes(self) -> bool:
        return self.synced.is_set()

    def knows_quotas(self) -> bool:
        return self.synced.is_set()

    # ---- freshness ------------------------------------------------------------------------------
    def _touch(self, kind: str) -> None:
        self._fresh[kind] = self.clock()

    def age(self) -> float | None:
        """Seconds since the least recently confirmed kind was known current (None before the first sync)."""
        if not self.synced.is_set() or not self._fresh:
            return None
        return max(0.0, self.clock() - min(self._fresh.values()))

    def stale(self) -> str | None:
        age = self.age()
        if self.max_age is None or age is None or age <= self.max_age:
            return None
        oldest = min(self._fresh, key=self._fresh.__getitem__)
        return (f"the cluster view is {age:.0f}s old ({oldest} last confirmed then), over the limit of "
                f"{self.max_age:.0f}s")

    def _workloads_changed(self, namespace: str) -> None:
        if self.on_change is not None:
            self.on_change("workloads", namespace)

    def _quota_changed(self, obj: dict) -> None:
        if self.on_change is not None:
            self.on_change("resourcequotas", str((obj.get("metadata") or {}).get("namespace") or ""))

    # ---- API calls ------------------------------------------------------------------------------
    def _api(self, w: Watched) -> tuple[Callable, tuple]:
        if w.group == "" and w.workload is None:
            return {"nodes": self.core.list_node, "resourcequotas": self.core.list_resource_quota_for_all_namespaces,
                    "persistentvolumeclaims": self.core.list_persistent_volume_claim_for_all_namespaces}[w.name], ()
        if self.custom is None:
            from kubernetes import client

            self.custom = client.CustomObjectsApi(self.core.api_client)
        return self.custom.list_cluster_custom_object, (w.group, w.version, w.resource)

    def _apply(self, w: Watched, kind_of: str, obj: dict) -> None:
        if w.workload is not None:
            obj.setdefault("apiVersion", w.workload.api_version)  # a list's items carry neither
            obj.setdefault("kind", w.workload.kind)
            (self.workloads.put if kind_of != "DELETED" else self.workloads.delete)(w.name, obj)
            if self.on_workload is not None:
                self.on_workload(kind_of, obj)
        elif w.ref is not None:
            (self.put_ref if kind_of != "DELETED" else self.delete_ref)(w.ref, obj)
        elif w.name == "nodes":
            (self.put_node if kind_of != "DELETED" else self.delete_node)(obj)
        else:
            (self.put_quota if kind_of != "DELETED" else self.delete_quota)(obj)
            self._quota_changed(obj)

    def _replace(self, w: Watched, items: list[dict]) -> None:
        if w.workload is not None:
            for obj in items:
                obj.setdefault("apiVersion", w.workload.api_version)
                obj.setdefault("kind", w.workload.kind)
            self.workloads.replace(w.name, items)
            if self.on_workload is not None:  # what a relist finds: the events a watch that expired may have missed
                for obj in items:
                    self.on_workload("ADDED", obj)
        elif w.ref is not None:
            self.replace_refs(w.ref, items)
        elif w.name == "nodes":
            self.replace_nodes(items)
        else:
            self.replace_quotas(items)
            for obj in items:
                self._quota_changed(obj)

    def _mark_listed(self, kind: str) -> None:
        self._listed.add(kind)
        self._touch(kind)
        self._check_synced()

    def _check_synced(self) -> None:
        if self._discovered is not None and self._listed >= {w.name for w in WATCHED if w.required}:
            self.synced.set()

    def list_all(self, kind: str) -> str:
        """Paginated list; replaces the kind's contents; returns the list's resourceVersion."""
        w = self._by_name[kind]
        func, args = self._api(w)
        items: list[dict] = []
        token = None
        while True:
            kwargs = {"limit": self.page_size, "_preload_content": False, "_request_timeout": (10, 60)}
            if token:
                kwargs["_continue"] = token
            resp = _call(func, *args, **kwargs)
            data = json.loads(resp.data)
            items.extend(data.get("items") or [])
            token = (data.get("metadata") or {}).get("continue")
            if not token:
                break
        self._replace(w, items)
        self._mark_listed(kind)
        return str((data.get("metadata") or {}).get("resourceVersion", ""))

    def watch(self, kind: str, resource_version: str, stop: threading.Event) -> str:
        """Apply watch events until the stream ends and return the last resourceVersion seen;
        raises ApiError(410) when the resourceVersion expired (the caller relists)."""
        w = self._by_name[kind]
        func, args = self._api(w)
        resp = _call(func, *args, watch=True, resource_version=resource_version, allow_watch_bookmarks=True,
                     timeout_seconds=self.watch_timeout, _preload_content=False,
                     _request_timeout=(10, self.read_timeout))
        rv = resource_version
        self._touch(kind)
        try:
            for kind_of, obj in watch_events(resp):
                if kind_of == "BOOKMARK":
                    self.bookmarks += 1
                elif kind_of in ("ADDED", "MODIFIED", "DELETED"):
                    self._apply(w, kind_of, obj)
                rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                self._touch(kind)
                if stop.is_set():
                    break
        finally:
            resp.release_conn()
        self._touch(kind)  # the server ended the watch after timeoutSeconds: nothing was missed
        return rv

    def discover(self) -> None:
        """The apiserver's version and the group/versions it serves (``discovery``): what ``auto`` chooses from,
        and the PodGroup kinds the reconciler writes."""
        from .discovery import read

        served, version, git_version = read(self.core.api_client, _call)
        before = self._discovered
        self.set_served(served, version, git_version)
        self._check_synced()
        if self._discovered is not before:
            with self._served_changed:
                self._served_changed.notify_all()

    def _await_served(self, w: Watched, stop: threading.Event, pause: float) -> None:
        """A kind whose list said 404: wait until discovery shows its group/version (at most ``crd_recheck``
        seconds). One discovery shows already (its CRD is being established) is listed again after ``pause``."""
        api = f"{w.group}/{w.version}" if w.group else w.version
        if self.serves(api):
            stop.wait(pause)
            return
        deadline = time.monotonic() + self.crd_recheck
        with self._served_changed:
            while not stop.is_set() and not self.serves(api) and (left := deadline - time.monotonic()) > 0:
                self._served_changed.wait(min(1.0, left))

    def apis_changed(self) -> None:
        """An API was added or removed (``api_watch``): read discovery again now."""
        self._apis_changed.set()

    def _await_api_change(self, stop: threading.Event) -> bool:
        """Until an API changed (True) or ``discovery_interval`` passed (False)."""
        deadline = time.monotonic() + self.discovery_interval
        while not stop.is_set() and (left := deadline - time.monotonic()) > 0:
            if self._apis_changed.wait(min(1.0, left)):
                self._apis_changed.clear()
                return True
        return False

    # ---- loops ----------------------------------------------------------------------------------
    def run(self, kind: str, stop: threading.Event) -> None:
        w = self._by_name[kind]
        backoff = pause = 1.0
        while not stop.is_set():
            try:
                rv = self.list_all(kind)
                backoff = pause = 1.0
                while not stop.is_set():
                    rv = self.watch(kind, rv, stop)
            except ApiError as exc:
                if exc.status == 410:
                    self.relists += 1
                    self.log(f"cluster view: {kind} watch expired; relisting")
                    continue
                if exc.status == 404 and not w.required and (w.ref is not None or w.workload is not None):
                    if w.ref is not None:  # its CRD is not installed: nothing of it can exist
                        self.refs_not_served(w.ref)
                    else:
                        self.workloads.not_served(w.name)
                    self._fresh.pop(kind, None)  # nothing to keep current until it is served
                    self._await_served(w, stop, pause)
                    pause = min(pause * 2, self.crd_recheck)
                    continue
                self.log(f"cluster view: {kind}: {exc.status} {exc.reason}; retrying in {backoff:.0f}s")
            except Exception as exc:
                self.log(f"cluster view: {kind}: {exc!r}; retrying in {backoff:.0f}s")
            stop.wait(backoff)
            # until the first sync /readyz waits on every required list: retry those soon; later, back off
            backoff = min(backoff * 2, 30.0 if self.synced.is_set() else 4.0)

    def run_discovery(self, stop: threading.Event) -> None:
        retries: tuple[float, ...] = ()
        while not stop.is_set():
            before = self._discovered
            try:
                self.discover()
            except Exception as exc:
                self.log(f"cluster view: discovery: {exc!r}; retrying in 5s")
                stop.wait(5.0)
                continue
            if retries and self._discovered is before:  # an API changed and discovery does not show it yet
                stop.wait(retries[0])
                retries = retries[1:]
                continue
            retries = DISCOVERY_RETRIES if self._await_api_change(stop) else ()

    def start(self, stop: threading.Event) -> None:
        threading.Thread(target=self.run_discovery, args=(stop,), name="discovery", daemon=True).start()
        if self.watch_apis:
            if self.custom is None:
                from kubernetes import client

                self.custom = client.CustomObjectsApi(self.core.api_client)
            watch = api_watch.ApiServiceWatch(self.custom, _call, _lines, self.apis_changed, self.log,
                                              self.watch_timeout, self.read_timeout)
            threading.Thread(target=watch.run, args=(stop,), name="watch-apiservices", daemon=True).start()
        for w in WATCHED:
            threading.Thread(target=self.run, args=(w.name, stop), name=f"watch-{w.name}", daemon=True).start()
