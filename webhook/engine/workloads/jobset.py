"""JobSet (jobset.x-k8s.io/v1alpha2): replicated batch Jobs that make one training job.

Templates: ``spec.replicatedJobs[].template.spec.template``; each replicated Job yields
``replicas`` (default 1) Jobs of ``parallelism`` (default 1) Pods at once. JobSet creates no PodGroup,
so trainadmit gangs the whole JobSet itself (one gang of every Pod, not one per child Job): the
backend's keys on every template and a PodGroup from its reconciler. The 1.37 ``Job.spec.scheduling``
cannot be used: the JobSet CRD's Job spec predates it and prunes it. Kueue queues a JobSet through its
label and ``spec.suspend``. The controller runs as ServiceAccount ``jobset-system/jobset-controller-manager``;
the Job controller creates the Pods of its Jobs.
"""

from __future__ import annotations

from ..paths import Path, as_list, get_path
from .base import NATIVE_POD_GROUP, Adapter, Gang, GangMethod, Scale, TemplateSpec, count, kai_gang

JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"


class JobSetAdapter(Adapter):
    group, versions, kind, plural = "jobset.x-k8s.io", ("v1alpha2",), "JobSet", "jobsets"
    operator = "the JobSet controller"
    gangs = {NATIVE_POD_GROUP: Gang(GangMethod.templates), "coscheduling": Gang(GangMethod.templates),
             "volcano": Gang(GangMethod.templates), "kueue": Gang(GangMethod.kueue, suspend=("spec", "suspend")),
             "kai": kai_gang("every replicatedJob's replicas × parallelism")}
    pods_label = JOBSET_NAME
    controllers = ("system:serviceaccount:jobset-system:jobset-controller-manager",)
    template_patterns = (("spec", "replicatedJobs", "[]", "template", "spec", "template"),)

    def templates(self, obj: dict) -> list[TemplateSpec]:
        out = []
        for i, rjob in enumerate(as_list(get_path(obj, ("spec", "replicatedJobs")))):
            if not isinstance(rjob, dict) or not isinstance(get_path(rjob, ("template", "spec", "template")), dict):
                continue
            parallelism = count(get_path(rjob, ("template", "spec", "parallelism")), 1)
            name = rjob.get("name") if isinstance(rjob.get("name"), str) else str(i)
            at = ("spec", "replicatedJobs", i)
            out.append(TemplateSpec((*at, "template", "spec", "template"), name,
                                    count(rjob.get("replicas"), 1) * parallelism, True, f"replicatedJobs[{name}]",
                                    Scale(((*at, "replicas"), (*at, "template", "spec", "parallelism")))))
        return out

    def counts_with(self, obj: dict, values: dict[Path, int]) -> dict[Path, int]:
        """A replicated Job whose completions equal its parallelism (every index at once: a gang's) keeps them equal
        when its parallelism changes."""
        out = super().counts_with(obj, values)
        for i, rjob in enumerate(as_list(get_path(obj, ("spec", "replicatedJobs")))):
            at = ("spec", "replicatedJobs", i, "template", "spec")
            new = out.get((*at, "parallelism"))
            spec = get_path(rjob, ("template", "spec")) if isinstance(rjob, dict) else None
            if new is not None and isinstance(spec, dict) and spec.get("completions") is not None \
                    and spec.get("completions") == count(spec.get("parallelism"), 1):
                out[(*at, "completions")] = new
        return out
