"""Preflight status on the workload: "15/16 ready; node gpu-17: mlx5_3 port 1 DOWN".

Each Pod's preflight leaves its result in the termination message of its init container; a person
looking at a Job sees none of that. This loop lists the Pods that carry the preflight (the label
``trainadmit.io/preflight``), groups them by the workload that owns them (a batch Job, or a custom
resource whose operator owns its Pods directly: PyTorchJob, MPIJob, RayCluster, Volcano Job), and
writes on the workload an annotation of the same key with how many of its Pods passed and, for each
failure, the node and the one line. Each failure also becomes a Warning Event on the workload, and
two hooks feed the metrics: failures by pool, node and check, and the time from the workload's
creation to every worker passing. Only the holder of the Lease ``trainadmit-preflight-status``
writes. Times come from the API objects (creationTimestamp, the init container's finishedAt), so a
restart or a new leader measures the same.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..engine.workloads import Workload, adapter_for
from ..grammars.preflight import CONTAINER_NAME, Result
from .kube import Permission
from .lease import LeaderLease

# (group, plural) of the workloads whose controller owns their Pods directly: the ones that get the
# annotation (a JobSet's or TrainJob's Pods belong to batch Jobs; a LeaderWorkerSet's to StatefulSets)
POD_OWNERS: tuple[tuple[str, str], ...] = (
    ("batch", "jobs"), ("kubeflow.org", "pytorchjobs"), ("kubeflow.org", "mpijobs"), ("kubeflow.org", "tfjobs"),
    ("kubeflow.org", "paddlejobs"), ("ray.io", "rayclusters"), ("batch.volcano.sh", "jobs"),
)
PERMISSIONS: tuple[Permission, ...] = (
    Permission("", "pods", ("list",)),  # the preflight results, in init container statuses
    Permission("", "events", ("create",)),  # one Warning Event per failed attempt
    *(Permission(group, plural, ("get", "patch")) for group, plural in POD_OWNERS),  # the annotation
)  # its Lease is granted with the others' in access.LEASE_PERMISSIONS
EVENT_REASON = "PreflightFailed"
MAX_SHOWN = 3  # failures spelled out in the annotation; the rest are counted
MAX_LINE = 200


@dataclass(frozen=True)
class Outcome:
    """One Pod's preflight: ``ready``, ``failed`` or ``pending``; for a failure, where and what."""

    pod: str
    state: str
    node: str = ""
    check: str = ""
    message: str = ""
    attempt: int = 0  # the init container's restartCount: one Event per failed attempt
    finished: str = ""  # finishedAt of the run that passed or failed


def outcome(pod: dict) -> Outcome:
    """Read a Pod's preflight from its init container status, as the kubelet reports it."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    name, node = meta.get("name", ""), spec.get("nodeName") or ""
    found = next((s for s in status.get("initContainerStatuses") or []
                  if isinstance(s, dict) and s.get("name") == CONTAINER_NAME), None)
    if found is None:
        return Outcome(name, "pending", node)
    attempt = found.get("restartCount") or 0
    term = (found.get("state") or {}).get("terminated")
    if term and term.get("exitCode") == 0:
        return Outcome(name, "ready", node, finished=term.get("finishedAt") or "", attempt=attempt)
    if not term:  # restarted after a failure (restartPolicy OnFailure/Always): the last run tells
        last = (found.get("lastState") or {}).get("terminated")
        if not last or last.get("exitCode") == 0:
            return Outcome(name, "pending", node, attempt=attempt)
        term, attempt = last, max(attempt - 1, 0)
    result = Result.parse(term.get("message"))
    if result is not None and not result.ok:
        return Outcome(name, "failed", result.node or node, result.check, result.message, attempt,
                       term.get("finishedAt") or "")
    text = (term.get("message") or "").strip().splitlines()
    reason = term.get("reason") or f"exit code {term.get('exitCode')}"
    message = text[-1] if text else f"the preflight container ended: {reason}"
    return Outcome(name, "failed", node, str(reason), message, attempt, term.get("finishedAt") or "")


def summary(expected: int, outcomes: list[Outcome]) -> str:
    """The annotation: ready of expected, then each failure's node and line."""
    ready = sum(o.state == "ready" for o in outcomes)
    failed = [o for o in outcomes if o.state == "failed"]
    head = f"{ready}/{expected} ready"
    if not failed:
        return head
    shown = [f"node {o.node or '?'}: {o.message[:MAX_LINE]}" for o in failed[:MAX_SHOWN]]
    if len(failed) > MAX_SHOWN:
        shown.append(f"+{len(failed) - MAX_SHOWN} more failed")
    if ready >= expected:
        return f"{head}; failed before: {'; '.join(shown)}"
    return f"{head}; {'; '.join(shown)}"


def expected_pods(workload: dict, seen: int) -> int:
    """Pods of the workload that run the preflight: those of its templates that carry it."""
    adapter = adapter_for(workload.get("apiVersion"), workload.get("kind"))
    if adapter is None:
        return seen
    view = Workload(workload, adapter)
    count = sum(t.pods for t in view.templates
                if any(c.body.get("name") == CONTAINER_NAME for c in t.all_containers if c.group == "initContainers"))
    return count or seen


def _time(text: str) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (AttributeError, ValueError):
        return None


def _pool(pod: dict, applied_key: str) -> str:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(applied_key)
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        value = {}
    return str(value.get("pool") or "") if isinstance(value, dict) else ""


def _event_name(pod: str, attempt: int) -> str:
    return re.sub(r"[^a-z0-9.-]", "-", f"{pod}.preflight-{attempt}".lower())[:253]


def _resource(api_version: str, kind: str) -> tuple[str, str, str]:
    """(group, version, plural) of a workload, as the custom objects API addresses it. Only workloads of
    ``POD_OWNERS`` get here (``_owners`` keeps those), so the kind has an adapter."""
    group, version = api_version.split("/", 1) if "/" in api_version else ("", api_version)
    return group, version, adapter_for(api_version, kind).plural  # type: ignore[union-attr]


@dataclass
class PreflightStatus:
    core: object  # kubernetes.client.CoreV1Api: list Pods, create Events
    custom: object  # kubernetes.client.CustomObjectsApi: get and patch workloads (batch Jobs have the same URLs)
    lease: LeaderLease | None = None
    key: str = "trainadmit.io/preflight"
    applied_key: str = "trainadmit.io/applied"
    identity: str = "trainadmit"
    log: Callable[[str], None] = print
    on_failure: Callable[[str, str, str], None] = lambda pool, node, check: None
    on_ready: Callable[[str, float], None] = lambda pool, seconds: None
    _ready: set[str] = field(default_factory=set)  # workload uids whose time to ready was observed
    _emitted: set[str] = field(default_factory=set)  # Event names created or found (no POST per pass)

    # ---- reading ----------------------------------------------------------------------------
    def _pods(self) -> list[dict]:
        response = self.core.list_pod_for_all_namespaces(label_selector=self.key, _preload_content=False)
        data = json.loads(response.data)
        return [p for p in data.get("items") or [] if isinstance(p, dict)]

    @staticmethod
    def _owners(pods: Iterable[dict]) -> dict[tuple, list[dict]]:
        """Pods by the workload that controls them: (namespace, apiVersion, kind, name, uid)."""
        out: dict[tuple, list[dict]] = {}
        for pod in pods:
            meta = pod.get("metadata") or {}
            ref = next((r for r in meta.get("ownerReferences") or [] if isinstance(r, dict) and r.get("controller")),
                       None)
            adapter = adapter_for(ref.get("apiVersion"), ref.get("kind")) if ref is not None else None
            if adapter is None or (adapter.group, adapter.plural) not in POD_OWNERS:
                continue  # a bare Pod, or an owner trainadmit has no adapter for (StatefulSet of a LeaderWorkerSet)
            key = (meta.get("namespace"), ref["apiVersion"], ref["kind"], ref.get("name"), ref.get("uid"))
            out.setdefault(key, []).append(pod)
        return out

    def _get(self, namespace: str, api_version: str, kind: str, name: str) -> dict | None:
        from kubernetes.client.exceptions import ApiException

        group, version, plural = _resource(api_version, kind)
        try:
            response = self.custom.get_namespaced_custom_object(group, version, namespace, plural, name,
                                                                _preload_content=False)
            return json.loads(response.data)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    # ---- writing ----------------------------------------------------------------------------
    def _annotate(self, workload: dict, value: str) -> None:
        meta = workload["metadata"]
        group, version, plural = _resource(workload["apiVersion"], workload["kind"])
        self.custom.patch_namespaced_custom_object(group, version, meta["namespace"], plural, meta["name"],
                                                   {"metadata": {"annotations": {self.key: value}}},
                                                   _content_type="application/merge-patch+json",
                                                   _preload_content=False)

    def _event(self, workload: dict, failure: Outcome) -> bool:
        """A Warning Event on the workload for one failed attempt; False when it exists already (the
        name is the Pod's and the attempt's, so a restart or a new leader does not repeat it)."""
        from kubernetes.client.exceptions import ApiException

        meta = workload["metadata"]
        name = _event_name(failure.pod, failure.attempt)
        emitted = f"{meta['namespace']}/{name}"
        if emitted in self._emitted:
            return False
        when = failure.finished or dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": workload["apiVersion"], "kind": workload["kind"], "name": meta["name"],
                               "namespace": meta["namespace"], "uid": meta.get("uid")},
            "reason": EVENT_REASON, "type": "Warning",
            "message": f"pod {failure.pod} on node {failure.node or '?'}: {failure.message} "
                       f"(check {failure.check or 'unknown'})",
            "source": {"component": "trainadmit"}, "reportingComponent": "trainadmit",
            "reportingInstance": self.identity, "firstTimestamp": when, "lastTimestamp": when, "count": 1,
        }
        try:
            self.core.create_namespaced_event(meta["namespace"], body, _preload_content=False)
            created = True
        except ApiException as exc:
            if exc.status != 409:
                raise
            created = False  # written before: by this replica before a restart, or by an earlier leader
        self._emitted.add(emitted)
        return created

    # ---- one pass ---------------------------------------------------------------------------
    def step(self) -> list[str]:
        if self.lease is not None and not self.lease.hold():
            return []
        out = []
        for (namespace, api_version, kind, name, uid), pods in self._owners(self._pods()).items():
            try:
                line = self._reconcile(namespace, api_version, kind, name, uid, pods)
            except Exception as exc:  # one workload's trouble must not stop the others
                line = f"{kind} {namespace}/{name}: {exc!r}"
            if line:
                out.append(line)
        return out

    def _reconcile(self, namespace: str, api_version: str, kind: str, name: str, uid: str,
                   pods: list[dict]) -> str | None:
        workload = self._get(namespace, api_version, kind, name)
        if workload is None or (workload.get("metadata") or {}).get("uid") != uid:
            return None  # gone, or a new workload of the same name: these Pods are not its own
        outcomes = [outcome(p) for p in sorted(pods, key=lambda p: (p.get("metadata") or {}).get("name", ""))]
        expected = expected_pods(workload, len(pods))
        pool = _pool(pods[0], self.applied_key)
        for failure in (o for o in outcomes if o.state == "failed"):
            if self._event(workload, failure):
                self.on_failure(pool, failure.node, failure.check)
        value = summary(expected, outcomes)
        before = ((workload.get("metadata") or {}).get("annotations") or {}).get(self.key)
        self._observe_ready(workload, outcomes, expected, pool, before)
        if value == before:
            return None
        self._annotate(workload, value)
        return f"{kind} {namespace}/{name}: {value}"

    def _observe_ready(self, workload: dict, outcomes: list[Outcome], expected: int, pool: str,
                       before: str | None) -> None:
        uid = workload["metadata"].get("uid", "")
        ready = [o for o in outcomes if o.state == "ready"]
        if uid in self._ready or len(ready) < expected:
            return
        self._ready.add(uid)
        if before is not None and before.startswith(f"{expected}/{expected} ready"):
            return  # observed before this replica took over
        created = _time(workload["metadata"].get("creationTimestamp", ""))
        finished = [t for t in (_time(o.finished) for o in ready) if t is not None]
        if created is not None and finished:
            self.on_ready(pool, max((max(finished) - created).total_seconds(), 0.0))

    def run(self, stop: threading.Event, interval: float = 5.0) -> None:
        while not stop.is_set():
            try:
                for line in self.step():
                    self.log(f"preflight status: {line}")
            except Exception as exc:
                self.log(f"preflight status: pass failed: {exc!r}")
            stop.wait(interval)


__all__ = ["PERMISSIONS", "POD_OWNERS", "Outcome", "PreflightStatus", "expected_pods", "outcome", "summary"]
