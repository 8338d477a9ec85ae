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

from ..paths import Path, as_list, get_path
from .base import NATIVE_POD_GROUP, Adapter, Gang, GangFields, GangMethod, Scale, TemplateSpec, count

MIN_AVAILABLE = ("spec", "minAvailable")

_FIELDS = GangFields(size=("spec", "minAvailable"), queue=("spec", "queue"), queue_crd_default="default",
                     priority=("spec", "priorityClassName"),
                     reads="Volcano's job controller (always)")
_ALWAYS = Gang(GangMethod.fields, _FIELDS, formed_by="volcano")


def _task_minimum(task: dict) -> int:
    """A task's gang minimum as Volcano's webhook defaults it: its own minAvailable, else its replicas."""
    own = task.get("minAvailable")
    return own if isinstance(own, int) and not isinstance(own, bool) and own >= 0 else count(task.get("replicas"), 1)


class VolcanoJobAdapter(Adapter):
    group, versions, kind, plural = "batch.volcano.sh", ("v1alpha1",), "Job", "jobs"
    operator = "Volcano's job controller"
    gangs = {NATIVE_POD_GROUP: _ALWAYS, "coscheduling": _ALWAYS, "volcano": _ALWAYS, "kai": _ALWAYS,
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

    defaulted_by = "Volcano's admission webhook"

    def own_minimums(self, obj: dict) -> list[tuple[Path, Path, int, int]]:
        """Each task's own ``minAvailable``: how many of its Pods Volcano's gang holds together (0: none)."""
        out = []
        for i, task in enumerate(as_list(get_path(obj, ("spec", "tasks")))):
            own = task.get("minAvailable") if isinstance(task, dict) else None
            if isinstance(own, int) and not isinstance(own, bool) and isinstance(task.get("template"), dict):
                out.append((("spec", "tasks", i, "minAvailable"), ("spec", "tasks", i, "template"), own,
                            count(task.get("replicas"), 1)))
        return out

    def counts_with(self, obj: dict, values: dict[Path, int]) -> dict[Path, int]:
        """Volcano's admission refuses a task whose ``minAvailable`` exceeds its ``replicas`` and a job whose
        ``minAvailable`` exceeds its tasks' replicas together (pkg/webhooks/admission/jobs/validate/admit_job.go):
        a task's minimum comes down with its replicas, and the job's with their sum (a job-wide minimum that held
        every replica keeps holding every replica)."""
        out = super().counts_with(obj, values)
        tasks = as_list(get_path(obj, ("spec", "tasks")))
        before = after = 0
        for i, task in enumerate(tasks):
            if not isinstance(task, dict):
                continue
            replicas = count(task.get("replicas"), 1)
            new = out.get(("spec", "tasks", i, "replicas"), replicas)
            before, after = before + replicas, after + new
            own = task.get("minAvailable")
            if isinstance(own, int) and not isinstance(own, bool) and own > new:
                out[("spec", "tasks", i, "minAvailable")] = new
        minimum = get_path(obj, MIN_AVAILABLE)
        if isinstance(minimum, int) and not isinstance(minimum, bool) and minimum > 0 and after != before and (
                minimum == before or minimum > after):
            out[MIN_AVAILABLE] = after
        return out

    def gang_size(self, obj: dict, templates: list[TemplateSpec]) -> int:
        minimum = count(get_path(obj, ("spec", "minAvailable")), 0)
        defaulted = self.defaulted_gang_size(obj)
        return defaulted[0] if defaulted is not None else minimum

    def defaulted_gang_size(self, obj: dict) -> tuple[int, str] | None:
        """Unset or 0, ``spec.minAvailable`` becomes the sum of the tasks' minimums (each task's minAvailable,
        else its replicas): Volcano's mutating webhook (docs/design/min-avaiable-member-resource.md)."""
        if count(get_path(obj, ("spec", "minAvailable")), 0) != 0:
            return None
        tasks = [t for t in as_list(get_path(obj, ("spec", "tasks"))) if isinstance(t, dict)]
        terms = []
        for i, task in enumerate(tasks):
            name = task.get("name") if isinstance(task.get("name"), str) else str(i)
            own = "minAvailable " if isinstance(task.get("minAvailable"), int) else ""
            terms.append(f"tasks[{name}] {own}{_task_minimum(task)}")
        total = sum(_task_minimum(t) for t in tasks)
        return total, f"{' + '.join(terms) or 'no tasks'} = {total}"
