"""The decision: (request, policy set, cluster view) -> Decision. Pure: no I/O, no clock, no globals.

Phases:
- ``mutate`` (used by ``/mutate`` and by ``trainadmit check``): match, resolve intent, run every
  mutation through one Patcher, then validate the mutated object. CI and the cluster call the
  same function, so they give the same answer.
- ``validate`` (``/validate``): the object arrives after every mutating webhook and after the
  apiserver decoded it. Re-running the mutations on a scratch copy shows what is missing: if
  trainadmit had mutated it (the ``applied`` annotation of this policy generation) and something
  it injected is gone, another webhook or the apiserver removed it; a gang that did not survive is
  denied with the reason, since the Job would otherwise run without one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from .cluster import ClusterView, NoCluster
from .context import Context
from .decision import Decision
from .intent import gpu_resources_of, has_intent, resolve
from .mutations import gang, nccl, placement, priority, rdma, storage
from .patch import Patcher, pointer
from .policy import PolicySet
from .rules import custom, gpu, quota, topology
from .rules import nccl as nccl_rules
from .rules import placement as placement_rules
from .rules import rdma as rdma_rules
from .rules import storage as storage_rules
from .shape import shape_problems
from .workloads import HANDLED_KINDS, Workload, get_path

MUTATIONS = (gang.apply, placement.apply, rdma.apply, nccl.apply, storage.apply, priority.apply)
RULES = (gpu.check, topology.check, quota.check, placement_rules.check, nccl_rules.check,
         storage_rules.check, rdma_rules.check)
CONCERN_ORDER = ("gang", "placement", "topology", "rdma", "nccl", "storage", "priority")


@dataclass
class Request:
    """What the engine needs to know about one admission (or one `check` object)."""

    obj: Any
    operation: str = "CREATE"
    old: Any = None
    namespace: str | None = None
    user: dict = field(default_factory=dict)
    dry_run: bool = False
    phase: str = "mutate"  # or "validate"


def match(policy: PolicySet, obj: Any, namespace: str | None, user: dict | None = None) -> tuple[Workload | None, str]:
    """The Workload when the policy applies to ``obj``, else None and the reason it does not."""
    if user:
        name, groups = user.get("username"), user.get("groups")
        if isinstance(name, str) and name in policy.platform.exemptUsers:
            return None, f"user {name} is exempt"
        if isinstance(groups, list):
            exempt = [g for g in groups if isinstance(g, str) and g in policy.platform.exemptGroups]
            if exempt:
                return None, f"group {exempt[0]} is exempt"
    if not isinstance(obj, dict):
        return None, "not a Kubernetes object"
    kind = (obj.get("apiVersion"), obj.get("kind"))
    if not all(isinstance(k, str) for k in kind) or kind not in HANDLED_KINDS:
        return None, (f"kind {kind[0]}/{kind[1]} is not handled; trainadmit acts on the batch/v1 Jobs and "
                      "v1 Pods it creates")
    if policy.is_exempt(namespace):
        return None, f"namespace {namespace} is exempt"
    workload = Workload(obj)
    owner = workload.controller
    owned_by_job = owner and owner.get("kind") == "Job" and str(owner.get("apiVersion", "")).startswith("batch/")
    if not workload.is_job and owned_by_job:
        return None, f"pod of Job {owner.get('name')}: the Job carries trainadmit's configuration"
    if not gpu_resources_of(workload, policy) and not has_intent(workload, policy):
        return None, f"no GPU request and no {policy.platform.intentPrefix}/ intent"
    return workload, ""


def decide(policy: PolicySet, request: Request, cluster: ClusterView | None = None) -> Decision:
    cluster = cluster or NoCluster()
    obj = request.obj
    namespace = request.namespace
    if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict):
        own = obj["metadata"].get("namespace")
        namespace = own if isinstance(own, str) and own else namespace
    workload, reason = match(policy, obj, namespace, request.user)
    if workload is None:
        return Decision(matched=False, reason=reason, generation=policy.generation)
    problems = shape_problems(workload)
    if problems:
        decision = Decision(matched=True, generation=policy.generation, reason="malformed object")
        ctx = Context(policy, cluster, workload, Patcher(obj), namespace=namespace or "default")
        for path, message in problems:
            ctx.report("object.malformed", path, message, "fix the field's type")
        decision.violations = ctx.violations
        return decision
    if request.operation != "CREATE":
        return _non_create(policy, request, workload, cluster, namespace)
    ctx = Context(policy, cluster, workload, Patcher(obj), namespace=namespace or "default")
    ctx.resolved = resolve(workload, policy, ctx.report)
    backend = None
    for mutate in MUTATIONS:
        result = mutate(ctx)
        if mutate is gang.apply:
            backend = result
    if backend:
        for gap in policy.gang_gaps:
            ctx.report("gang.cluster-support", "spec", gap, "set Platform.spec.featureGates once the cluster has them")
    _provenance(ctx, backend)
    decision = Decision(matched=True, generation=policy.generation, summary=_summary(ctx, backend))
    if request.phase == "validate":
        _final_state(ctx, workload, backend)
        view = workload
    else:
        decision.patch = ctx.patcher.ops
        decision.mutated = ctx.patcher.doc
        decision.injections = ctx.injections
        decision.companions = ctx.companions
        view = Workload(ctx.patcher.doc)
    for rule in RULES:
        rule(ctx, view)
    custom.check(ctx, view, "CREATE", None, request.user, request.dry_run)
    decision.violations = ctx.violations
    return decision


def _non_create(policy: PolicySet, request: Request, workload: Workload, cluster: ClusterView,
                namespace: str | None) -> Decision:
    """UPDATE: never mutate; validate a parallelism scale-up against quota. DELETE/CONNECT pass."""
    decision = Decision(matched=True, generation=policy.generation,
                        reason=f"{request.operation}: trainadmit mutates on CREATE only")
    if request.operation != "UPDATE" or request.phase != "validate" or not workload.is_job:
        return decision
    old = Workload(request.old) if isinstance(request.old, dict) else None
    if old is None:
        return decision
    ctx = Context(policy, cluster, workload, Patcher(request.obj), namespace=namespace or "default")
    ctx.resolved = resolve(workload, policy, lambda *a, **k: None)
    added = (workload.parallelism - old.parallelism) * ctx.resolved.gpus_per_pod
    if added > 0:
        quota.check(ctx, workload, extra_gpus=added)
    custom.check(ctx, workload, "UPDATE", request.old, request.user, request.dry_run)
    if added > 0:
        decision.reason = f"UPDATE: parallelism {old.parallelism} -> {workload.parallelism} checked against quota"
    decision.violations = ctx.violations
    return decision


def _provenance(ctx: Context, backend: str | None) -> None:
    concerns = [c for c in CONCERN_ORDER if c in ctx.concerns]
    if not concerns:
        return
    r = ctx.resolved
    value = _applied_value(ctx.policy.generation, r.pool_name, backend or "none",
                           r.level_name if r.pods > 1 else None, tuple(concerns))
    key = ctx.policy.keys.applied
    ctx.patcher.set(("metadata", "annotations", key), value)
    if ctx.workload.is_job:
        ctx.patcher.set((*ctx.workload.pod_meta_path, "annotations", key), value)


@lru_cache(maxsize=1024)
def _applied_value(generation: str, pool: str | None, gang: str, topology: str | None, injected: tuple) -> str:
    """The provenance annotation; a handful of distinct values per policy generation, so cached."""
    return json.dumps({"generation": generation, "pool": pool, "gang": gang, "topology": topology,
                       "injected": list(injected)}, sort_keys=True, separators=(",", ":"))


def read_applied(obj: dict, policy: PolicySet) -> dict | None:
    raw = get_path(obj, ("metadata", "annotations", policy.keys.applied))
    if not isinstance(raw, str):
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


_GANG_LOSS = {
    "native/job-scheduling": ("spec.scheduling", "the apiserver drops Job.spec.scheduling when feature gate "
                              "WorkloadWithJob or GenericWorkload is off (both off by default in 1.37)"),
    "native/pod-group": ("spec.template.spec.schedulingGroup", "the apiserver drops schedulingGroup when feature "
                         "gate GenericWorkload is off (off by default in 1.37)"),
    "coscheduling": ("the scheduling.x-k8s.io/pod-group label", "another mutating webhook removed it"),
    "volcano": ("the scheduling.volcano.sh/group-min-member annotation", "another mutating webhook removed it"),
    "kueue": ("the kueue.x-k8s.io/queue-name label or suspend: true", "another mutating webhook changed it"),
}


def _final_state(ctx: Context, received: Workload, backend: str | None) -> None:
    missing = [(pointer(p), c) for p, c in ctx.changed]
    if not missing:
        return
    applied = read_applied(received.obj, ctx.policy)
    concerns = sorted({c for _, c in missing}, key=lambda c: CONCERN_ORDER.index(c) if c in CONCERN_ORDER else 99)
    if applied is None:
        ctx.report("final.not-mutated", "metadata.annotations",
                   f"trainadmit's mutating webhook did not process this object (it would set: {', '.join(concerns)})",
                   "check that the trainadmit MutatingWebhookConfiguration is installed and its service is up")
        return
    if applied.get("generation") != ctx.policy.generation:
        return  # the policy changed between the two webhook calls: the rules below still apply
    gang_lost = [p for p, c in missing if c == "gang"]
    if gang_lost and backend:
        what, why = _GANG_LOSS.get(backend, (", ".join(gang_lost), "something removed it"))
        ctx.report("gang.membership-lost", gang_lost[0],
                   f"the {backend} gang membership trainadmit injected ({what}) is not in the object the apiserver "
                   f"is about to store: {why}; the Job would start without a gang",
                   "enable the feature gates or change Platform.spec.gang.backend to one the cluster supports")
    other = [p for p, c in missing if c != "gang"]
    if other:
        ctx.report("final.injection-lost", other[0],
                   f"fields trainadmit injected are missing in the final object ({', '.join(other[:5])}"
                   f"{', …' if len(other) > 5 else ''}); another webhook or the apiserver removed them", "")


def _summary(ctx: Context, backend: str | None) -> dict:
    r = ctx.resolved
    return {
        "kind": ctx.workload.kind, "name": ctx.workload.display_name, "namespace": ctx.namespace,
        "pool": r.pool_name, "gpuResource": r.gpu_resource, "gpusPerPod": r.gpus_per_pod, "pods": r.pods,
        "gang": backend or "none", "topology": r.level_name if r.pods > 1 else None,
        "priority": r.tier[0] if r.tier else None,
        "datasets": [n for n, _ in r.datasets], "checkpoint": r.checkpoint[0] if r.checkpoint else None,
    }
