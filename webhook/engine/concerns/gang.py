"""Gang membership: one backend per workload, minimum size = pods that run at once (parallelism).

Exact keys per backend come from shared/reference/gang.md:
- native (1.37) job-scheduling: ``Job.spec.scheduling.schedulingPolicy.gang.minCount``; the Job
  controller (gate WorkloadWithJob) then builds the Workload and PodGroup itself.
- native pod-group: ``pod.spec.schedulingGroup.podGroupName`` plus a ``scheduling.k8s.io/v1beta1``
  PodGroup that trainadmit's reconciler creates (never admission: the Job may still be rejected).
- coscheduling: label ``scheduling.x-k8s.io/pod-group`` + schedulerName + a PodGroup (reconciler).
- volcano: Job annotation ``scheduling.volcano.sh/group-min-member`` (Volcano's pg-controller reads it
  from the owner and builds the PodGroup), queue annotation, schedulerName ``volcano``.
- kueue: Job label ``kueue.x-k8s.io/queue-name`` and ``suspend: true`` (Kueue admits all pods at once).
"""

from __future__ import annotations

import json

from ...policy.vocab import Action, Enforceable, GangBackend
from ..concern import Concern, rule
from ..context import Context
from ..decision import Source
from ..paths import field_path, get_path
from ..workloads import Workload, job

POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
VOLCANO_MIN_MEMBER = "scheduling.volcano.sh/group-min-member"
VOLCANO_QUEUE = "scheduling.volcano.sh/queue-name"
KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
KUEUE_POD_GROUP = "kueue.x-k8s.io/pod-group-name"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"

COMPLETION_MODE = rule("gang.completion-mode", Action.deny, "a gang Job that is not completionMode: Indexed")
PARALLELISM_COMPLETIONS = rule("gang.parallelism-completions", Action.deny,
                               "a gang Job whose parallelism differs from its completions")
NAME_REQUIRED = rule("gang.name-required", Action.deny,
                     "a generateName Job on a backend that names its PodGroup after the Job")
FOREIGN_BACKEND = rule("gang.foreign-backend", Action.warn,
                       "the object already carries another gang mechanism, so trainadmit adds none")
CLUSTER_SUPPORT = rule("gang.cluster-support", Action.warn,
                       "the policy's Kubernetes version or feature gates lack what the gang backend needs")
MEMBERSHIP_LOST = rule("gang.membership-lost", Action.deny,
                       "/validate: the gang trainadmit injected is gone from the object about to be stored")
POD_LEVEL = rule("gang.pod-level", Action.warn, "gang intent on a bare Pod, whose gang size is not known")


def existing_backends(ctx: Context) -> set[str]:
    """Which gang mechanisms the object already carries (ours from a previous pass, or another's)."""
    w = ctx.current
    t = w.templates[0]
    found = set()
    if get_path(w.obj, ("spec", "scheduling")) is not None and w.is_batch_job:
        found.add("native/job-scheduling")
    if t.pod_spec.get("schedulingGroup") or t.pod_spec.get("workloadRef"):
        found.add("native/pod-group")
    if POD_GROUP_LABEL in (t.pod_meta.get("labels") or {}):
        found.add("coscheduling")
    pod_ann = t.pod_meta.get("annotations") or {}
    if VOLCANO_GROUP_ANNOTATION in pod_ann or VOLCANO_MIN_MEMBER in w.annotations:
        found.add("volcano")
    if KUEUE_QUEUE in w.labels or KUEUE_POD_GROUP in w.labels:
        found.add("kueue")
    return found


def backend_id(ctx: Context) -> str:
    gang = ctx.policy.platform.gang
    if gang.backend is GangBackend.native:
        return f"native/{gang.nativeMode}"
    return gang.backend.value


def keep_or_set(ctx: Context, path: tuple, value: object, source: Source) -> None:
    """Set ``value`` when the field is empty; otherwise keep what is there (the user's or ours)."""
    if ctx.patcher.get(path) is None:
        ctx.inject(path, value, "gang", source)
    else:
        ctx.satisfied("gang")


def mutate(ctx: Context) -> None:
    """Inject gang membership and set ``ctx.gang_backend`` to the backend id used (None: no gang)."""
    r, w = ctx.resolved, ctx.workload
    if not r.gang:
        return
    if not w.is_batch_job:
        ctx.report(POD_LEVEL, "metadata", "trainadmit gangs Jobs; a Pod's gang size is not known here",
                   "let the operator that creates these pods form the gang, or submit a batch/v1 Job")
        return
    exclusive = (w.annotations.get(JOBSET_EXCLUSIVE)
                 or (w.templates[0].pod_meta.get("annotations") or {}).get(JOBSET_EXCLUSIVE))
    if exclusive:
        ctx.report(FOREIGN_BACKEND, f'metadata.annotations["{JOBSET_EXCLUSIVE}"]',
                   "JobSet exclusive placement admits follower pods only after the leader is scheduled, "
                   "so an all-pods gang could never reach quorum; no gang was added", "")
        return
    ours = backend_id(ctx)
    present = existing_backends(ctx)
    foreign = sorted(present - {ours})
    if foreign:
        ctx.report(FOREIGN_BACKEND, "spec.template",
                   f"this object already carries gang membership for {', '.join(foreign)}; "
                   f"trainadmit did not add {ours} (one backend per workload)", "")
        return
    backend = ctx.policy.platform.gang.backend
    minimum = r.gang_size
    source = ctx.platform_source("spec", "gang", "backend", note=f"{ours}; minCount = spec.parallelism ({minimum})")
    if backend is GangBackend.native:
        _native(ctx, minimum, source)
    elif backend is GangBackend.coscheduling:
        _coscheduling(ctx, minimum, source)
    elif backend is GangBackend.volcano:
        _volcano(ctx, minimum, source)
    else:
        _kueue(ctx, source)
    _scheduler_name(ctx)
    ctx.gang_backend = ours
    for gap in ctx.policy.gang_gaps:
        ctx.report(CLUSTER_SUPPORT, "spec", gap, "set Platform.spec.featureGates once the cluster has them")


def validate(ctx: Context, view: Workload) -> None:
    """A gang Job runs all ranks at once, each with a stable rank: Indexed, parallelism = completions."""
    r = ctx.resolved
    if not (r.gang and view.is_batch_job):
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


def _need_name(ctx: Context, what: str) -> str | None:
    name = ctx.workload.name
    if name is None:
        ctx.report(NAME_REQUIRED, "metadata.name",
                   f"backend {backend_id(ctx)} names {what} after the Job, and a generateName Job has no name "
                   "when admission runs", "set metadata.name instead of metadata.generateName")
    return name


def _topology_constraint(ctx: Context) -> list[dict] | None:
    r = ctx.resolved
    if r.level is None or r.gpu_pods <= 1 or colocation_method(ctx) != "native":
        return None
    return [{"key": r.level.nodeLabel}]


def _native(ctx: Context, minimum: int, source: Source) -> None:
    gang = ctx.policy.platform.gang
    w = ctx.workload
    topology = _topology_constraint(ctx)
    if gang.nativeMode == "job-scheduling":
        value: dict = {"schedulingPolicy": {"gang": {"minCount": minimum}}}
        if topology:
            value["schedulingConstraints"] = {"topology": topology}
        if gang.disruptionMode:
            value["disruptionMode"] = {gang.disruptionMode: {}}
        keep_or_set(ctx, ("spec", "scheduling"), value, source)
        return
    name = _need_name(ctx, "the PodGroup")
    if name is None:
        return
    pg_name = f"{name}-gang"
    keep_or_set(ctx, (*w.templates[0].spec_path, "schedulingGroup"), {"podGroupName": pg_name}, source)
    spec: dict = {"schedulingPolicy": {"gang": {"minCount": minimum}}}
    if topology:
        spec["schedulingConstraints"] = {"topology": topology}
    if gang.disruptionMode:
        spec["disruptionMode"] = {gang.disruptionMode: {}}
    _companion(ctx, {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": {"name": pg_name},
                     "spec": spec}, source)


def _companion(ctx: Context, manifest: dict, source: Source) -> None:
    """Record the PodGroup on the Job (label for the reconciler's watch, annotation with the object)
    and in the decision. Admission creates nothing: the reconciler does, once the Job exists."""
    keys = ctx.policy.keys
    compact = json.dumps(manifest, sort_keys=True, separators=(",", ":"))
    keep_or_set(ctx, ("metadata", "labels", keys.podgroup), "true", source)
    keep_or_set(ctx, ("metadata", "annotations", keys.podgroup), compact, source)
    full = json.loads(compact)
    full["metadata"].update(namespace=ctx.namespace or "default",
                            labels={"app.kubernetes.io/managed-by": "trainadmit"})
    ctx.companions.append(full)


def _coscheduling(ctx: Context, minimum: int, source: Source) -> None:
    w, r = ctx.workload, ctx.resolved
    name = _need_name(ctx, "the PodGroup")
    if name is None:
        return
    keep_or_set(ctx, (*w.templates[0].meta_path, "labels", POD_GROUP_LABEL), name, source)
    pg: dict = {"minMember": minimum}
    if r.gpu_resource and r.total_gpus:
        pg["minResources"] = {r.gpu_resource: str(r.total_gpus)}
    timeout = ctx.policy.platform.gang.scheduleTimeoutSeconds
    if timeout:
        pg["scheduleTimeoutSeconds"] = timeout
    _companion(ctx, {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": {"name": name},
                     "spec": pg}, source)


def _volcano(ctx: Context, minimum: int, source: Source) -> None:
    w, r = ctx.workload, ctx.resolved
    keep_or_set(ctx, ("metadata", "annotations", VOLCANO_MIN_MEMBER), str(minimum), source)
    _queue(ctx, (*w.templates[0].meta_path, "annotations", VOLCANO_QUEUE), r.queue or "default")


def _kueue(ctx: Context, source: Source) -> None:
    w, r = ctx.workload, ctx.resolved
    if JOBSET_NAME in w.labels:
        # Kueue manages JobSets as a whole; a queue label on a child Job would split the workload.
        return
    _queue(ctx, ("metadata", "labels", KUEUE_QUEUE), r.queue or "default")
    ctx.inject(("spec", "suspend"), True, "gang",
               Source(source.kind, source.name, source.field, "kueue; Kueue unsuspends the Job once quota for all "
                                                             "pods is free"))


def _queue(ctx: Context, path: tuple, queue: str) -> None:
    current = ctx.patcher.get(path)
    if ctx.resolved.queue_explicit:
        source = Source("object", "", ("metadata", "labels", ctx.policy.keys.queue))
    else:
        source = ctx.platform_source("spec", "gang", "queue")
    if current is None or current == queue:
        ctx.inject(path, queue, "gang", source)
    else:
        ctx.conflict(Enforceable.queue, path, current, queue)


def _scheduler_name(ctx: Context) -> None:
    wanted = ctx.policy.scheduler_name
    if not wanted:
        return
    w = ctx.workload
    path = (*w.templates[0].spec_path, "schedulerName")
    current = ctx.patcher.get(path)
    if current in (None, "", "default-scheduler", wanted):
        if ctx.policy.platform.gang.schedulerName:
            source = ctx.platform_source("spec", "gang", "schedulerName")
        else:
            source = ctx.platform_source("spec", "gang", "backend", note=f"{backend_id(ctx)} schedules with {wanted}")
        ctx.inject(path, wanted, "gang", source)
    else:
        ctx.conflict(Enforceable.schedulerName, path, current, wanted)
        if not ctx.enforced(Enforceable.schedulerName):
            ctx.report(FOREIGN_BACKEND, field_path(path),
                       f"schedulerName {current!r} is kept as you set it, but the {backend_id(ctx)} gang needs "
                       f"{wanted!r}; the gang will not form under another scheduler", f"set schedulerName: {wanted}")


def colocation_method(ctx: Context) -> str:
    gang = ctx.policy.platform.gang
    if gang.topologyMethod != "auto":
        return gang.topologyMethod
    return {GangBackend.native: "native", GangBackend.kueue: "kueue"}.get(gang.backend, "podAffinity")


CONCERN = Concern("gang", rules=(COMPLETION_MODE, PARALLELISM_COMPLETIONS, NAME_REQUIRED, FOREIGN_BACKEND,
                                 CLUSTER_SUPPORT, MEMBERSHIP_LOST, POD_LEVEL), mutate=mutate, validate=validate)
