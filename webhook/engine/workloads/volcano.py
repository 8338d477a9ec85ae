"""Volcano Job (batch.volcano.sh/v1alpha1): always gang-scheduled by Volcano.

Templates: ``spec.tasks[].template``, ``replicas`` Pods each (``<job>-<task>-<i>``). Volcano's job
controller creates a PodGroup ``<job>-<uid>`` with ``minMember = spec.minAvailable`` (its webhook
defaults it to the tasks' total), ``queue = spec.queue`` and ``priorityClassName =
spec.priorityClassName``, and creates the Pods only once Volcano's scheduler moved that PodGroup
out of Pending: whatever the platform's backend, Volcano forms this gang
(pkg/controllers/job/job_controller_actions.go). Its kind is also ``Job``: only the apiVersion
tells it from a batch/v1 Job. Volcano's webhook lets an update change only ``replicas`` and ``minAvailable``,
and its job controller then updates the PodGroup (docs/design/job-scale-up-down.md). The controllers run as
ServiceAccount ``volcano-system/volcano-controllers`` (the Helm release ``volcano``).
"""

from __future__ import annotations

from ..paths import as_list, get_path
from .base import NATIVE_POD_GROUP, Adapter, Gang, GangFields, GangMethod, Scale, TemplateSpec, count

_FIELDS = GangFields(size=("spec", "minAvailable"), queue=("spec", "queue"), queue_crd_default="default",
                     priority=("spec", "priorityClassName"),
                     reads="Volcano's job controller (always)")
_ALWAYS = Gang(GangMethod.fields, _FIELDS)


class VolcanoJobAdapter(Adapter):
    group, versions, kind, plural = "batch.volcano.sh", ("v1alpha1",), "Job", "jobs"
    operator = "Volcano's job controller"
    gangs = {NATIVE_POD_GROUP: _ALWAYS, "coscheduling": _ALWAYS, "volcano": _ALWAYS,
             "kueue": Gang(GangMethod.unsupported, reason="Kueue has no Volcano Job integration")}
    pods_label = "volcano.sh/job-name"
    controllers = ("system:serviceaccount:volcano-system:volcano-controllers",)
    template_patterns = (("spec", "tasks", "[]", "template"),)

    def templates(self, obj: dict) -> list[TemplateSpec]:
        out = []
        for i, task in enumerate(as_list(get_path(obj, ("spec", "tasks")))):
            if not isinstance(task, dict) or not isinstance(task.get("template"), dict):
                continue
            name = task.get("name") if isinstance(task.get("name"), str) else str(i)
            out.append(TemplateSpec(("spec", "tasks", i, "template"), name, count(task.get("replicas"), 1), True,
                                    f"tasks[{name}]", Scale((("spec", "tasks", i, "replicas"),))))
        return out

    def gang_size(self, obj: dict, templates: list[TemplateSpec]) -> int:
        minimum = get_path(obj, ("spec", "minAvailable"))
        return count(minimum, 0) or super().gang_size(obj, templates)
