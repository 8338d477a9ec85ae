"""The ungater: one domain with room for the whole gang, written into all of its Pods, then their gate lifted.

The mutating webhook gates the Pods of a gang whose cluster cannot hold it in one domain itself
(``engine.concerns.topology``): ``spec.schedulingGates`` holds ``trainadmit.io/placement`` and the pod
template annotation of the same name says the gang (``<ns>/<workload>``), its size, the level's node label and the
pool's node selector. This controller, run by the elected reconciler's replica (``serve --reconcile``), reacts to
Pod and Node events (``cluster.pod_store``) and, per gang:

- the gang has a domain already (a Pod of it, not on its way out, carries ``trainadmit.io/placement-domain``: a
  replacement Pod of a running gang, or a release a crash or a lost Lease interrupted): its gated Pods are released
  into that domain once it has room for all of them (a new leader finishes a release into the same domain); while it
  has not (filled meanwhile), they stay gated with ``WaitingForDomain``, never released elsewhere;
- else, once ``size`` gated Pods of it exist, the domain of the level with room for all of them is chosen
  (``choose``): usable nodes (Ready, schedulable, every NoSchedule/NoExecute taint tolerated, the Pods' node selector
  and required node affinity met) with the extended resources the Pods ask for free after every active Pod bound
  there and every Pod released into that domain but not yet bound (``Ledger``: two gangs never count the same
  room); the best fit (least room left) wins, then the name;
- no domain has room: they all stay gated (never a part of the gang holding GPUs); Event ``WaitingForDomain`` on its
  Pods and their controller, once per wait; retried on the next Pod or Node event.

A release is one JSON patch per Pod that adds ``spec.nodeSelector[<key>] = <domain>`` and the annotation
``trainadmit.io/placement-domain``, and removes the gate (a ``test`` of the gate at its index first, so a Pod changed
meanwhile is refused and retried): the only change the server's account may make to a Pod (``deploy/base``).
Gangs are served oldest first, so two gangs that arrive together are placed in the order they were created.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ..cluster.index import NodeFacts, tolerates
from ..grammars.quantity import QuantityError, parse_quantity
from ..policy.vocab import label_integer
from .kube import Permission
from .pod_store import PodFacts, PodStore

WAITING_REASON = "WaitingForDomain"
# watch the Pods and Nodes, patch a gated Pod once (the fence of deploy/base limits how), say why a gang waits
PERMISSIONS: tuple[Permission, ...] = (Permission("", "pods", ("list", "watch", "patch")),
                                       Permission("", "nodes", ("list", "watch")),
                                       Permission("", "events", ("create",)))


@dataclass(frozen=True)
class GangSpec:
    """The template annotation, read from a Pod."""

    gang: str
    size: int
    key: str
    level: str
    pool: tuple[tuple[str, str], ...]

    @classmethod
    def read(cls, text: str) -> GangSpec | None:
        try:
            data = json.loads(text)
            return cls(str(data.get("gang") or ""), int(data.get("size") or 0), str(data["key"]),
                       str(data.get("level") or data["key"]), tuple(sorted((data.get("pool") or {}).items())))
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


def gang_id(pod: PodFacts, spec: GangSpec) -> str:
    """The gang a Pod belongs to: the annotation's, else (a workload created without a name) its controller's uid."""
    if spec.gang:
        return spec.gang
    return f"{pod.namespace}/uid:{pod.owner[3] if pod.owner else pod.uid}"


# ---- which nodes a Pod may use ---------------------------------------------------------------------------

def tolerated(pod: PodFacts, key: str, value: str, effect: str) -> bool:
    return tolerates(pod.tolerations, key, value, effect)


def _expression(expr: dict, labels: dict) -> bool:
    key, op, values = expr.get("key"), expr.get("operator"), [str(v) for v in expr.get("values") or []]
    value = labels.get(key)
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and values:
        number, bound = label_integer(value), label_integer(values[0])
        if number is None or bound is None:
            return False
        return number > bound if op == "Gt" else number < bound
    return False


def affinity_met(pod: PodFacts, labels: dict) -> bool:
    """Required node affinity: any term whose every expression matches (``matchFields`` is not read)."""
    if not pod.affinity_terms:
        return True
    terms = json.loads(pod.affinity_terms)
    return any(all(_expression(e, labels) for e in (t or {}).get("matchExpressions") or []) for t in terms or [])


def usable(pod: PodFacts, spec: GangSpec, node: NodeFacts) -> bool:
    """The scheduler could bind ``pod`` there, resources aside (the domain's label set, the rest as it filters)."""
    labels = node.labels
    if not node.ready or node.unschedulable or spec.key not in labels:
        return False
    if any(labels.get(k) != v for k, v in (*spec.pool, *pod.node_selector)):
        return False
    if any(not tolerated(pod, k, v, e) for k, v, e in node.taints):
        return False
    return affinity_met(pod, labels)


def allocatable(node: NodeFacts) -> dict[str, int]:
    """The node's allocatable resources as integers (a copy: callers subtract from it)."""
    return dict(_allocatable(node.allocatable))


@functools.lru_cache(maxsize=1 << 16)
def _allocatable(pairs: tuple) -> tuple[tuple[str, int], ...]:
    """Parsed once per distinct allocatable (nodes of one shape share it; a plan reads every node per event)."""
    out = {}
    for k, v in pairs:
        try:
            out[k] = int(parse_quantity(v))
        except (QuantityError, ValueError):
            continue
    return tuple(out.items())


# ---- the domain choice ---------------------------------------------------------------------------------

@dataclass
class Ledger:
    """Pods released into a domain and not yet bound, by uid: (key, domain, requests). Filled from the Pods' own
    annotations (what any leader can read) and from the releases this replica just made, before their watch event
    arrives; an entry goes once its Pod is bound, ends or is gone."""

    held: dict[str, tuple[str, str, tuple[tuple[str, int], ...]]] = field(default_factory=dict)

    def add(self, pod: PodFacts, key: str, domain: str) -> None:
        self.held[pod.uid] = (key, domain, pod.requests)

    def refresh(self, pods: Iterable[PodFacts]) -> None:
        """Forget what is bound, ended or gone; learn the releases readable from the Pods (a previous leader's)."""
        seen = {}
        for p in pods:
            seen[p.uid] = p
            if p.domain and not p.node and not p.gated and p.active and p.uid not in self.held:
                spec = GangSpec.read(p.placement) if p.placement else None
                if spec is not None:
                    self.held[p.uid] = (spec.key, p.domain, p.requests)
        for uid in list(self.held):
            p = seen.get(uid)
            if p is None or p.node or not p.active:
                del self.held[uid]

    def in_domain(self, key: str, domain: str) -> list[tuple[tuple[str, int], ...]]:
        return [req for k, d, req in self.held.values() if k == key and d == domain]


def fits(free: list[dict[str, int]], wanted: list[dict[str, int]]) -> list[dict[str, int]] | None:
    """First fit, largest first, of ``wanted`` (per-Pod requests) on nodes with ``free`` room: the room left, or None
    when some Pod fits no node."""
    room = [dict(f) for f in free]
    for req in sorted(wanted, key=lambda r: -sum(r.values())):
        for node in room:
            if all(node.get(k, 0) >= v for k, v in req.items()):
                for k, v in req.items():
                    node[k] -= v
                break
        else:
            return None
    return room


def free_room(pods: Iterable[PodFacts], nodes: dict[str, NodeFacts]) -> dict[str, dict[str, int]]:
    """Per node, its allocatable extended resources minus what the active Pods bound to it request."""
    room = {name: {k: v for k, v in allocatable(n).items() if "/" in k} for name, n in nodes.items()}
    for p in pods:
        if p.node in room and p.active:
            for k, v in p.requests:
                room[p.node][k] = room[p.node].get(k, 0) - v
    return room


def choose(members: list[PodFacts], spec: GangSpec, nodes: dict[str, NodeFacts], room: dict[str, dict[str, int]],
           ledger: Ledger) -> str | None:
    """The domain of ``spec.key`` where every Pod of ``members`` fits beside what the ledger holds there: the one
    that leaves the least room (ties: the name), or None."""
    best: tuple[int, str] | None = None
    for domain, free in _domains(members[0], spec, nodes, room).items():
        left = _left(members, spec, domain, free, ledger)
        if left is None:
            continue
        score = (sum(sum(n.values()) for n in left), domain)
        if best is None or score < best:
            best = score
    return best[1] if best else None


def _domains(first: PodFacts, spec: GangSpec, nodes: dict[str, NodeFacts],
             room: dict[str, dict[str, int]]) -> dict[str, list[dict[str, int]]]:
    """Per domain of ``spec.key``, the free room of each of its nodes ``first`` may use."""
    domains: dict[str, list[dict[str, int]]] = {}
    for name, node in sorted(nodes.items()):
        if usable(first, spec, node):
            domains.setdefault(node.labels[spec.key], []).append(room.get(name, {}))
    return domains


def _left(members: list[PodFacts], spec: GangSpec, domain: str, free: list[dict[str, int]],
          ledger: Ledger) -> list[dict[str, int]] | None:
    """The room ``domain`` keeps once ``members`` fit there beside what the ledger holds in it, or None."""
    held = [dict(r) for r in ledger.in_domain(spec.key, domain)]
    return fits(free, held + [dict(p.requests) for p in members])


def room_in(members: list[PodFacts], spec: GangSpec, domain: str, nodes: dict[str, NodeFacts],
            room: dict[str, dict[str, int]], ledger: Ledger) -> bool:
    """``domain`` has room for every Pod of ``members`` beside what the ledger holds there."""
    free = _domains(members[0], spec, nodes, room).get(domain, [])
    return _left(members, spec, domain, free, ledger) is not None


@dataclass(frozen=True)
class Release:
    gang: str
    domain: str
    key: str
    pods: tuple[PodFacts, ...]
    how: str  # "placed": a new gang; "joined": into the domain its gang already has
    waited: float  # seconds since the gang's first Pod was created


@dataclass(frozen=True)
class Wait:
    gang: str
    reason: str  # "no-domain" (all Pods there, no domain has room; or its gang's domain has none) or "incomplete"
    pods: tuple[PodFacts, ...]
    message: str
    since: float


def _created(pod: PodFacts) -> float:
    try:
        return dt.datetime.fromisoformat(pod.created.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return time.time()


def plan(pods: list[PodFacts], nodes: dict[str, NodeFacts], ledger: Ledger,
         now: float | None = None) -> tuple[list[Release], list[Wait]]:
    """What to release now and what waits, gangs oldest first; the ledger gains each release as it is decided, so
    that a later gang of the same pass does not count the room an earlier one took."""
    now = time.time() if now is None else now
    ledger.refresh(pods)
    gangs: dict[str, tuple[GangSpec, list[PodFacts], str]] = {}  # gang -> (spec, gated members, known domain)
    for p in pods:
        spec = GangSpec.read(p.placement) if p.placement else None
        if spec is None:
            continue
        gid = gang_id(p, spec)
        entry = gangs.setdefault(gid, (spec, [], ""))
        if p.gated and p.active and p.uid not in ledger.held:  # held: released, its watch event still to come
            entry[1].append(p)
        if p.domain and not p.deleting and not entry[2]:
            gangs[gid] = (entry[0], entry[1], p.domain)
    room = free_room(pods, nodes)
    releases: list[Release] = []
    waits: list[Wait] = []
    order = sorted(((min((_created(p) for p in m), default=now), gid) for gid, (_, m, _) in gangs.items() if m))
    for since, gid in order:
        spec, members, domain = gangs[gid]
        members.sort(key=lambda p: (p.created, p.name))
        if domain:
            if not room_in(members, spec, domain, nodes, room, ledger):  # filled since: wait gated, never elsewhere
                waits.append(Wait(gid, "no-domain", tuple(members),
                                  f"the {spec.level} of gang {gid} ({spec.key}={domain}) has no room for its "
                                  f"{len(members)} gated Pod(s); they stay gated until it has", since))
                continue
            releases.append(Release(gid, domain, spec.key, tuple(members), "joined", now - since))
        elif len(members) < spec.size:
            waits.append(Wait(gid, "incomplete", tuple(members), f"{len(members)} of the gang's {spec.size} Pods exist",
                              since))
            continue
        else:
            domain = choose(members, spec, nodes, room, ledger) or ""
            if not domain:
                waits.append(Wait(gid, "no-domain", tuple(members),
                                  f"no {spec.level} ({spec.key}) has room for all {len(members)} Pods of gang {gid}; "
                                  "they stay gated until one has", since))
                continue
            releases.append(Release(gid, domain, spec.key, tuple(members), "placed", now - since))
        for p in members:
            ledger.add(p, spec.key, domain)
    return releases, waits


def _pointer(text: str) -> str:
    return text.replace("~", "~0").replace("/", "~1")


def release_patch(pod: PodFacts, gate: str, key: str, domain: str, domain_annotation: str) -> list[dict]:
    """The one JSON patch of a release: the domain's node selector and annotation, the gate removed.
    A gated Pod has annotations (the placement annotation among them); it may have no node selector."""
    index = pod.gates.index(gate)
    ops: list[dict] = [{"op": "test", "path": f"/spec/schedulingGates/{index}", "value": {"name": gate}},
                       {"op": "remove", "path": f"/spec/schedulingGates/{index}"}]
    ops.append({"op": "add", "path": f"/spec/nodeSelector/{_pointer(key)}", "value": domain} if pod.node_selector
               else {"op": "add", "path": "/spec/nodeSelector", "value": {key: domain}})
    ops.append({"op": "add", "path": f"/metadata/annotations/{_pointer(domain_annotation)}", "value": domain})
    return ops


# ---- the controller ----------------------------------------------------------------------------------

@dataclass
class Ungater:
    """One pass over the store: the releases ``plan`` decides, written; the waits said once. ``step`` is what the
    elected loop runs on every Pod or Node event."""

    core: object  # kubernetes.client.CoreV1Api
    store: PodStore
    gate: str = "trainadmit.io/placement"
    log: Callable[[str], None] = print
    ledger: Ledger = field(default_factory=Ledger)
    said: dict[str, str] = field(default_factory=dict)  # gang -> the wait message last said in Events
    clock: Callable[[], float] = time.time
    parallel: int = 4

    @property
    def domain_key(self) -> str:
        return f"{self.gate}-domain"

    def step(self) -> list[str]:
        from . import placement_metrics as metrics

        if not self.store.synced:
            return []
        pods, nodes = self.store.snapshot()
        releases, waits = plan(pods, nodes, self.ledger, self.clock())
        out = []
        for r in releases:
            done = self._release_all(r)
            if done:
                metrics.RELEASED.labels(r.how).inc()
                if r.how == "placed":
                    metrics.WAIT.observe(max(r.waited, 0.0))
                self.said.pop(r.gang, None)
                out.append(f"{r.gang}: {done} Pod(s) released into {r.key}={r.domain} ({r.how})")
        for w in waits:
            if w.reason == "no-domain" and self.said.get(w.gang) != w.message:
                self.said[w.gang] = w.message
                self._events(w)
                out.append(f"{w.gang}: waiting: {w.message}")
        live = {w.gang for w in waits}
        for gang in [g for g in self.said if g not in live]:
            del self.said[gang]
        for reason in ("no-domain", "incomplete"):
            metrics.WAITING.labels(reason).set(sum(1 for w in waits if w.reason == reason))
        now = self.clock()
        metrics.LONGEST.set(max((now - w.since for w in waits), default=0.0))
        return out

    def _release_all(self, r: Release) -> int:
        """The Pods of one release, ``parallel`` patches at a time (the client's connection pool holds 4): the gang's
        last Pod is released a few round trips after its first, not one round trip per Pod."""
        if len(r.pods) <= 1 or self.parallel <= 1:
            return sum(self._release(p, r) for p in r.pods)
        with ThreadPoolExecutor(max_workers=min(self.parallel, len(r.pods)), thread_name_prefix="placement") as pool:
            return sum(pool.map(lambda p: self._release(p, r), r.pods))

    def _release(self, pod: PodFacts, r: Release) -> int:
        from kubernetes.client.exceptions import ApiException

        body = release_patch(pod, self.gate, r.key, r.domain, self.domain_key)
        try:
            self.core.patch_namespaced_pod(pod.name, pod.namespace, body)  # type: ignore[attr-defined]
        except ApiException as exc:
            self.ledger.held.pop(pod.uid, None)
            if exc.status in (404, 409, 422):  # gone, or changed since it was read: the next event retries
                self.log(f"placement: {pod.namespace}/{pod.name}: not released ({exc.status}); retried on the next "
                         "event")
                return 0
            raise
        return 1

    def _events(self, w: Wait) -> None:
        """Event ``WaitingForDomain`` on each Pod of the gang and on their controller (best effort)."""
        from kubernetes.client.exceptions import ApiException

        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        targets = [("v1", "Pod", p.name, p.uid, p.namespace) for p in w.pods]
        owner = w.pods[0].owner if w.pods else None
        if owner is not None:
            targets.append((*owner, w.pods[0].namespace))
        for api, kind, name, uid, ns in targets:
            body = {"apiVersion": "v1", "kind": "Event",
                    "metadata": {"generateName": f"{name}.", "namespace": ns},
                    "involvedObject": {"apiVersion": api, "kind": kind, "name": name, "uid": uid, "namespace": ns},
                    "reason": WAITING_REASON, "message": w.message, "type": "Normal",
                    "source": {"component": "trainadmit-placement"}, "firstTimestamp": now, "lastTimestamp": now,
                    "count": 1}
            try:
                self.core.create_namespaced_event(ns, body)  # type: ignore[attr-defined]
            except ApiException as exc:
                self.log(f"placement: event on {kind} {ns}/{name} not written ({exc.status})")


@dataclass
class RenewedLease:
    """A ``LeaderLease`` asked at most every ``renew`` seconds while held: the ungater runs on every event, and a
    Lease round trip per event would double its writes. A lost Lease is seen at the next renewal (its duration is
    60 s, so a new leader waits out far longer than ``renew``)."""

    lease: object  # cluster.lease.LeaderLease
    renew: float = 5.0
    clock: Callable[[], float] = time.monotonic
    _held_at: float | None = None

    def __getattr__(self, name: str):
        return getattr(self.lease, name)

    def hold(self) -> bool:
        now = self.clock()
        if self._held_at is not None and now - self._held_at < self.renew:
            return True
        held = self.lease.hold()  # type: ignore[attr-defined]
        self._held_at = now if held else None
        return held


def run(loop_step: Callable[[], None], store: PodStore, stop: threading.Event, renew: float = 5.0,
        batch: float = 0.02) -> None:
    """Run ``loop_step`` whenever the store changed (after ``batch`` seconds, so that the Pods of one Job created
    together are seen in one pass), and at least every ``renew`` seconds (the Lease's renewal). The change is taken
    before the pass reads the store, so none is lost, and a replica that does not lead never spins on it."""
    while not stop.is_set():
        loop_step()
        if not stop.is_set() and store.changed.wait(renew) and not stop.is_set():
            stop.wait(batch)
            store.changed.clear()


__all__ = ["GangSpec", "Ledger", "Release", "RenewedLease", "Ungater", "Wait", "choose", "fits", "plan",
           "release_patch"]
