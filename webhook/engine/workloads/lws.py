"""LeaderWorkerSet (leaderworkerset.x-k8s.io/v1): ``replicas`` groups of ``size`` Pods, one gang per group.

Templates: ``spec.leaderWorkerTemplate.leaderTemplate`` (optional; without it leaders use the worker
template) and ``workerTemplate``. A leader StatefulSet owns the leaders; each leader owns a worker
StatefulSet with ``size - 1`` Pods. LWS forms gangs only with ``gangSchedulingManagement.
schedulerProvider: volcano`` in its own configuration: one Volcano PodGroup per group, ``minMember =
size``, queue from the LWS annotation ``scheduling.volcano.sh/queue-name``; ``schedulerName: volcano``
must be in the templates (pkg/schedulerprovider/volcano_provider.go). A native or coscheduling gang
would need a PodGroup name per group, which one shared template cannot carry.
"""

from __future__ import annotations

from ..paths import get_path
from .base import Adapter, Gang, GangFields, GangMethod, TemplateSpec, count

_PER_GROUP = ("a gang per group needs a PodGroup name per group, which LeaderWorkerSet's one shared template "
              "cannot carry")


class LeaderWorkerSetAdapter(Adapter):
    group, versions, kind, plural = "leaderworkerset.x-k8s.io", ("v1",), "LeaderWorkerSet", "leaderworkersets"
    operator = "the LeaderWorkerSet controller"
    kueue_suspend = None  # Kueue gates the Pods of each group itself
    gangs = {
        "native": Gang(GangMethod.unsupported, reason=_PER_GROUP),
        "coscheduling": Gang(GangMethod.unsupported, reason=_PER_GROUP),
        "volcano": Gang(GangMethod.fields, GangFields(
            queue=("metadata", "annotations", "scheduling.volcano.sh/queue-name"), scheduler_on_templates=True,
            reads="LWS config gangSchedulingManagement.schedulerProvider: volcano")),
        "kueue": Gang(GangMethod.kueue),
    }
    pods_label = "leaderworkerset.sigs.k8s.io/name"
    group_label = "leaderworkerset.sigs.k8s.io/group-index"
    template_patterns = (("spec", "leaderWorkerTemplate", "leaderTemplate"),
                         ("spec", "leaderWorkerTemplate", "workerTemplate"))

    def templates(self, obj: dict) -> list[TemplateSpec]:
        base = ("spec", "leaderWorkerTemplate")
        groups = count(get_path(obj, ("spec", "replicas")), 1)
        size = max(count(get_path(obj, (*base, "size")), 1), 1)
        out = []
        has_leader = isinstance(get_path(obj, (*base, "leaderTemplate")), dict)
        if has_leader:
            out.append(TemplateSpec((*base, "leaderTemplate"), "leader", groups, True, "leaderTemplate"))
        if isinstance(get_path(obj, (*base, "workerTemplate")), dict):
            workers = groups * (size - 1 if has_leader else size)
            out.append(TemplateSpec((*base, "workerTemplate"), "worker", workers, True, "workerTemplate"))
        return out

    def gang_size(self, obj: dict, templates: list[TemplateSpec]) -> int:
        return max(count(get_path(obj, ("spec", "leaderWorkerTemplate", "size")), 1), 1)
