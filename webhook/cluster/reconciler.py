"""The reconciler of the elected replica: PodGroups, the budgets' ResourceQuotas and the reports, one pass
per period under the Lease ``trainadmit-reconciler`` (``Reconciler``).

The PodGroup reconciler creates the PodGroups that gang backends need, after the workload exists: as soon as
the workload's watch event arrives (``PodGroupReconciler.event``, fed by the reconciler's live view of the
workloads; one thread writes them in arrival order, ``run_events``), and again on a slower full pass that lists
every labelled workload (``resync``: the safety net for an event lost or a PodGroup deleted). The Job controller
makes the Pods within half a second of the Job; a PodGroup made from the event is there before them, so the gang
starts as fast as one created by hand. An event is written only while the Lease is known held (``held_until``,
set by each pass the elected loop runs with the Lease renewed, well within the Lease's duration); the same
PodGroup is not written twice for one workload's events unless what it asks for changed (a workload's status
updates are events too).

Admission never creates objects (the workload may still be rejected after the mutating webhook ran, or its
create fail: a generateName workload's drawn name may be taken, ``engine.naming``). The mutating webhook marks
workloads that need a PodGroup with the label ``trainadmit.io/podgroup`` and puts the PodGroup itself in the
annotation of the same name; this loop lists those workloads of every kind that can carry one (batch Jobs and
the custom resources whose adapters gang through their templates) and creates each PodGroup, owned by its
workload, so that garbage collection deletes it with the workload. Only the holder of the Lease
``trainadmit-reconciler`` writes. A kind whose CRD is not installed is skipped.

A resize (an UPDATE of the workload's counts, validated and never mutated, so the annotation keeps the size of
the CREATE) is carried through here: the PodGroup's size is the workload's gang size as its adapter reads the
stored object now (``minMember``, native ``minCount``, and the GPUs of ``minResources``), and an existing
PodGroup of another size is patched to it. A native PodGroup of ``scheduling.k8s.io/v1alpha2`` (Kubernetes
1.36) cannot change its ``schedulingPolicy``; the engine refuses those resizes, and one found here is reported.

The budgets (``cluster.budget``) and the reports (``cluster.report_writer``) take the policy of the
served directory, as the workers do, reloaded when it changes; each part's failure is logged and
leaves the others running.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..engine.workloads import ADAPTERS, GangMethod, pod_resource_total, workload_of
from .lease import LeaderLease

PLURALS = {"PodGroup": "podgroups"}


def podgroup_kinds() -> list[tuple[str, str, str]]:
    """(group, version, plural) of every kind whose workloads may need a PodGroup from the reconciler."""
    out = []
    for adapter in ADAPTERS:
        if any(g.method is GangMethod.templates for g in adapter.gangs.values()):
            out.extend((adapter.group, v, adapter.plural) for v in adapter.versions)
    return out


@dataclass
class PodGroupReconciler:
    custom: object  # kubernetes.client.CustomObjectsApi (lists built-in batch Jobs as well: same URL shape)
    lease: LeaderLease | None = None
    key: str = "trainadmit.io/podgroup"
    log: Callable[[str], None] = print
    created: list[str] = field(default_factory=list)
    kinds: list[tuple[str, str, str]] = field(default_factory=podgroup_kinds)
    resync: float = 0.0  # seconds between full passes (0: every step); events make the PodGroups meanwhile
    on_write: Callable[[str, str, str], None] | None = None  # (kind, verb, result) of each write: metrics
    on_lag: Callable[[float], None] | None = None  # seconds from an event's arrival to its PodGroup written
    clock: Callable[[], float] = time.monotonic
    held_until: float = 0.0  # the clock until which the Lease is known held (``held``): events are written
    _missing: set[tuple[str, str, str]] = field(default_factory=set)
    _events: queue.Queue = field(default_factory=queue.Queue)
    _ensured: dict[str, str] = field(default_factory=dict)  # workload uid -> the PodGroup last made or found for it
    _last_pass: float | None = None

    def desired(self, obj: dict) -> dict | None:
        """The PodGroup a workload asks for (from its annotation), owned by the workload."""
        meta = obj.get("metadata") or {}
        raw = (meta.get("annotations") or {}).get(self.key)
        if not raw:
            return None
        try:
            pg = json.loads(raw)
        except ValueError:
            self.log(f"reconciler: {meta.get('namespace')}/{meta.get('name')}: annotation {self.key} is not JSON")
            return None
        if not isinstance(pg, dict) or pg.get("kind") not in PLURALS or "/" not in str(pg.get("apiVersion")):
            return None
        pg.setdefault("metadata", {})
        pg["metadata"].update(namespace=meta.get("namespace"), labels={"app.kubernetes.io/managed-by": "trainadmit"},
                              ownerReferences=[{"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
                                                "name": meta.get("name"), "uid": meta.get("uid"), "controller": True,
                                                "blockOwnerDeletion": True}])
        return sized(pg, obj)

    def _wrote(self, kind: str, verb: str, result: str) -> None:
        if self.on_write is not None:
            self.on_write(kind, verb, result)

    def ensure(self, pg: dict) -> str:
        from kubernetes.client.exceptions import ApiException

        group, version = pg["apiVersion"].split("/", 1)
        meta = pg["metadata"]
        try:
            self.custom.create_namespaced_custom_object(group, version, meta["namespace"], PLURALS[pg["kind"]], pg)
        except ApiException as exc:
            if exc.status == 409:
                self._wrote(pg["kind"], "create", "exists")
                return self.follow(pg)
            self._wrote(pg["kind"], "create", "error")
            if exc.status == 404:
                return f"{pg['apiVersion']} {pg['kind']} is not served by this cluster (CRD or feature gate missing)"
            raise
        except Exception:
            self._wrote(pg["kind"], "create", "error")
            raise
        self._wrote(pg["kind"], "create", "ok")
        self.created.append(f"{meta['namespace']}/{meta['name']}")
        return "created"

    def follow(self, pg: dict) -> str:
        """An existing PodGroup: patched to the size ``pg`` asks for when its own differs ("resized N -> M")."""
        group, version = pg["apiVersion"].split("/", 1)
        meta = pg["metadata"]
        current = self.custom.get_namespaced_custom_object(group, version, meta["namespace"], PLURALS[pg["kind"]],
                                                           meta["name"])
        change = size_change(current.get("spec") or {}, pg.get("spec") or {})
        if not change:
            return "exists"
        if pg["apiVersion"].endswith("/v1alpha2"):
            return f"cannot resize to {gang_size(pg['spec'])}: schedulingPolicy is immutable in {pg['apiVersion']}"
        try:
            self.custom.patch_namespaced_custom_object(group, version, meta["namespace"], PLURALS[pg["kind"]],
                                                       meta["name"], {"spec": change})
        except Exception:
            self._wrote(pg["kind"], "patch", "error")
            raise
        self._wrote(pg["kind"], "patch", "ok")
        return f"resized {gang_size(current.get('spec') or {})} -> {gang_size(pg['spec'])}"

    def _workloads(self) -> list[dict]:
        from kubernetes.client.exceptions import ApiException

        out: list[dict] = []
        for kind in self.kinds:
            try:
                listed = self.custom.list_cluster_custom_object(*kind, label_selector=self.key)
            except ApiException as exc:
                if exc.status == 404:  # that kind's CRD is not installed: nothing of it to reconcile
                    if kind not in self._missing:
                        self._missing.add(kind)
                        self.log(f"reconciler: {'/'.join(kind)} is not served; skipping it")
                    continue
                raise
            self._missing.discard(kind)
            # a real apiserver's list items carry no apiVersion/kind (the owner reference needs both)
            group, version = kind[0], kind[1]
            item_kind = str(listed.get("kind") or "").removesuffix("List")
            for item in listed.get("items") or []:
                if isinstance(item, dict):
                    item.setdefault("apiVersion", f"{group}/{version}" if group else version)
                    item.setdefault("kind", item_kind)
                    out.append(item)
        return out

    def step(self) -> list[str]:
        """A full pass over every labelled workload, when ``resync`` seconds have passed since the last one."""
        if self.lease is not None and not self.lease.hold():
            return []
        now = self.clock()
        if self._last_pass is not None and now - self._last_pass < self.resync:
            return []
        self._last_pass = now
        out = []
        listed = self._workloads()
        seen = {str((o.get("metadata") or {}).get("uid")) for o in listed}
        for uid in [u for u in self._ensured if u not in seen]:  # gone (a DELETED event a relist skipped)
            self._ensured.pop(uid, None)
        for obj in listed:
            if _finished(obj):
                continue  # nothing will be scheduled any more
            pg = self.desired(obj)
            if pg is None:
                continue
            result = self.ensure(pg)
            self._remember(obj, pg)
            if result != "exists":
                out.append(f"{pg['metadata']['namespace']}/{pg['metadata']['name']}: {result}")
        return out

    # ---- events -----------------------------------------------------------------------------------
    def held(self, seconds: float) -> None:
        """The Lease was just renewed: events may be written for ``seconds`` (less than the Lease's duration)."""
        self.held_until = self.clock() + seconds

    def event(self, kind_of: str, obj: dict) -> None:
        """A workload's watch event (called on the watch thread: only queues it)."""
        meta = obj.get("metadata") or {}
        if kind_of == "DELETED":
            self._ensured.pop(str(meta.get("uid")), None)
            return
        if kind_of in ("ADDED", "MODIFIED") and self.key in (meta.get("labels") or {}):
            self._events.put((self.clock(), obj))

    def _remember(self, obj: dict, pg: dict) -> None:
        uid = (obj.get("metadata") or {}).get("uid")
        if uid:
            self._ensured[str(uid)] = json.dumps(pg, sort_keys=True)

    def handle(self, arrived: float, obj: dict) -> str | None:
        """The PodGroup for one event's workload; what happened (None: nothing written)."""
        if self.clock() > self.held_until or _finished(obj):
            return None  # not (known to be) the leader: the elected replica's events and passes make it
        pg = self.desired(obj)
        if pg is None:
            return None
        uid = str((obj.get("metadata") or {}).get("uid"))
        if self._ensured.get(uid) == json.dumps(pg, sort_keys=True):
            return None  # already made, or found, as it is asked for now
        result = self.ensure(pg)
        self._remember(obj, pg)
        if self.on_lag is not None:
            self.on_lag(max(0.0, self.clock() - arrived))
        return result

    def run_events(self, stop: threading.Event) -> None:
        """Write the PodGroups of queued events, in arrival order, until ``stop``."""
        while not stop.is_set():
            try:
                arrived, obj = self._events.get(timeout=0.5)
            except queue.Empty:
                continue
            meta = obj.get("metadata") or {}
            try:
                result = self.handle(arrived, obj)
            except Exception as exc:  # logged; the next event or the full pass tries again
                self.log(f"reconciler: {meta.get('namespace')}/{meta.get('name')}: event failed: {exc!r}")
                continue
            if result is not None and result != "exists":
                self.log(f"reconciler: {meta.get('namespace')}/{meta.get('name')}: PodGroup {result} (event)")

    def run(self, stop: threading.Event, interval: float = 5.0) -> None:
        while not stop.is_set():
            try:
                for line in self.step():
                    self.log(f"reconciler: {line}")
            except Exception as exc:
                self.log(f"reconciler: pass failed: {exc!r}")
            stop.wait(interval)


def gang_size(spec: dict) -> object:
    """A PodGroup spec's gang size: coscheduling's and Volcano's ``minMember``, the native ``minCount``."""
    if "minMember" in spec:
        return spec["minMember"]
    return ((spec.get("schedulingPolicy") or {}).get("gang") or {}).get("minCount")


def sized(pg: dict, obj: dict) -> dict:
    """``pg`` at the size of the workload ``obj`` as it is stored now: its adapter's gang size, and the
    GPUs of every Pod that runs at once in ``minResources`` (the workload may have been resized since
    admission wrote the annotation)."""
    workload = workload_of(obj)
    spec = pg.get("spec")
    if workload is None or not isinstance(spec, dict):
        return pg
    size = workload.gang_size
    if "minMember" in spec:
        spec["minMember"] = size
    gang = (spec.get("schedulingPolicy") or {}).get("gang")
    if isinstance(gang, dict) and "minCount" in gang:
        gang["minCount"] = size
    resources = spec.get("minResources")
    if isinstance(resources, dict):
        for name in resources:
            resources[name] = str(sum(t.pods * pod_resource_total(t, name) for t in workload.templates))
    return pg


def size_change(current: dict, wanted: dict) -> dict:
    """The merge patch that gives the PodGroup spec ``current`` the size of ``wanted`` ({}: the same)."""
    change: dict = {}
    for key in ("minMember", "minResources"):
        if key in wanted and current.get(key) != wanted[key]:
            change[key] = wanted[key]
    count = gang_size(wanted) if "minMember" not in wanted else None
    if count is not None and gang_size(current) != count:
        change["schedulingPolicy"] = {"gang": {"minCount": count}}
    return change


@dataclass
class Reconciler:
    """One pass: the PodGroups, then (with a policy) each policy part. Every part runs even when another
    fails (a missing permission for reports must not stop the PodGroups); the first failure is then raised,
    so that the loop running the pass (``server.elected``) logs it and shows it on /readyz. ``lease`` is for a
    caller that does not hold the Lease itself (None: the caller does)."""

    lease: LeaderLease | None
    podgroups: PodGroupReconciler | None = None
    policy: Callable[[], object] | None = None  # the current PolicySet (cluster.policy_dir.PolicyDirectory)
    parts: list[tuple[str, Callable[[object], list[str]]]] = field(default_factory=list)  # (name, step(policy))
    log: Callable[[str], None] = print
    on_elected: Callable[[], None] | None = None  # once, the first pass this replica runs
    on_pass: Callable[[float], None] | None = None  # seconds each pass took: metrics
    hold_margin: float = 30.0  # seconds the PodGroups' events are written after a pass with the Lease held
    _elected: bool = False

    def step(self) -> list[str]:
        if self.lease is not None and not self.lease.hold():
            return []
        started = time.monotonic()
        try:
            return self._step()
        finally:
            if self.on_pass is not None:
                self.on_pass(time.monotonic() - started)

    def _step(self) -> list[str]:
        if self.podgroups is not None:  # called with the Lease renewed (by the caller, or above)
            self.podgroups.held(self.hold_margin)
        if not self._elected:
            self._elected = True
            if self.on_elected is not None:
                self.on_elected()
        out: list[str] = []
        failure: Exception | None = None
        calls: list[tuple[str, Callable[[], list[str]]]] = []
        if self.podgroups is not None:
            calls.append(("podgroups", self.podgroups.step))
        policy = self.policy() if self.policy is not None else None
        if policy is not None:
            calls += [(name, lambda part=part: part(policy)) for name, part in self.parts]
        for name, call in calls:
            try:
                out.extend(f"{name}: {line}" if name != "podgroups" else line for line in call())
            except Exception as exc:
                failure = failure or exc
        if failure is not None:
            raise failure
        return out


def _finished(obj: dict) -> bool:
    """A batch Job that completed or failed: its Pods are gone and no PodGroup is needed."""
    status = obj.get("status") or {}
    return bool((status.get("succeeded") or 0) + (status.get("failed") or 0) > 0 and not status.get("active")
                and status.get("completionTime"))


__all__ = ["PodGroupReconciler", "Reconciler", "podgroup_kinds"]
