"""batch/v1 Job: one template, ``parallelism`` Pods at once, all of them the gang.

Defaults as the apiserver applies them (pkg/apis/batch/v1/defaults.go): parallelism 1; completions
1 only when both are unset; completionMode NonIndexed; suspend false.
"""

from __future__ import annotations

from ..paths import as_dict, get_path
from .base import Adapter, Gang, GangMethod, TemplateSpec, count

JOB_TEMPLATE = ("spec", "template")


def parallelism(obj: dict) -> int:
    return count(get_path(obj, ("spec", "parallelism")), 1)


def completions(obj: dict) -> int | None:
    spec = as_dict(obj.get("spec"))
    value = spec.get("completions")
    if value is None:
        return 1 if spec.get("parallelism") is None else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def completion_mode(obj: dict) -> str:
    mode = get_path(obj, ("spec", "completionMode"))
    return mode if isinstance(mode, str) else "NonIndexed"


class JobAdapter(Adapter):
    group, versions, kind, plural = "batch", ("v1",), "Job", "jobs"
    operator = "the Job controller"
    gangs = {b: Gang(GangMethod.job) for b in ("native", "coscheduling", "volcano", "kueue")}
    pods_label = "batch.kubernetes.io/job-name"
    template_patterns = (JOB_TEMPLATE,)

    def templates(self, obj: dict) -> list[TemplateSpec]:
        return [TemplateSpec(JOB_TEMPLATE, "worker", parallelism(obj), True, "spec.template")]
