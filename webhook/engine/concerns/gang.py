"""Gang membership: one backend per workload, one gang per training job, whatever submitted it.

The workload's adapter says how its kind joins the policy's backend (``GangMethod``); exact keys per
backend come from shared/reference/gang.md and fixtures/operators/README.md:

- batch/v1 Job (``job``): native 1.37 ``Job.spec.scheduling.schedulingPolicy.gang.minCount`` (the Job
  controller builds Workload + PodGroup) or, in ``pod-group`` mode, ``schedulingGroup`` plus a
  PodGroup from trainadmit's reconciler; coscheduling label ``scheduling.x-k8s.io/pod-group`` +
  schedulerName + PodGroup (reconciler); Volcano's ``scheduling.volcano.sh/group-min-member`` on the
  Job (Volcano's pg-controller builds the PodGroup); Kueue's queue label and ``suspend: true``.
- ``templates`` (JobSet, and native gangs of PyTorchJob, MPIJob v1, RayCluster, RayJob): the backend's
  key on every gang template, and one PodGroup for the whole workload from the reconciler.
- ``fields``: the keys the kind's operator reads on the custom resource (minimum, queue, priority).
- ``kueue``: the queue label and the kind's suspend flag.

Minimum size: the Pods the kind's operator counts in a gang (a Job's ``parallelism``, every replica of
a PyTorchJob, one LeaderWorkerSet group…). A workload that already carries another gang mechanism
(another backend's keys, a scheduler with its own gangs such as sakkara, JobSet exclusive placement)
gets no second gang and none of the gang-shape rules.
"""

from __future__ import annotations

import json

from ...policy.policyset import TOPOLOGY_GATE, podgroup_priority_served
from ...policy.vocab import Action, Enforceable, GangBackend
from ..concern import Concern, rule
from ..context import Context
from ..decision import Source
from ..paths import Path, field_path, get_path
from ..workloads import GangFields, GangMethod, PodTemplate, Workload, job

POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
LEGACY_POD_GROUP_LABEL = "pod-group.scheduling.sigs.k8s.io"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
VOLCANO_MIN_MEMBER = "scheduling.volcano.sh/group-min-member"
VOLCANO_QUEUE = "scheduling.volcano.sh/queue-name"
KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
# v1alpha2 (1.36) spells disruptionMode as an enum; v1beta1 as a struct {single: {}} / {all: {}}
V1ALPHA2_DISRUPTION_MODES = {"single": "Pod", "all": "PodGroup"}
KUEUE_POD_GROUP = "kueue.x-k8s.io/pod-group-name"
SAKKARA_GROUP = "sakkara.group.name"
JOBSET_EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"

COMPLETION_MODE = rule("gang.completion-mode", Action.deny, "a gang Job that is not completionMode: Indexed")
PARALLELISM_COMPLETIONS = rule("gang.parallelism-completions", Action.deny,
                               "a gang Job whose parallelism differs from its completions")
NAME_REQUIRED = rule("gang.name-required", Action.deny,
                     "a generateName workload on a backend that names its PodGroup after the workload")
FOREIGN_BACKEND = rule("gang.foreign-backend", Action.warn,
                       "the object already carries another gang mechanism, so trainadmit adds none")
CLUSTER_SUPPORT = rule("gang.cluster-support", Action.warn,
                       "the policy's Kubernetes version or feature gates lack what the gang backend needs")
MEMBERSHIP_LOST = rule("gang.membership-lost", Action.deny,
                       "/validate: the gang trainadmit injected is gone from the object about to be stored")
POD_LEVEL = rule("gang.pod-level", Action.warn, "gang intent on a bare Pod, whose gang size is not known")
UNSUPPORTED = rule("gang.unsupported", Action.warn,
                   "the workload's kind cannot join the policy's gang backend (the message says why)")


# ---- what the object already carries -----------------------------------------------------------

def present_backends(ctx: Context) -> dict[str, str]:
    """The gang mechanisms the object already carries (ours from a previous pass, or another's):
    backend id -> where it was seen."""
    w = ctx.current
    found: dict[str, str] = {}
    if w.is_batch_job and get_path(w.obj, ("spec", "scheduling")) is not None:
        found["native/job-scheduling"] = "spec.scheduling"
    if VOLCANO_MIN_MEMBER in w.annotations:
        found["volcano"] = f'metadata.annotations["{VOLCANO_MIN_MEMBER}"]'
    if KUEUE_QUEUE in w.labels:
        found["kueue"] = f'metadata.labels["{KUEUE_QUEUE}"]'
    if JOBSET_EXCLUSIVE in w.annotations:
        found["jobset-exclusive"] = f'metadata.annotations["{JOBSET_EXCLUSIVE}"]'
    for t in w.templates:
        labels, annotations = t.pod_meta.get("labels") or {}, t.pod_meta.get("annotations") or {}
        where = field_path(t.meta_path)
        if t.pod_spec.get("schedulingGroup") or t.pod_spec.get("workloadRef"):
            found.setdefault("native/pod-group", field_path((*t.spec_path, "schedulingGroup")))
        for key, backend in ((POD_GROUP_LABEL, "coscheduling"), (LEGACY_POD_GROUP_LABEL, "coscheduling"),
                             (KUEUE_POD_GROUP, "kueue"), (SAKKARA_GROUP, "sakkara")):
            if isinstance(labels, dict) and key in labels:
                found.setdefault(backend, f'{where}.labels["{key}"]')
        for key, backend in ((VOLCANO_GROUP_ANNOTATION, "volcano"), (JOBSET_EXCLUSIVE, "jobset-exclusive")):
            if isinstance(annotations, dict) and key in annotations:
                found.setdefault(backend, f'{where}.annotations["{key}"]')
    return found


def backend_id(ctx: Context) -> str:
    gang = ctx.policy.platform.gang
    if gang.backend is GangBackend.native:
        mode = gang.nativeMode if ctx.workload.is_batch_job else "pod-group"  # custom resources: pod-group
        return f"native/{mode}"
    return gang.backend.value


def keep_or_set(ctx: Context, path: Path, value: object, source: Source) -> None:
    """Set ``value`` when the field is empty; otherwise keep what is there (the user's or ours)."""
    if ctx.patcher.get(path) is None:
        ctx.inject(path, value, "gang", source)
    else:
        ctx.satisfied("gang")


# ---- mutation ------------------------------------------------------------------------------------

def mutate(ctx: Context) -> None:
    """Inject gang membership and set ``ctx.gang_backend`` to the backend id used (None: no gang)."""
    r, w = ctx.resolved, ctx.workload
    if not r.gang:
        return
    if w.adapter.kind == "Pod" and w.api_version == "v1":
        ctx.report(POD_LEVEL, "metadata", "trainadmit gangs Jobs; a Pod's gang size is not known here",
                   "let the operator that creates these pods form the gang, or submit a batch/v1 Job")
        return
    ours = backend_id(ctx)
    foreign = {b: where for b, where in present_backends(ctx).items() if b != ours}
    if foreign:
        ctx.foreign_gang = ", ".join(sorted(foreign))
        if "jobset-exclusive" in foreign:
            message = ("JobSet exclusive placement admits follower pods only after the leader is scheduled, so an "
                       "all-pods gang could never reach quorum; no gang was added")
        else:
            message = (f"this object already carries gang membership for {ctx.foreign_gang}; trainadmit did not "
                       f"add {ours} (one backend per workload)")
        ctx.report(FOREIGN_BACKEND, next(iter(foreign.values())), message, "")
        return
    backend = ctx.policy.platform.gang.backend
    gang = w.adapter.gang(backend.value)
    if gang.method is GangMethod.unsupported:
        ctx.report(UNSUPPORTED, "metadata",
                   f"{w.kind} cannot join a {ours} gang: {gang.reason}; trainadmit added no gang",
                   "use a gang backend this kind supports (see the README's operator table) or submit without gang")
        return
    size = r.gang_size
    source = ctx.platform_source("spec", "gang", "backend", note=f"{ours}; minimum = {size} pods")
    if gang.method is GangMethod.job:
        if not _job(ctx, backend, size, source):
            return
    elif gang.method is GangMethod.templates:
        if not _templates(ctx, backend, size, source):
            return
    elif gang.method is GangMethod.fields:
        _fields(ctx, gang.fields or GangFields(), size, source)
    else:
        _kueue(ctx, source)
    ctx.gang_backend = ours
    for gap in ctx.policy.gang_gaps:
        ctx.report(CLUSTER_SUPPORT, "spec", gap, "set Platform.spec.featureGates once the cluster has them")


def _gang_templates(ctx: Context) -> list[PodTemplate]:
    return [t for t in ctx.workload.templates if t.in_gang]


def _job(ctx: Context, backend: GangBackend, size: int, source: Source) -> bool:
    """A batch/v1 Job's own gang mechanism per backend; False when it could not join one."""
    native_job = backend is GangBackend.native and ctx.policy.platform.gang.nativeMode == "job-scheduling"
    if backend is GangBackend.coscheduling or (backend is GangBackend.native and not native_job):
        return _templates(ctx, backend, size, source)
    template = ctx.workload.templates[0]
    if native_job:
        keep_or_set(ctx, ("spec", "scheduling"), _native_spec(ctx, size), source)
    elif backend is GangBackend.volcano:
        keep_or_set(ctx, ("metadata", "annotations", VOLCANO_MIN_MEMBER), str(size), source)
        _queue(ctx, (*template.meta_path, "annotations", VOLCANO_QUEUE))
    else:
        _kueue(ctx, source)
    _scheduler_name(ctx, [template])  # a platform may name a scheduler for any backend
    return True


def _native_spec(ctx: Context, size: int, api: str = "") -> dict:
    """The body of a native gang: Job.spec.scheduling, or a PodGroup's spec (of apiVersion ``api``)."""
    gang = ctx.policy.platform.gang
    value: dict = {"schedulingPolicy": {"gang": {"minCount": size}}}
    topology = _topology_constraint(ctx)
    if topology:
        value["schedulingConstraints"] = {"topology": topology}
    if gang.disruptionMode:
        value["disruptionMode"] = (V1ALPHA2_DISRUPTION_MODES[gang.disruptionMode] if api.endswith("/v1alpha2")
                                   else {gang.disruptionMode: {}})
    return value


def _templates(ctx: Context, backend: GangBackend, size: int, source: Source) -> bool:
    """The backend's key on every gang template, and one PodGroup for the workload from the reconciler."""
    name = _need_name(ctx)
    if name is None:
        return False
    r = ctx.resolved
    templates = _gang_templates(ctx)
    if backend is GangBackend.native:
        pg_name = f"{name}-gang"
        for t in templates:
            keep_or_set(ctx, (*t.spec_path, "schedulingGroup"), {"podGroupName": pg_name}, source)
        api = ctx.policy.podgroup_api
        spec = _native_spec(ctx, size, api)
        # the gang's own priority: workload-aware preemption reads it, not its Pods' (a cluster without that
        # preemption drops the field, and the reconciler's PodGroup would differ from the decision's)
        if r.tier is not None and podgroup_priority_served(ctx.policy.platform):
            spec["priorityClassName"] = r.tier[1].className
        _companion(ctx, {"apiVersion": api, "kind": "PodGroup", "metadata": {"name": pg_name}, "spec": spec}, source)
    elif backend is GangBackend.coscheduling:
        for t in templates:
            keep_or_set(ctx, (*t.meta_path, "labels", POD_GROUP_LABEL), name, source)
        pg: dict = {"minMember": size}
        if r.gpu_resource and r.total_gpus:
            pg["minResources"] = {r.gpu_resource: str(r.total_gpus)}
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
    _scheduler_name(ctx, templates)  # a platform may name a scheduler for any backend
    return True


def _fields(ctx: Context, fields: GangFields, size: int, source: Source) -> None:
    """The keys the kind's operator reads on the custom resource to form its own gang."""
    r = ctx.resolved
    if fields.size is not None:
        keep_or_set(ctx, fields.size, _as_field(fields.size, size), source)
    if fields.queue is not None:
        _queue(ctx, fields.queue, fields.queue_crd_default)
    if fields.priority is not None and r.tier is not None:
        path = fields.priority
        current = ctx.patcher.get(path)
        wanted = r.tier[1].className
        if current is None or current == wanted:
            ctx.inject(path, wanted, "gang", Source("PriorityTier", r.tier[0], ("spec", "className")))
        else:
            ctx.conflict(Enforceable.priorityClassName, path, current, wanted)
    if fields.switch is not None:
        keep_or_set(ctx, fields.switch[0], fields.switch[1], source)
    if fields.scheduler_on_templates:
        _scheduler_name(ctx, _gang_templates(ctx))


def _as_field(path: Path, value: int) -> object:
    """Labels and annotations hold strings; spec fields hold the number."""
    return str(value) if len(path) >= 2 and path[-2] in ("labels", "annotations") else value


def _kueue(ctx: Context, source: Source) -> None:
    _queue(ctx, ("metadata", "labels", KUEUE_QUEUE))
    suspend = ctx.workload.adapter.kueue_suspend
    if suspend is not None:
        ctx.inject(suspend, True, "gang",
                   Source(source.kind, source.name, source.field, "kueue; Kueue unsuspends it once quota for all "
                                                                  "pods is free"))


def _queue(ctx: Context, path: Path, crd_default: str | None = None) -> None:
    """The queue at ``path``; a value equal to the CRD's default counts as unset (the apiserver wrote it)."""
    r = ctx.resolved
    queue = r.queue or "default"
    current = ctx.patcher.get(path)
    if current is not None and current == crd_default:
        current = None
    if r.queue_explicit:
        source = Source("object", "", ("metadata", "labels", ctx.policy.keys.queue))
    else:
        source = ctx.platform_source("spec", "gang", "queue")
    if current is None or current == queue:
        ctx.inject(path, queue, "gang", source)
    else:
        ctx.conflict(Enforceable.queue, path, current, queue)


def _need_name(ctx: Context) -> str | None:
    name = ctx.workload.name
    if name is None:
        kind = ctx.workload.kind
        ctx.report(NAME_REQUIRED, "metadata.name",
                   f"backend {backend_id(ctx)} names the PodGroup after the {kind}, and a generateName {kind} has "
                   "no name when admission runs", "set metadata.name instead of metadata.generateName")
    return name


def _topology_constraint(ctx: Context) -> list[dict] | None:
    r = ctx.resolved
    if r.level is None or r.gpu_pods <= 1 or colocation_method(ctx) != "native":
        return None
    return [{"key": r.level.nodeLabel}]


def _companion(ctx: Context, manifest: dict, source: Source) -> None:
    """Record the PodGroup on the workload (label for the reconciler's list, annotation with the object)
    and in the decision. Admission creates nothing: the reconciler does, once the workload exists."""
    keys = ctx.policy.keys
    compact = json.dumps(manifest, sort_keys=True, separators=(",", ":"))
    keep_or_set(ctx, ("metadata", "labels", keys.podgroup), "true", source)
    keep_or_set(ctx, ("metadata", "annotations", keys.podgroup), compact, source)
    full = json.loads(compact)
    full["metadata"].update(namespace=ctx.namespace or "default",
                            labels={"app.kubernetes.io/managed-by": "trainadmit"})
    ctx.companions.append(full)


def _scheduler_name(ctx: Context, templates: list[PodTemplate]) -> None:
    wanted = ctx.policy.scheduler_name
    if not wanted:
        return
    if ctx.policy.platform.gang.schedulerName:
        source = ctx.platform_source("spec", "gang", "schedulerName")
    else:
        source = ctx.platform_source("spec", "gang", "backend", note=f"{backend_id(ctx)} schedules with {wanted}")
    for t in templates:
        path = (*t.spec_path, "schedulerName")
        current = ctx.patcher.get(path)
        if current in (None, "", "default-scheduler", wanted):
            ctx.inject(path, wanted, "gang", source)
            continue
        ctx.conflict(Enforceable.schedulerName, path, current, wanted)
        if not ctx.enforced(Enforceable.schedulerName):
            ctx.report(FOREIGN_BACKEND, field_path(path),
                       f"schedulerName {current!r} is kept as you set it, but the {backend_id(ctx)} gang needs "
                       f"{wanted!r}; the gang will not form under another scheduler", f"set schedulerName: {wanted}")


# ---- validation ----------------------------------------------------------------------------------

def validate(ctx: Context, view: Workload) -> None:
    """A gang Job runs all ranks at once, each with a stable rank: Indexed, parallelism = completions."""
    r = ctx.resolved
    if not (r.gang and view.is_batch_job) or ctx.foreign_gang:
        return
    mode, parallel, done = job.completion_mode(view.obj), job.parallelism(view.obj), job.completions(view.obj)
    if mode != "Indexed":
        ctx.report(COMPLETION_MODE, "spec.completionMode",
                   f"a gang Job needs completionMode Indexed so each of its {r.pods} workers gets a stable rank, "
                   f"got {mode}", "set spec.completionMode: Indexed")
    if done != parallel:
        ctx.report(PARALLELISM_COMPLETIONS, "spec.completions",
                   f"parallelism {parallel} and completions {done if done is not None else '(unset)'} differ: "
                   "a gang runs all ranks at once", f"set spec.completions: {parallel}")


def colocation_method(ctx: Context) -> str:
    """How workers are colocated: the policy's choice, or (auto) the method the cluster's scheduler can
    hold to its promise: all workers in one domain once one has room, none bound while none has.

    A native gang's PodGroup topology constraint does (the scheduler tries each domain); the apiserver
    drops it without the TopologyAwareWorkloadScheduling gate. Without the gate auto adds no colocation
    rather than required pod affinity: with pod affinity the first worker picks its domain alone, and
    when that domain is too small kube-scheduler 1.36 binds none of a native gang for good although
    another domain fits it (and, with no gang enforced, binds the workers that fit and leaves the rest
    waiting, holding GPUs). The topology concern says so when it applies (``topology.colocation-risk``).
    Other backends' schedulers only understand pod affinity (Kueue: its own topology-aware admission).
    """
    platform = ctx.policy.platform
    gang = platform.gang
    if gang.topologyMethod != "auto":
        return gang.topologyMethod
    if gang.backend is GangBackend.native:
        return "native" if TOPOLOGY_GATE in platform.featureGates else "none"
    return {GangBackend.kueue: "kueue"}.get(gang.backend, "podAffinity")


CONCERN = Concern("gang", rules=(COMPLETION_MODE, PARALLELISM_COMPLETIONS, NAME_REQUIRED, FOREIGN_BACKEND,
                                 CLUSTER_SUPPORT, MEMBERSHIP_LOST, POD_LEVEL, UNSUPPORTED),
                  mutate=mutate, validate=validate)
