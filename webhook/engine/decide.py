"""The decision: (request, policy set, cluster view) -> Decision. Pure: no I/O, no clock, no globals.

Every caller gets its decision from ``decide``: the server (through a cache that remembers its first stage,
keyed by exactly what that stage reads), `trainadmit check`, `policy test`. It runs in two stages:

1. ``decide_declared``: the concerns that declare what they read (every built-in one) decide on the object
   cut down to that (``project``), so this stage is a function of the projection and of nothing else:
   - CREATE (``/mutate`` and `check`): match, resolve intent, plan, run every concern's mutation through
     one Patcher, record provenance, then validate the mutated object.
   - CREATE on ``/validate``: the same mutations run on a scratch copy of the object as received; whatever
     they would still inject is missing (``final_state``); the rules see the received object.
   - UPDATE: never mutated; one that resizes the workload (any of its kind's count fields, its GPUs per Pod)
     runs again every rule whose answer depends on the size (``rule(..., resize=...)``: domain fit,
     capacity, whole-node, gang shape, workers and GPUs per job, quota, whether the gang can follow the
     resize). DELETE and CONNECT pass.
2. The rules on the whole object (custom CEL rules, which read whatever their expressions name) run on the
   object as it will be stored: the received object with the patch applied on ``/mutate``.
"""

from __future__ import annotations

from typing import Any

from ..policy import PolicySet
from ..policy.vocab import Action
from .clusterview import COMPANION_KINDS, ClusterView, NoCluster, Presence, ref_kind
from .concerns import final_state, freshness
from .concerns.shape import MALFORMED, shape_problems
from .context import Context
from .decision import Decision, Source, Violation
from .demand import Demand, gpu_demand
from .intent import Resolved, gpu_resources_of, has_intent, resolve
from .naming import name_for, named
from .patch import Patcher, replay
from .plan import make_plan
from .provenance import forged
from .reads import projection
from .registry import (
    INJECTING,
    MUTATIONS,
    READS,
    RESIZE_RULES,
    RESIZE_VALIDATIONS,
    SIZE_LIMITS,
    TEMPLATE_LIMITS,
    TEMPLATE_VALIDATIONS,
    VALIDATIONS,
    WHOLE_OBJECT_VALIDATIONS,
)
from .request import Request
from .rule import Resize
from .workloads import (
    HANDLED_KINDS,
    OWNER_BY_KIND,
    Aliased,
    InheritedTemplate,
    Inheriting,
    Skeleton,
    UntemplatedPods,
    Workload,
    adapter_for,
    capable,
    workload_of,
)


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


def made_by_controller(policy: PolicySet, workload: Workload, user: dict | None) -> str:
    """Why ``workload`` is left alone as its controller's work, or "" to decide it as what it is.

    Anyone who may create Pods may write any ownerReference, so the reference alone proves nothing: the
    object counts as its controller's only when the request comes from that controller (the kind's
    operator or built-in controller, ``workloads.OWNERS``, or a user the policy names for it in
    ``Platform.spec.controllers``). A kind trainadmit does not decide itself (a LeaderWorkerSet's
    StatefulSet) vouches only for children that carry a template trainadmit decided (its provenance
    annotation). The generated webhook matchConditions say the same (``authoring.webhooks``)."""
    ref = workload.controller
    if ref is None:
        return ""
    api_version, kind, name = ref.get("apiVersion"), ref.get("kind"), user.get("username") if user else None
    if not (isinstance(api_version, str) and isinstance(kind, str) and isinstance(name, str)):
        return ""
    owner = OWNER_BY_KIND.get((api_version, kind))
    if owner is None:
        return ""
    if name not in owner.users and name not in policy.platform.controllers.get(owner.resource, ()):
        return ""
    if owner.decided:
        parent = adapter_for(api_version, kind)
        operator = parent.operator if parent is not None else name
        return (f"created by {kind} {ref.get('name')} as {name}: trainadmit configured the {kind} when the {kind} "
                f"was created, and {operator} copied that configuration here, so this object is left as the "
                "controller made this object")
    if policy.keys.applied in workload.annotations:
        return (f"created by {kind} {ref.get('name')} as {name} from a pod template trainadmit already decided (it "
                f"carries {policy.keys.applied})")
    return ""


def controller_user(obj: Any) -> dict:
    """The user the controller named by ``obj``'s controller ownerReference makes its requests as (the first it
    is declared with), or {} when no declared controller owns it: for a stored object whose creator is no
    longer known (audit judges a stored child through its parent, as admission did when its controller made
    it)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    refs = meta.get("ownerReferences") if isinstance(meta, dict) else None
    for ref in refs if isinstance(refs, list) else ():
        if isinstance(ref, dict) and ref.get("controller") is True:
            api_version, kind = ref.get("apiVersion"), ref.get("kind")
            owner = OWNER_BY_KIND.get((api_version, kind)) if isinstance(api_version, str) and isinstance(
                kind, str) else None
            return {"username": owner.users[0]} if owner is not None and owner.users else {}
    return {}


def match(policy: PolicySet, obj: Any, namespace: str | None, user: dict | None = None,
          cluster: ClusterView | None = None) -> tuple[Workload | None, str]:
    """The Workload when the policy applies to ``obj``, else None and the reason it does not."""
    workload, _, reason = matched(policy, obj, namespace, user, cluster or NoCluster())
    return workload, reason


def matched(policy: PolicySet, obj: Any, namespace: str | None, user: dict | None,
            cluster: ClusterView) -> tuple[Workload | None, Demand | None, str]:
    """``match``, with the GPUs the workload asks for (``demand.gpu_demand``), which decide whether it is a
    GPU workload: through extended resources, DRA claims, or its runtime's templates (a TrainJob's)."""
    exempt = exempt_user(policy, user)
    if exempt:
        return None, None, exempt
    if not isinstance(obj, dict):
        return None, None, "not a Kubernetes object"
    workload = workload_of(obj)
    api_version = obj.get("apiVersion")
    companion = ref_kind(api_version.rsplit("/", 1)[0], obj.get("kind")) if isinstance(api_version, str) \
        and "/" in api_version else None
    if workload is None and companion is not None and companion in COMPANION_KINDS:
        return None, None, (f"a {companion.kind}: what the Pods of the workloads that name it ask for is counted "
                            "from it, and it is no workload itself; left alone")
    if workload is None:
        return None, None, (f"kind {obj.get('apiVersion')}/{obj.get('kind')} is left alone: trainadmit decides on "
                            f"{', '.join(sorted(HANDLED_KINDS))} (and the objects their controllers create are "
                            "decided through them)")
    if policy.is_exempt(namespace):
        return None, None, f"namespace {namespace} is exempt (Platform.spec.exemptNamespaces): left alone"
    by_controller = made_by_controller(policy, workload, user)
    if by_controller:
        return None, None, by_controller
    workload, runtime = inherit(policy, workload, cluster, namespace)
    demand = gpu_demand(workload, policy, cluster,
                        (namespace or "default") if workload.adapter.namespaced else None)
    if demand.gpu or has_intent(workload, policy) or demand.missing or runtime in (Presence.missing,
                                                                                  Presence.not_served):
        return workload, demand, ""  # a named object that does not exist is refused by the references rules
    resources = ", ".join(sorted(policy.gpu_resources))
    reason = (f"not a GPU workload: no container requests a GPU resource ({resources}), no DRA claim a GPU "
              f"DeviceClass ({', '.join(sorted(policy.gpu_device_classes))}), and no "
              f"{policy.platform.intentPrefix}/ label or annotation asks for one; left alone")
    unknown = list(demand.uncounted)
    ref = workload.adapter.inherited_ref(obj) if capable(workload.adapter, Inheriting) else None
    if runtime is Presence.unknown and ref is not None:
        unknown.insert(0, f"{ref.kind} {ref.name} (its Pods' template)")
    if unknown:
        reason = (f"GPUs not counted: {', '.join(unknown)}: neither the input nor a cluster view holds it, so what "
                  "its Pods ask for is not known; give it with the workload (check) or a cluster view; left alone")
    return None, None, reason


def inherit(policy: PolicySet, workload: Workload, cluster: ClusterView,
            namespace: str | None) -> tuple[Workload, Presence | None]:
    """The workload with the object its Pods come from (``Inheriting``: a TrainJob's runtime), as the cluster
    view holds it and cut down to what the concerns read; and what the view knows of that object."""
    adapter = workload.adapter
    ref = adapter.inherited_ref(workload.obj) if capable(adapter, Inheriting) else None
    kind = ref_kind(ref.group, ref.kind) if ref is not None else None
    if ref is None or kind is None:
        return workload, None
    presence, found = cluster.reference(kind, ref.name, (namespace or "default") if ref.namespaced else None)
    if presence is Presence.present and isinstance(found, dict):
        return Workload(workload.obj, adapter, project(policy, found)), presence
    return workload, presence


def project(policy: PolicySet, obj: Any) -> Any:
    """``obj`` cut down to what the concerns declare they read (``registry.READS``); anything that is not an
    object of a handled kind as it is. The first stage of a decision is a function of this."""
    adapter = adapter_for(obj.get("apiVersion"), obj.get("kind")) if isinstance(obj, dict) else None
    if adapter is None:
        return obj
    return projection(READS, policy.platform.intentPrefix).project(obj, adapter.template_roots(obj))


def decide(policy: PolicySet, request: Request, cluster: ClusterView | None = None) -> Decision:
    """The decision for ``request``: what every caller answers."""
    decision = decide_declared(policy, request, cluster)
    if decision.whole_object_rules:
        stored = request.obj
        if request.operation == "CREATE" and request.phase != "validate":
            stored = decision.mutated = replay(request.obj, decision.patch)
        decision.violations.extend(whole_object_violations(policy, request, stored))
    return decision


def whole_object_violations(policy: PolicySet, request: Request, stored: dict) -> list[Violation]:
    """The rules that read the whole object (``Concern.reads`` None: custom CEL rules), on ``stored``: the
    object as it will be stored."""
    if not WHOLE_OBJECT_VALIDATIONS:
        return []
    workload = workload_of(stored)
    if workload is None:  # pragma: no cover - the first stage matched this object's kind
        return []
    ctx = Context(policy, NoCluster(), request, workload, Patcher(stored),
                  namespace=request.effective_namespace or "default")
    for concern in WHOLE_OBJECT_VALIDATIONS:
        concern.validate(ctx, workload)  # type: ignore[misc]
    return ctx.violations


def decide_declared(policy: PolicySet, request: Request, cluster: ClusterView | None = None) -> Decision:
    """The decision of every concern that declares what it reads, on the object cut down to that.
    ``whole_object_rules`` says whether the rules on the whole object apply to it too; ``mutated`` is not
    set (it is the received object with ``patch`` applied)."""
    obj, namespace = project(policy, request.obj), request.effective_namespace
    if request.phase != "audit" and not exempt_user(policy, request.user) and not policy.is_exempt(namespace):
        refused = forged(policy, request)  # a kind trainadmit does not decide, carrying its provenance
        if refused is not None:
            return Decision(matched=True, generation=policy.generation, violations=[refused],
                            reason="forged provenance")
    cluster = cluster or NoCluster()
    fresh = cluster if cluster.stale() is None else NoCluster()  # a view too old to trust counts nothing
    workload, demand, reason = matched(policy, obj, namespace, request.user, fresh)
    if workload is None:
        return Decision(matched=False, reason=reason, generation=policy.generation)
    adapter = workload.adapter
    patcher = Patcher(obj, adapter.aliases(obj, workload.inherited) if capable(adapter, Aliased) else None)
    ctx = Context(policy, cluster, request, workload, patcher, namespace=namespace or "default", limits=SIZE_LIMITS)
    problems = shape_problems(workload)
    if problems:
        for path, message in problems:
            ctx.report(MALFORMED, path, message, "fix the field's type")
        return Decision(matched=True, generation=policy.generation, reason="malformed object",
                        violations=ctx.violations)
    if request.operation == "CREATE" or (request.operation == "UPDATE" and request.phase == "validate"):
        freshness.use_fresh_view(ctx)
    if capable(adapter, InheritedTemplate) and request.operation in ("CREATE", "UPDATE"):
        return _template_kind(ctx, demand)
    if request.operation != "CREATE":
        return _non_create(ctx)
    ctx.resolved = resolve(workload, policy, gpu_resources_of(workload, policy), ctx.report, demand,
                           ctx.claim_classes)
    if ctx.resolved.no_pool and policy.platform.noPool == "ignore":
        return Decision(matched=False, generation=policy.generation,
                        reason=f"no pool fits this GPU workload ({ctx.resolved.no_pool}); Platform.spec.noPool: ignore")
    ctx.plan = make_plan(workload, ctx.resolved, policy, ctx.cluster, ctx.claim_classes)
    name = name_for(workload, ctx.plan, request)
    if name is not None:  # a generateName workload named first, as the apiserver would: all else derives from it
        ctx.inject(("metadata", "name"), name, "gang" if ctx.plan.gang.requested else "topology",
                   Source("object", "", ("metadata", "generateName"),
                          "named as the apiserver names a generateName object, before its gang is named"))
        workload = ctx.workload = workload.with_object(named(obj, name))
        ctx.plan = make_plan(workload, ctx.resolved, policy, ctx.cluster, ctx.claim_classes)
    # the kind's writable templates need their parents first (a TrainJob's runtime patch)
    for op, path, value in adapter.skeleton(obj, workload.inherited) if capable(adapter, Skeleton) else ():
        if op == "append":
            patcher.extend(path, [value])
        else:
            patcher.set(path, value)
    for concern in MUTATIONS:
        concern.mutate(ctx)  # type: ignore[misc]
    final_state.record_provenance(ctx, INJECTING)
    decision = Decision(matched=True, generation=policy.generation, summary=_summary(ctx), whole_object_rules=True)
    if request.phase == "validate":
        final_state.check(ctx, INJECTING)
        view = workload
    else:
        decision.patch = ctx.patcher.ops
        decision.injections = ctx.injections
        decision.companions = ctx.companions
        view = workload.with_object(ctx.patcher.doc)
    for concern in VALIDATIONS:
        concern.validate(ctx, view)  # type: ignore[misc]
    if request.phase == "audit" and not any(v.action is Action.deny for v in ctx.violations):
        final_state.stored(ctx, INJECTING)  # admitted now, and what it would still get it did not get at admission
    decision.violations = ctx.violations
    decision.unverified = ctx.unverified
    return decision


def _template_kind(ctx: Context, demand: Demand | None) -> Decision:
    """A template other workloads inherit (a TrainingRuntime), on CREATE and UPDATE: never mutated; its GPU
    templates must pass the rules that do not depend on a workload's size (``registry.TEMPLATE_VALIDATIONS``),
    sized as the template alone yields them."""
    workload, policy = ctx.workload, ctx.policy
    ctx.resolved = resolve(workload, policy, gpu_resources_of(workload, policy), ctx.report, demand,
                           ctx.claim_classes)
    ctx.plan = make_plan(workload, ctx.resolved, policy, ctx.cluster, ctx.claim_classes)
    ctx.limits = TEMPLATE_LIMITS  # its size fix passes the rules that decide it, not a workload's quota or capacity
    for concern in TEMPLATE_VALIDATIONS:
        concern.validate(ctx, workload)  # type: ignore[misc]
    return Decision(matched=True, generation=policy.generation, summary=_summary(ctx), whole_object_rules=True,
                    reason=f"a template for {workload.adapter.inherited_by}s: checked, never mutated",  # type: ignore
                    violations=ctx.violations, unverified=ctx.unverified)


def _non_create(ctx: Context) -> Decision:
    """UPDATE: never mutate; a resize runs again every rule whose answer depends on the workload's size, on
    the object as it will be stored (a rule that only a growth can break, when it grows). DELETE/CONNECT
    pass."""
    request, workload, policy = ctx.request, ctx.workload, ctx.policy
    decision = Decision(matched=True, generation=policy.generation,
                        reason=f"{request.operation}: trainadmit mutates on CREATE only")
    if request.operation != "UPDATE" or request.phase != "validate" or not isinstance(request.old, dict):
        return decision
    old = workload.with_object(project(policy, request.old))
    ignore = lambda *a, **k: None  # noqa: E731 - intent problems were reported when the object was created
    cluster = ctx.cluster
    ctx.resolved = resolve(workload, policy, gpu_resources_of(workload, policy), ignore,
                           gpu_demand(workload, policy, cluster, ctx.namespace), ctx.claim_classes)
    # the stored object is well-formed in a cluster; a malformed one (a captured or fuzzed review)
    # counts as holding nothing, so the whole new size is checked as a growth
    before = None if shape_problems(old) else (old, resolve(old, policy, gpu_resources_of(old, policy), ignore,
                                                            gpu_demand(old, policy, cluster, ctx.namespace)))
    ctx.plan = make_plan(workload, ctx.resolved, policy, ctx.cluster, ctx.claim_classes, before, update=True)
    resize = ctx.plan.resize
    if resize is not None:
        for concern in RESIZE_VALIDATIONS:
            concern.validate(ctx, workload)  # type: ignore[misc]
        ctx.violations = [v for v in ctx.violations
                          if RESIZE_RULES.get(v.rule) is Resize.any or (resize.grown and v.rule in RESIZE_RULES)]
        decision.reason = (f"UPDATE: resized from {resize.pods[0]} to {resize.pods[1]} Pods ({resize.gpus[0]} to "
                           f"{resize.gpus[1]} GPUs); the rules that depend on the size ran again")
    if templates_changed(workload, old):
        ctx.violations.extend(_template_change(ctx, request.old))
        decision.reason += "; its pod templates changed: the rules that do not depend on the size ran again"
    decision.violations = ctx.violations
    decision.whole_object_rules = True
    return decision


def templates_changed(new: Workload, old: Workload) -> bool:
    """Whether an UPDATE changes what the engine reads of the workload's pod templates."""
    from .paths import get_path

    roots = list(dict.fromkeys([*new.adapter.template_roots(new.obj), *old.adapter.template_roots(old.obj)]))
    return any(get_path(new.obj, r) != get_path(old.obj, r) for r in roots)


def _needed(policy: PolicySet, request: Request, obj: dict, cluster: ClusterView) -> dict[str, Any]:
    """What admission would set on ``obj`` now (pointer -> value): the fields a CREATE of it would be given."""
    import json

    from .paths import get_path

    as_created = decide_declared(policy, Request(obj, "CREATE", None, request.namespace, request.user,
                                                 request.dry_run, "mutate"), cluster)
    if not as_created.matched or not as_created.injections:
        return {}
    mutated = replay(obj, as_created.patch)
    return {i.path: json.dumps(get_path(mutated, i.location), sort_keys=True) for i in as_created.injections}


def _template_change(ctx: Context, old_obj: dict) -> list[Violation]:
    """An UPDATE that changes the pod templates (a suspended Job's nodeSelector, an operator's worker template)
    keeps what admission enforced: the rules that do not depend on the size run again on the new object, as
    /validate runs them on a CREATE, and a field trainadmit sets that the old object held and the new one lacks
    (a pool's nodeSelector or toleration, the gang's label) is refused (``final.injection-lost``). The size rules
    are the resize's (above)."""
    from .concerns.final_state import INJECTION_LOST

    request, policy, cluster = ctx.request, ctx.policy, ctx.cluster
    as_created = decide_declared(policy, Request(request.obj, "CREATE", None, request.namespace, request.user,
                                                 request.dry_run, "validate"), cluster)
    found = [v for v in as_created.violations if v.rule not in RESIZE_RULES and not v.rule.startswith("final.")]
    before = _needed(policy, request, old_obj, cluster)
    after = _needed(policy, request, request.obj, cluster)
    removed = sorted(p for p, value in after.items() if before.get(p) != value)
    if removed:
        action = policy.actions.get(INJECTION_LOST.id, INJECTION_LOST.default)
        if action is not Action.off:
            shown = ", ".join(removed[:5]) + (", …" if len(removed) > 5 else "")
            found.append(Violation(INJECTION_LOST.id, action, removed[0],
                                   f"this UPDATE removes or changes what trainadmit set when the workload was admitted "
                                   f"({shown}): its Pods would run without it",
                                   "keep the fields trainadmit set (trainadmit check shows them), or re-create the "
                                   "workload so that admission decides it again"))
    return found


def roles(workload: Workload, resolved: Resolved) -> list[dict]:
    """The Pods that run at once, per template, as what they are: the GPU workers with their GPUs per Pod,
    and the launchers, heads, submitters and initializers that request none."""
    gpus = {t.root: n for t, n in resolved.gpu_templates}
    out = [{"role": t.role, "pods": t.pods, "gpus": gpus.get(t.root, 0)} for t in workload.templates if t.pods]
    adapter = workload.adapter
    if capable(adapter, UntemplatedPods) and adapter.untemplated_pods(workload.obj):
        out.append({"role": adapter.untemplated_role, "pods": adapter.untemplated_pods(workload.obj), "gpus": 0})
    return out


def _summary(ctx: Context) -> dict:
    r, plan = ctx.resolved, ctx.plan
    return {
        "kind": ctx.workload.kind, "name": ctx.workload.display_name, "namespace": ctx.namespace,
        "pool": r.pool_name, "gpuResource": r.gpu_unit if r.gpu_templates else r.gpu_resource,
        "gpusPerPod": r.gpus_per_pod, "pods": r.pods, "workers": r.gpu_pods, "roles": roles(ctx.workload, r),
        "scale": plan.scale.as_dict(),
        "gang": plan.gang.mechanism, "topology": r.level_name if plan.colocation.applies else None,
        "priority": r.tier[0] if r.tier else None,
        "datasets": [n for n, _ in r.datasets], "checkpoint": r.checkpoint[0] if r.checkpoint else None,
        "notes": sorted(ctx.notes),
    }
