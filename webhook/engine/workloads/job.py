"""batch/v1 Job: one template, ``parallelism`` Pods at once, all of them the gang.

Defaults as the apiserver applies them (pkg/apis/batch/v1/defaults.go): parallelism 1; completions
1 only when both are unset; completionMode NonIndexed; suspend false.

Gangs: native 1.37 ``Job.spec.scheduling.schedulingPolicy.gang.minCount`` (the Job controller builds the
Workload and PodGroup) or, in ``pod-group`` mode, ``schedulingGroup`` on the template plus a PodGroup from
trainadmit's reconciler; coscheduling's label + PodGroup (reconciler); Volcano's
``scheduling.volcano.sh/group-min-member`` on the Job (Volcano's pg-controller builds the PodGroup); Kueue's
queue label and ``suspend: true``. A gang Job runs all ranks at once, each with a stable rank: Indexed,
parallelism = completions.
"""

from __future__ import annotations

from functools import lru_cache

from ..backends import KAI_BATCH_MIN_MEMBER, KAI_QUEUE, VOLCANO_MIN_MEMBER, VOLCANO_QUEUE
from ..paths import Path, as_dict, get_path
from .base import (
    KAI_PODGROUPER,
    NATIVE_JOB_SCHEDULING,
    NATIVE_POD_GROUP,
    Adapter,
    FieldType,
    Follow,
    Gang,
    GangFields,
    GangMethod,
    GangShapeProblem,
    Scale,
    TemplateSpec,
    count,
    kube_controller,
)

JOB_TEMPLATE = ("spec", "template")
PARALLELISM = ("spec", "parallelism")
COMPLETIONS = ("spec", "completions")
JOB_RUN_LABEL = "batch.kubernetes.io/controller-uid"  # the Job controller's label: unique to one run of a Job
SCALE = Scale((PARALLELISM,), (COMPLETIONS,))


def parallelism(obj: dict) -> int:
    return count(get_path(obj, PARALLELISM), 1)


def completions(obj: dict) -> int | None:
    spec = as_dict(obj.get("spec"))
    value = spec.get("completions")
    if value is None:
        return 1 if spec.get("parallelism") is None else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def completion_mode(obj: dict) -> str:
    mode = get_path(obj, ("spec", "completionMode"))
    return mode if isinstance(mode, str) else "NonIndexed"


@lru_cache(maxsize=256)
def _template(pods: int) -> TemplateSpec:
    """A Job's one template spec with ``pods`` Pods. Every view of every Job asks for it (several times a decision),
    and it depends on nothing else: a TemplateSpec is frozen, so one per count is shared."""
    return TemplateSpec(JOB_TEMPLATE, "worker", pods, True, "spec.template", SCALE)


class JobAdapter(Adapter):
    group, versions, kind, plural = "batch", ("v1",), "Job", "jobs"
    operator = "the Job controller"
    gangs = {
        NATIVE_JOB_SCHEDULING: Gang(GangMethod.spec, path=("spec", "scheduling"), scheduler_name=True),
        NATIVE_POD_GROUP: Gang(GangMethod.templates),
        "coscheduling": Gang(GangMethod.templates),
        "volcano": Gang(GangMethod.fields, GangFields(
            size=("metadata", "annotations", VOLCANO_MIN_MEMBER),
            queue=(*JOB_TEMPLATE, "metadata", "annotations", VOLCANO_QUEUE),
            reads="Volcano's pg-controller"), scheduler_name=True, resize=Follow.never,
            resize_reason="Volcano's pg-controller builds a batch Job's PodGroup once, from the Job's "
                          f"{VOLCANO_MIN_MEMBER} annotation when its first Pod appears, and never updates it "
                          "(pkg/controllers/podgroup)"),
        "kueue": Gang(GangMethod.kueue, suspend=("spec", "suspend"), scheduler_name=True),
        # KAI's podgrouper gives a Job minMember 1 unless the Job carries the batch-min-member annotation
        "kai": Gang(GangMethod.fields, GangFields(size=("metadata", "annotations", KAI_BATCH_MIN_MEMBER),
                                                  queue=("metadata", "labels", KAI_QUEUE), reads=KAI_PODGROUPER),
                    scheduler_name=True),
    }
    pods_label = "batch.kubernetes.io/job-name"
    run_label = JOB_RUN_LABEL
    template_patterns = (JOB_TEMPLATE,)
    required = (("spec",),)
    field_types = (FieldType(("spec", "completionMode"), str, "a string"),
                   FieldType(("spec", "suspend"), bool, "a boolean"), FieldType(JOB_TEMPLATE, dict, "a map"))
    controllers = kube_controller("job-controller")  # as the apiserver's audit log shows it

    def templates(self, obj: dict) -> list[TemplateSpec]:
        return [_template(parallelism(obj))]

    def template_roots(self, obj: dict) -> list[Path]:
        return [JOB_TEMPLATE]

    def gang_shape(self, obj: dict, workers: int) -> list[GangShapeProblem]:
        mode, parallel, done = completion_mode(obj), parallelism(obj), completions(obj)
        out = []
        if mode != "Indexed":
            out.append(GangShapeProblem(
                "completion-mode", "spec.completionMode",
                f"a gang Job needs completionMode Indexed so each of its {workers} workers gets a stable rank, "
                f"got {mode}", "set spec.completionMode: Indexed", ((("spec", "completionMode"), "Indexed"),)))
        if done != parallel:
            out.append(GangShapeProblem(
                "parallelism-completions", "spec.completions",
                f"parallelism {parallel} and completions {done if done is not None else '(unset)'} differ: "
                "a gang runs all ranks at once", f"set spec.completions: {parallel}", ((COMPLETIONS, parallel),)))
        return out
