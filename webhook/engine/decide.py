"""The decision: (request, policy set, cluster view) -> Decision. Pure: no I/O, no clock, no globals.

- CREATE (``/mutate`` and `trainadmit check`): match, resolve intent, run every concern's mutation
  through one Patcher, record provenance, then validate the mutated object. CI and the cluster call
  the same function, so they give the same answer.
- CREATE on ``/validate``: the same mutations run on a scratch copy of the object as received;
  whatever they would still inject is missing (``final_state``); the rules see the received object.
- UPDATE: never mutated; a ``parallelism`` scale-up is checked against quota, and custom rules that
  ask for UPDATE run. DELETE and CONNECT pass.
"""

from __future__ import annotations

from typing import Any

from ..policy import PolicySet
from . import final_state
from .clusterview import VIEW_STALE, ClusterView, NoCluster
from .concerns import custom, quota
from .context import Context
from .decision import Decision
from .intent import Resolved, gpu_resources_of, has_intent, resolve
from .patch import Patcher
from .registry import INJECTING, MUTATIONS, VALIDATIONS
from .request import Request
from .shape import MALFORMED, shape_problems
from .workloads import HANDLED_KINDS, Workload, adapter_for, workload_of


def exempt_user(policy: PolicySet, user: dict | None) -> str:
    """Why the requesting user is left alone (Platform.spec.exemptUsers / exemptGroups), or ""."""
    if user:
        name, groups = user.get("username"), user.get("groups")
        if isinstance(name, str) and name in policy.platform.exemptUsers:
            return f"user {name} is exempt (Platform.spec.exemptUsers): left alone"
        if isinstance(groups, list):
            exempt = [g for g in groups if isinstance(g, str) and g in policy.platform.exemptGroups]
            if exempt:
                return f"group {exempt[0]} is exempt (Platform.spec.exemptGroups): left alone"
    return ""


def match(policy: PolicySet, obj: Any, namespace: str | None, user: dict | None = None) -> tuple[Workload | None, str]:
    """The Workload when the policy applies to ``obj``, else None and the reason it does not."""
    exempt = exempt_user(policy, user)
    if exempt:
        return None, exempt
    if not isinstance(obj, dict):
        return None, "not a Kubernetes object"
    workload = workload_of(obj)
    if workload is None:
        return None, (f"kind {obj.get('apiVersion')}/{obj.get('kind')} is left alone: trainadmit decides on "
                      f"{', '.join(sorted(HANDLED_KINDS))} (and the objects their controllers create are decided "
                      "through them)")
    if policy.is_exempt(namespace):
        return None, f"namespace {namespace} is exempt (Platform.spec.exemptNamespaces): left alone"
    owner = workload.controller
    if owner is not None:
        parent = adapter_for(owner.get("apiVersion"), owner.get("kind"))
        if parent is not None:
            kind = owner.get("kind")
            return None, (f"created by {kind} {owner.get('name')}: trainadmit configured the {kind} when the {kind} "
                          f"was created, and {parent.operator} copied that configuration here, so this object is "
                          "left as the controller made this object")
        if policy.keys.applied in workload.annotations:
            return None, (f"created by {owner.get('kind')} {owner.get('name')} from a pod template trainadmit "
                          f"already decided (it carries {policy.keys.applied})")
    if not gpu_resources_of(workload, policy) and not has_intent(workload, policy):
        resources = ", ".join(sorted(policy.gpu_resources))
        return None, (f"not a GPU workload: no container requests a GPU resource ({resources}) and no "
                      f"{policy.platform.intentPrefix}/ label or annotation asks for one; left alone")
    return workload, ""


def decide(policy: PolicySet, request: Request, cluster: ClusterView | None = None) -> Decision:
    return _decide(policy, request, cluster, VALIDATIONS)


def decide_builtin(policy: PolicySet, request: Request, cluster: ClusterView | None = None) -> Decision:
    """The decision without the custom CEL rules (``memo`` remembers this part; CEL reads any field)."""
    return _decide(policy, request, cluster, BUILTIN_VALIDATIONS)


BUILTIN_VALIDATIONS = tuple(c for c in VALIDATIONS if c is not custom.CONCERN)


def _decide(policy: PolicySet, request: Request, cluster: ClusterView | None, validations: tuple) -> Decision:
    obj, namespace = request.obj, request.effective_namespace
    workload, reason = match(policy, obj, namespace, request.user)
    if workload is None:
        return Decision(matched=False, reason=reason, generation=policy.generation)
    patcher = Patcher(obj, workload.adapter.aliases(obj))
    ctx = Context(policy, cluster or NoCluster(), request, workload, patcher, namespace=namespace or "default")
    problems = shape_problems(workload)
    if problems:
        for path, message in problems:
            ctx.report(MALFORMED, path, message, "fix the field's type")
        return Decision(matched=True, generation=policy.generation, reason="malformed object",
                        violations=ctx.violations)
    uses_view = request.operation == "CREATE" or (request.operation == "UPDATE" and request.phase == "validate")
    stale = ctx.cluster.stale() if uses_view else None
    if stale is not None:  # old data must not size quotas or domains: decide without it, as the policy says
        ctx.report(VIEW_STALE, "metadata", f"{stale}; decided without the cluster view",
                   "retry once the server's cluster view has caught up (its /readyz says when)")
        ctx.cluster = NoCluster()
    if request.operation != "CREATE":
        return _non_create(ctx)
    ctx.resolved = resolve(workload, policy, gpu_resources_of(workload, policy), ctx.report)
    if ctx.resolved.no_pool and policy.platform.noPool == "ignore":
        return Decision(matched=False, generation=policy.generation,
                        reason=f"no pool fits this GPU workload ({ctx.resolved.no_pool}); Platform.spec.noPool: ignore")
    skeleton = workload.adapter.skeleton(obj)
    if skeleton is not None:  # the kind's writable template needs its parents first (a TrainJob's runtime patch)
        patcher.extend(*skeleton[:1], [skeleton[1]])
    for concern in MUTATIONS:
        concern.mutate(ctx)  # type: ignore[misc]
    final_state.record_provenance(ctx, INJECTING)
    decision = Decision(matched=True, generation=policy.generation, summary=_summary(ctx))
    if request.phase == "validate":
        final_state.check(ctx, INJECTING)
        view = workload
    else:
        decision.patch = ctx.patcher.ops
        decision.mutated = ctx.patcher.doc
        decision.injections = ctx.injections
        decision.companions = ctx.companions
        view = Workload(ctx.patcher.doc, workload.adapter)
    for concern in validations:
        concern.validate(ctx, view)
    decision.violations = ctx.violations
    decision.unverified = ctx.unverified
    return decision


def _non_create(ctx: Context) -> Decision:
    """UPDATE: never mutate; validate a scale-up (more Pods, so more GPUs) against quota.
    DELETE/CONNECT pass."""
    request, workload, policy = ctx.request, ctx.workload, ctx.policy
    decision = Decision(matched=True, generation=policy.generation,
                        reason=f"{request.operation}: trainadmit mutates on CREATE only")
    if request.operation != "UPDATE" or request.phase != "validate" or not isinstance(request.old, dict):
        return decision
    old = Workload(request.old, workload.adapter)
    ignore = lambda *a, **k: None  # noqa: E731 - intent problems were reported when the object was created
    ctx.resolved = resolve(workload, policy, gpu_resources_of(workload, policy), ignore)
    # the stored object is well-formed in a cluster; a malformed one (a captured or fuzzed review)
    # counts as holding nothing, so the whole new size is checked
    before = Resolved(pods=0) if shape_problems(old) else resolve(old, policy, gpu_resources_of(old, policy), ignore)
    added = ctx.resolved.total_gpus - before.total_gpus
    if added > 0:
        quota.check(ctx, workload, extra_gpus=added)
        decision.reason = f"UPDATE: {before.pods} -> {ctx.resolved.pods} pods checked against quota"
    custom.validate(ctx, workload)
    decision.violations = ctx.violations
    return decision


def _summary(ctx: Context) -> dict:
    r = ctx.resolved
    return {
        "kind": ctx.workload.kind, "name": ctx.workload.display_name, "namespace": ctx.namespace,
        "pool": r.pool_name, "gpuResource": r.gpu_resource, "gpusPerPod": r.gpus_per_pod, "pods": r.pods,
        "gang": ctx.gang_backend or "none", "topology": r.level_name if r.pods > 1 else None,
        "priority": r.tier[0] if r.tier else None,
        "datasets": [n for n, _ in r.datasets], "checkpoint": r.checkpoint[0] if r.checkpoint else None,
    }
