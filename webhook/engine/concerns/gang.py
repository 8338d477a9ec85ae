"""Gang membership: one backend per workload, one gang per training job, whatever submitted it.

The plan (``plan.plan_gang``) decided whether the workload gets a gang of ours, through which backend (the
target's: chosen from the cluster when the policy says auto, ``engine.target``), and how its kind joins it
(the adapter's gang table, ``workloads.GangMethod``); this concern writes it:

- ``spec``: the kind's own gang field, written whole (a batch/v1 Job's 1.37 ``spec.scheduling``: the Job
  controller builds the Workload and PodGroup).
- ``templates``: the backend's key on every gang template, and one PodGroup for the whole workload from the
  reconciler (native ``schedulingGroup``, coscheduling's label, Volcano's group annotation).
- ``fields``: the keys the kind's operator (or the backend's controller) reads on the object: minimum,
  queue, priority, the switch that turns its gang on.
- ``kueue``: the queue label and the kind's suspend flag.

Minimum size: the Pods the kind's operator counts in a gang (a Job's ``parallelism``, every replica of
a PyTorchJob, one LeaderWorkerSet group…). Exact keys per backend: shared/reference/gang.md and
fixtures/operators/README.md. A workload that already carries another gang mechanism (another backend's
keys, a scheduler with its own gangs such as sakkara, JobSet exclusive placement) gets no second gang and
none of the gang-shape rules. A cluster with no gang backend the policy allows gets none either:
``gang.unavailable`` (a note, saying what the platform team installs or enables; deny: refused).
"""

from __future__ import annotations

import json

from ...policy.vocab import Action, Enforceable, GangBackend
from ..backends import (
    KUEUE_QUEUE,
    POD_GROUP_LABEL,
    VOLCANO_GROUP_ANNOTATION,
    VOLCANO_MIN_MEMBER,
    VOLCANO_QUEUE,
    native_podgroup_name,
)
from ..concern import Concern
from ..context import Context
from ..decision import FieldFix, Source, fix_text
from ..paths import Path, field_path
from ..plan import NoGang
from ..reads import Reads
from ..rule import Resize, rule
from ..workloads import (
    BACKEND_IDS,
    NATIVE_POD_GROUP,
    DefaultedGangSize,
    Follow,
    Gang,
    GangFields,
    GangMethod,
    GangShape,
    OwnMinimums,
    PodTemplate,
    Workload,
    capable,
)
from .enforced import conflict, enforced

# v1alpha2 (1.36) spells disruptionMode as an enum; v1beta1 as a struct {single: {}} / {all: {}}
V1ALPHA2_DISRUPTION_MODES = {"single": "Pod", "all": "PodGroup"}

COMPLETION_MODE = rule("gang.completion-mode", Action.deny, "a gang Job that is not completionMode: Indexed",
                       Resize.any)
PARALLELISM_COMPLETIONS = rule("gang.parallelism-completions", Action.deny,
                               "a gang Job whose parallelism differs from its completions", Resize.any)
RESIZE_NOT_FOLLOWED = rule("gang.resize-not-followed", Action.deny,
                           "a resize the workload's gang cannot follow: its size field was not changed with it, "
                           "or nothing updates its PodGroup", Resize.any)
FOREIGN_BACKEND = rule("gang.foreign-backend", Action.warn,
                       "the object already carries another gang mechanism, so trainadmit adds none")
CLUSTER_SUPPORT = rule("gang.cluster-support", Action.note,
                       "the policy's Kubernetes version or feature gates lack what the gang backend needs (a note: the "
                       "platform's)",
                       explain="discovery cannot see the scheduler's and controller-manager's feature gates, so the "
                               "platform declares them (Platform.spec.featureGates); until it declares what the gang "
                               "backend needs, the apiserver may drop the gang's fields or the scheduler may not hold "
                               "the Pods together")
MEMBERSHIP_LOST = rule("gang.membership-lost", Action.deny,
                       "/validate: another webhook removed the gang keys trainadmit injected from the object about "
                       "to be stored (a native gang the apiserver dropped is gang.unavailable)")
POD_LEVEL = rule("gang.pod-level", Action.warn, "gang intent on a bare Pod, whose gang size is not known")
UNAVAILABLE = rule("gang.unavailable", Action.note,
                   "the cluster has no gang backend the policy allows (auto found none served, or the policy's own "
                   "is not served or needs another version): no gang (a note: the platform's; deny: refused)",
                   explain="a gang starts all of a workload's Pods or none; without one, the Pods that fit start and "
                           "hold their GPUs while the others wait. The platform team installs or enables a gang "
                           "backend (the remedy the message names), or sets the rule to deny to refuse such workloads")
UNSUPPORTED = rule("gang.unsupported", Action.note,
                   "the workload's kind cannot join the policy's gang backend (the message says why; a note: the "
                   "platform's backend)")
OWN_MINIMUM = rule("gang.own-minimum", Action.note,
                   "a GPU template of several Pods whose own gang minimum is 0 (a Volcano task's minAvailable): its "
                   "workers are left out of the gang (a note: the workload's own choice)",
                   explain="Volcano's gang holds together the job's minAvailable Pods, counted from each task's own "
                           "minAvailable (else its replicas); a task whose minAvailable is 0 adds none, so its Pods "
                           "are placed one by one once the rest of the gang is: GPU workers that start apart can "
                           "hold their GPUs while waiting for one another")
# what the kind's own fields must be for its Pods to run as one gang (workloads.GangShape), by rule suffix
SHAPE_RULES = {"completion-mode": COMPLETION_MODE, "parallelism-completions": PARALLELISM_COMPLETIONS}


def keep_or_set(ctx: Context, path: Path, value: object, source: Source) -> None:
    """Set ``value`` when the field is empty; otherwise keep what is there (the user's or ours)."""
    if ctx.patcher.get(path) is None:
        ctx.inject(path, value, "gang", source)
    else:
        ctx.satisfied("gang")


# ---- mutation ------------------------------------------------------------------------------------

def mutate(ctx: Context) -> None:
    """Write the gang the plan chose, or say why there is none. A kind whose own mechanism forms its gang whatever
    is asked (a Volcano Job's) gets the fields that mechanism reads (queue, priority, a size it does not default)."""
    plan, w = ctx.plan.gang, ctx.workload
    if plan.gang is not None and plan.gang.formed_by and plan.gang.fields is not None and \
            plan.why_not is not NoGang.foreign:
        source = ctx.platform_source("spec", "gang", "backend", note=f"{plan.gang.formed_by} forms this kind's gang")
        _fields(ctx, plan.gang.fields, plan.size, source)
        return
    if not plan.requested:
        _controller_gang(ctx)
        return
    if plan.why_not is NoGang.unavailable:
        target = ctx.plan.target
        # an explicit setting is the platform team's to change; auto finding nothing is the cluster's (the docs
        # name the rule that refuses instead, and the whole warning must fit what kubectl is shown)
        # the platform's to change (also said once to it: engine.platform.platform_notes): what will happen and why,
        # then the platform team's remedy
        ctx.report(UNAVAILABLE, "metadata", f"its {plan.size} Pods may start one by one: {target.unavailable}",
                   f"platform team: {target.remedy}")
        return
    if plan.gang is None:
        return
    ours, gang = plan.backend_id, plan.gang
    if plan.why_not is NoGang.unsized:
        ctx.report(POD_LEVEL, "metadata", gang.reason,
                   "let the operator that creates these pods form the gang, or submit a batch/v1 Job")
        return
    if plan.why_not is NoGang.foreign:
        if any(name == "jobset-exclusive" for name, _ in plan.foreign):
            message = ("no gang was added: JobSet exclusive placement admits followers only once the leader is "
                       "scheduled, which an all-Pods gang would never reach")
        else:
            message = f"no {ours} gang was added: the object joins {plan.foreign_names}'s (one backend per workload)"
        ctx.report(FOREIGN_BACKEND, plan.foreign[0][1], message, "")
        return
    if plan.why_not is NoGang.unsupported:
        able = [b for b in BACKEND_IDS if w.adapter.gang(b).method not in (GangMethod.unsupported, GangMethod.unsized)]
        ctx.report(UNSUPPORTED, "metadata",
                   f"its Pods may start one by one: a {w.kind} cannot join a {ours} gang",
                   f"set {ctx.policy.keys.gang}: \"false\" to ask for none" +
                   (f"; platform team: it joins {', '.join(able)} (Platform.spec.gang.backend)" if able else ""))
        return
    if plan.why_not is NoGang.name_required:  # only before engine.naming named it: never on a CREATE decided
        return
    source = ctx.platform_source("spec", "gang", "backend", note=f"{ours}; minimum = {plan.size} pods")
    if gang.method is GangMethod.spec:
        keep_or_set(ctx, gang.path, _native_spec(ctx, plan.size), source)  # type: ignore[arg-type]
    elif gang.method is GangMethod.templates:
        _templates(ctx, plan.size, source)
    elif gang.method is GangMethod.fields:
        _fields(ctx, gang.fields or GangFields(), plan.size, source)
    else:
        _kueue(ctx, gang, source)
    if gang.writes_scheduler_name:  # a platform may name a scheduler for any backend
        _scheduler_name(ctx, _gang_templates(ctx))
    target = ctx.plan.target
    for gap in target.gaps:
        ctx.report(CLUSTER_SUPPORT, "spec", gap, "platform team: declare them in Platform.spec.featureGates once the "
                   "cluster runs them")
    if target.assumed:
        ctx.unverified.append(f"the gang backend {target.backend_name} ({target.assumed})")


def _controller_gang(ctx: Context) -> None:
    """A Job that asks for no gang still gets one from a 1.36 Job controller running ``WorkloadWithJob`` when it
    is Indexed with parallelism = completions > 1 (measured on 1.36.2): say so where the policy declares it."""
    target, w, r = ctx.plan.target, ctx.workload, ctx.resolved
    if (target.backend is not GangBackend.native or target.version >= (1, 37) or "WorkloadWithJob" not in target.gates
            or r.pods <= 1 or (w.adapter.group, w.adapter.kind) != ("batch", "Job")
            or not capable(w.adapter, GangShape) or w.adapter.gang_shape(w.obj, r.pods)):
        return
    ctx.report(CLUSTER_SUPPORT, "spec.completions",
               f"the {r.pods} Pods of this Job wait for one another although it asks for no gang: on Kubernetes "
               f"{target.version_text} with WorkloadWithJob the Job controller gangs every Indexed Job whose "
               "parallelism equals its completions",
               "set spec.completionMode: NonIndexed to run them independently")


def _gang_templates(ctx: Context) -> list[PodTemplate]:
    return [t for t in ctx.workload.templates if t.in_gang]


def _native_spec(ctx: Context, size: int, api: str = "") -> dict:
    """The body of a native gang: Job.spec.scheduling, or a PodGroup's spec (of apiVersion ``api``)."""
    gang = ctx.policy.platform.gang
    value: dict = {"schedulingPolicy": {"gang": {"minCount": size}}}
    colocation = ctx.plan.colocation
    if colocation.method == "native":  # the topology concern's colocation, carried by the gang itself
        value["schedulingConstraints"] = {"topology": [{"key": colocation.level.nodeLabel}]}  # type: ignore[union-attr]
    if gang.disruptionMode:
        value["disruptionMode"] = (V1ALPHA2_DISRUPTION_MODES[gang.disruptionMode] if api.endswith("/v1alpha2")
                                   else {gang.disruptionMode: {}})
    return value


def _templates(ctx: Context, size: int, source: Source) -> None:
    """The backend's key on every gang template, and one PodGroup for the workload from the reconciler."""
    name = ctx.workload.name or ""  # the plan made sure there is one (engine.naming named a generateName one)
    r = ctx.resolved
    templates = _gang_templates(ctx)
    target = ctx.plan.target
    backend = target.backend
    if backend is GangBackend.native:
        pg_name = native_podgroup_name(name)
        for t in templates:
            keep_or_set(ctx, (*t.spec_path, "schedulingGroup"), {"podGroupName": pg_name}, source)
        api = target.podgroup_api
        spec = _native_spec(ctx, size, api)
        # the gang's own priority: workload-aware preemption reads it, not its Pods' (a cluster without that
        # preemption drops the field, and the reconciler's PodGroup would differ from the decision's)
        if r.tier is not None and target.podgroup_priority:
            spec["priorityClassName"] = r.tier[1].className
        _companion(ctx, {"apiVersion": api, "kind": "PodGroup", "metadata": {"name": pg_name}, "spec": spec}, source)
    elif backend is GangBackend.coscheduling:
        for t in templates:
            keep_or_set(ctx, (*t.meta_path, "labels", POD_GROUP_LABEL), name, source)
        pg: dict = {"minMember": size}
        if r.gpu_resource and r.extended_gpus:  # a resource; DRA devices are no resource a PodGroup can hold
            pg["minResources"] = {r.gpu_resource: str(r.extended_gpus)}
        timeout = ctx.policy.platform.gang.scheduleTimeoutSeconds
        if timeout:
            pg["scheduleTimeoutSeconds"] = timeout
        _companion(ctx, {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                         "metadata": {"name": name}, "spec": pg}, source)
    else:  # volcano: the Pods name their group; Volcano's own PodGroup, from the reconciler
        for t in templates:
            keep_or_set(ctx, (*t.meta_path, "annotations", VOLCANO_GROUP_ANNOTATION), name, source)
        pg = {"minMember": size, "queue": r.queue or "default"}
        if r.tier is not None:
            pg["priorityClassName"] = r.tier[1].className
        _companion(ctx, {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                         "metadata": {"name": name}, "spec": pg}, source)


def _fields(ctx: Context, fields: GangFields, size: int, source: Source) -> None:
    """The keys the kind's operator reads on the object to form its own gang. A size the kind's own admission
    webhook fills (a Volcano Job's ``minAvailable`` left at 0) is left to it, and the decision says so; the
    PriorityClass the operator copies to its PodGroup is the priority concern's (the tier's)."""
    r, adapter = ctx.resolved, ctx.workload.adapter
    if capable(adapter, OwnMinimums):
        _own_minimums(ctx, adapter.own_minimums(ctx.workload.obj))
    if fields.size is not None:
        defaulted = adapter.defaulted_gang_size(ctx.workload.obj) if capable(adapter, DefaultedGangSize) else None
        if defaulted is not None:
            ctx.note(f"{field_path(fields.size)}: {adapter.defaulted_by} sets it to the tasks' minimums "
                     f"({defaulted[1]}), and {adapter.operator} forms the gang from it")
        else:
            keep_or_set(ctx, fields.size, _as_field(fields.size, size), source)
    if fields.queue is not None:
        _queue(ctx, fields.queue, fields.queue_crd_default)
    if fields.priority is not None and r.tier is not None:
        path = fields.priority
        current = ctx.patcher.get(path)
        wanted = r.tier[1].className
        if current is None or current == wanted:
            ctx.inject(path, wanted, "priority", Source("PriorityTier", r.tier[0], ("spec", "className")))
        else:
            conflict(ctx, Enforceable.priorityClassName, path, current, wanted)
    if fields.switch is not None:
        keep_or_set(ctx, fields.switch[0], fields.switch[1], source)


def _own_minimums(ctx: Context, minimums: list[tuple[Path, Path, int, int]]) -> None:
    """A GPU template of several Pods whose own minimum is 0 is out of its kind's gang: say so (the user's choice,
    so a note), and how to bring its Pods back into it."""
    gpu_roots = {t.root for t, _ in ctx.resolved.gpu_templates}
    for path, root, minimum, pods in minimums:
        if minimum == 0 and pods > 1 and root in gpu_roots:
            field = field_path(path)
            ctx.report(OWN_MINIMUM, field,
                       f"its {pods} GPU workers may start one by one: {field}: 0 leaves them out of the gang",
                       f"set {field}: {pods} (or remove it) to start them together",
                       (FieldFix(path, pods),))


def _as_field(path: Path, value: int) -> object:
    """Labels and annotations hold strings; spec fields hold the number."""
    return str(value) if len(path) >= 2 and path[-2] in ("labels", "annotations") else value


def _kueue(ctx: Context, gang: Gang, source: Source) -> None:
    _queue(ctx, ("metadata", "labels", KUEUE_QUEUE))
    if gang.suspend is not None:
        ctx.inject(gang.suspend, True, "gang",
                   Source(source.kind, source.name, source.field, "kueue; Kueue unsuspends it once quota for all "
                                                                  "pods is free"))


def _queue(ctx: Context, path: Path, crd_default: str | None = None) -> None:
    """The queue at ``path``; a value equal to the CRD's default counts as unset (the apiserver wrote it), and is
    the queue when neither the workload nor the policy names one (a Volcano Job's, whatever the backend). The
    CRD's default is left to the apiserver, so the object as written and as defaulted get one decision."""
    r = ctx.resolved
    named = r.queue_explicit or ctx.policy.platform.gang.queue is not None
    queue = (r.queue if named or crd_default is None else crd_default) or ctx.plan.target.default_queue
    current = ctx.patcher.get(path)
    if current is not None and current == crd_default:
        current = None
    if r.queue_explicit:
        source = Source("object", "", ("metadata", "labels", ctx.policy.keys.queue))
    else:
        source = ctx.platform_source("spec", "gang", "queue")
    if current is None and queue == crd_default:  # the apiserver writes it: the same object with or without us
        ctx.satisfied("gang")
        ctx.note(f"{field_path(path)}: the {ctx.workload.kind} CRD defaults it to {queue}, the queue wanted")
    elif current is None or current == queue:
        ctx.inject(path, queue, "gang", source)
    else:
        conflict(ctx, Enforceable.queue, path, current, queue)


_COMPACT = json.JSONEncoder(sort_keys=True, separators=(",", ":"))  # json.dumps(..., these options), made once


def _companion(ctx: Context, manifest: dict, source: Source) -> None:
    """Record the PodGroup on the workload (label for the reconciler's list, annotation with the object)
    and in the decision. Admission creates nothing: the reconciler does, once the workload exists."""
    keys = ctx.policy.keys
    compact = _COMPACT.encode(manifest)
    keep_or_set(ctx, ("metadata", "labels", keys.podgroup), "true", source)
    keep_or_set(ctx, ("metadata", "annotations", keys.podgroup), compact, source)
    full = json.loads(compact)
    full["metadata"].update(namespace=ctx.namespace or "default",
                            labels={"app.kubernetes.io/managed-by": "trainadmit"})
    ctx.companions.append(full)


def _scheduler_name(ctx: Context, templates: list[PodTemplate]) -> None:
    wanted = ctx.plan.target.scheduler_name
    if not wanted:
        return
    ours = ctx.plan.gang.backend_id
    if ctx.policy.platform.gang.schedulerName:
        source = ctx.platform_source("spec", "gang", "schedulerName")
    else:
        source = ctx.platform_source("spec", "gang", "backend", note=f"{ours} schedules with {wanted}")
    for t in templates:
        path = (*t.spec_path, "schedulerName")
        current = ctx.patcher.get(path)
        if current in (None, "", "default-scheduler", wanted):
            ctx.inject(path, wanted, "gang", source)
            continue
        conflict(ctx, Enforceable.schedulerName, path, current, wanted)
        if not enforced(ctx, Enforceable.schedulerName):
            ctx.report(FOREIGN_BACKEND, field_path(path),
                       f"schedulerName {current!r} is kept as you set it, but the {ours} gang needs "
                       f"{wanted!r}; the gang will not form under another scheduler", f"set schedulerName: {wanted}")


# ---- validation ----------------------------------------------------------------------------------

def validate(ctx: Context, view: Workload) -> None:
    """A gang whose kind has fields that must take certain values to run as one gang (a Job: Indexed,
    parallelism = completions) gets the kind's gang-shape rules, unless another mechanism forms the gang; a
    resize must be one the workload's gang can follow."""
    if ctx.plan.resize is not None:
        _resize(ctx, view)
    plan = ctx.plan.gang
    if not plan.requested or plan.why_not is NoGang.foreign or not capable(view.adapter, GangShape):
        return
    for problem in view.adapter.gang_shape(view.obj, ctx.resolved.pods):
        fix = ctx.agreeing(view, tuple(FieldFix(path, value) for path, value in problem.fix))
        # the size fix may set the same field (completions, with the parallelism it gives): its value, in both
        ctx.report(SHAPE_RULES[problem.rule], problem.path, problem.message, fix_text(fix) or problem.hint, fix)


def _resize(ctx: Context, view: Workload) -> None:
    """Whether the gang the workload got when it was created follows this resize (``workloads.Follow``, per
    kind and backend): the reconciler updates its own PodGroup, Kueue requeues the workload, an operator
    resizes its gang from the object's counts or from a size field, which must then change in the same
    UPDATE; anything else keeps the old size and the resize is refused, saying what to do."""
    resize, kind = ctx.plan.resize, view.kind
    assert resize is not None
    where = ctx.plan.scale.path or "spec"
    recreate = f"delete the {kind} and create it with the new size"
    if resize.created_gang == "":  # admitted without a gang: an UPDATE cannot add one (it is never mutated)
        if ctx.plan.gang.backend is not None and resize.gang_size[1] > 1:
            ctx.report(RESIZE_NOT_FOLLOWED, where,
                       f"this {kind} was admitted without a gang ({resize.pods[0]} Pods), and {resize.pods[1]} Pods "
                       f"need one ({ctx.plan.gang.backend}); an UPDATE cannot add it", recreate)
        return
    if not resize.created_gang:
        return  # nothing says which gang it got (trainadmit did not create it): only the size rules apply
    backend = resize.created_gang
    gang = view.adapter.gang(backend)
    follow = gang.follow
    if resize.needed[0] == resize.needed[1]:
        return  # the gang keeps its size (more Pods of an elastic job beyond its minimum)
    if follow is Follow.never:
        ctx.report(RESIZE_NOT_FOLLOWED, where,
                   f"its {backend} gang keeps {resize.gang_size[0]} Pods: {gang.resize_reason}", recreate)
    elif (follow is Follow.reconciler and backend == NATIVE_POD_GROUP
          and ctx.plan.target.podgroup_api.endswith("v1alpha2")):
        ctx.report(RESIZE_NOT_FOLLOWED, where,
                   f"its native PodGroup ({ctx.plan.target.podgroup_api}) keeps minCount {resize.gang_size[0]}: "
                   "Kubernetes 1.36 does not let a PodGroup's schedulingPolicy change", recreate)
    elif follow is Follow.size_field and resize.size_field is not None:
        before, now = resize.size_values
        field = field_path(resize.size_field)
        whole = str(before) == str(resize.needed[0])  # the gang was the whole workload, as trainadmit writes it
        wanted = _as_field(resize.size_field, resize.needed[1])
        if whole and str(now) != str(wanted):
            ctx.report(RESIZE_NOT_FOLLOWED, field,
                       f"{field} is still {now}: {view.adapter.operator} sizes the {backend} gang from it, so the "
                       f"gang would keep {before} of {resize.needed[1]} Pods",
                       f"set {field}: {wanted} in the same change")
        elif not whole and isinstance(now, int) and now > resize.pods[1]:
            ctx.report(RESIZE_NOT_FOLLOWED, field,
                       f"the gang needs {now} Pods ({field}) and the {kind} now runs {resize.pods[1]}: it could "
                       "never start", f"set {field} to at most {resize.pods[1]}")


# the object's and its templates' gang keys (labels are read whole), the native group fields of a pod spec,
# its scheduler
CONCERN = Concern("gang", rules=(COMPLETION_MODE, PARALLELISM_COMPLETIONS, FOREIGN_BACKEND,
                                 CLUSTER_SUPPORT, MEMBERSHIP_LOST, POD_LEVEL, UNSUPPORTED, UNAVAILABLE,
                                 RESIZE_NOT_FOLLOWED, OWN_MINIMUM),
                  mutate=mutate, validate=validate,
                  reads=Reads(metadata=("labels", "annotations", "name"),
                              annotations=(VOLCANO_MIN_MEMBER, VOLCANO_QUEUE, VOLCANO_GROUP_ANNOTATION),
                              pod=("schedulingGroup", "workloadRef", "schedulerName")))
