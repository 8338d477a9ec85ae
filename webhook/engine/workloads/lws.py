"""LeaderWorkerSet (leaderworkerset.x-k8s.io/v1): ``replicas`` groups of ``size`` Pods, one gang per group.

Templates: ``spec.leaderWorkerTemplate.leaderTemplate`` (optional; without it leaders use the worker
template) and ``workerTemplate``. A leader StatefulSet owns the leaders; each leader owns a worker
StatefulSet with ``size - 1`` Pods. LWS forms gangs only with ``gangSchedulingManagement.
schedulerProvider: volcano`` in its own configuration: one Volcano PodGroup per group, ``minMember =
size``, queue from the LWS annotation ``scheduling.volcano.sh/queue-name``; ``schedulerName: volcano``
must be in the templates (pkg/schedulerprovider/volcano_provider.go). A native or coscheduling gang
would need a PodGroup name per group, which one shared template cannot carry. A resize adds or removes
groups (``replicas``) or rolls the groups to a new revision (``size``), each with its own PodGroup. The
controller runs as ServiceAccount ``lws-system/lws-controller-manager``; the StatefulSet controller creates the
Pods of its StatefulSets from the LeaderWorkerSet's templates, with their provenance annotation.
"""

from __future__ import annotations

from ..backends import VOLCANO_QUEUE
from ..paths import as_dict, get_path
from .base import (
    NATIVE_POD_GROUP,
    Adapter,
    Gang,
    GangFields,
    GangMethod,
    Owner,
    Scale,
    TemplateSpec,
    count,
    kai_gang,
    kube_controller,
)

REPLICAS = ("spec", "replicas")
SIZE = ("spec", "leaderWorkerTemplate", "size")
_PER_GROUP = ("a gang per group needs a PodGroup name per group, which LeaderWorkerSet's one shared template "
              "cannot carry")


class LeaderWorkerSetAdapter(Adapter):
    group, versions, kind, plural = "leaderworkerset.x-k8s.io", ("v1",), "LeaderWorkerSet", "leaderworkersets"
    operator = "the LeaderWorkerSet controller"
    gangs = {
        NATIVE_POD_GROUP: Gang(GangMethod.unsupported, reason=_PER_GROUP),
        "coscheduling": Gang(GangMethod.unsupported, reason=_PER_GROUP),
        "volcano": Gang(GangMethod.fields, GangFields(
            queue=("metadata", "annotations", VOLCANO_QUEUE),
            reads="LWS config gangSchedulingManagement.schedulerProvider: volcano"), scheduler_name=True),
        "kueue": Gang(GangMethod.kueue),  # no suspend: Kueue gates the Pods of each group itself
        "kai": kai_gang("leaderWorkerTemplate.size"),
    }
    pods_label = "leaderworkerset.sigs.k8s.io/name"
    scale_path = REPLICAS
    controllers = ("system:serviceaccount:lws-system:lws-controller-manager",)
    intermediate_owners = (Owner(("apps/v1",), "StatefulSet", "statefulsets.apps",
                                 kube_controller("statefulset-controller"), decided=False),)
    group_label = "leaderworkerset.sigs.k8s.io/group-index"
    template_patterns = (("spec", "leaderWorkerTemplate", "leaderTemplate"),
                         ("spec", "leaderWorkerTemplate", "workerTemplate"))

    def templates(self, obj: dict) -> list[TemplateSpec]:
        base = ("spec", "leaderWorkerTemplate")
        groups = count(get_path(obj, REPLICAS), 1)
        size = max(count(get_path(obj, SIZE), 1), 1)
        out = []
        has_leader = isinstance(get_path(obj, (*base, "leaderTemplate")), dict)
        if has_leader:
            out.append(TemplateSpec((*base, "leaderTemplate"), "leader", groups, True, "leaderTemplate",
                                    Scale((REPLICAS,))))
        if isinstance(get_path(obj, (*base, "workerTemplate")), dict):
            workers = groups * (size - 1 if has_leader else size)
            out.append(TemplateSpec((*base, "workerTemplate"), "worker", workers, True, "workerTemplate",
                                    Scale((REPLICAS, SIZE))))
        return out

    def gang_size(self, obj: dict, templates: list[TemplateSpec]) -> int:
        return max(count(get_path(obj, SIZE), 1), 1)

    def counts_valid(self, obj: dict) -> bool:
        """LeaderWorkerSet's admission takes a group ``size`` of at least 1, and with a ``subGroupPolicy`` only one
        of at least its ``subGroupSize`` that it divides (or divides less the leader; with ``LeaderExcluded``, only
        that) (kubernetes-sigs/lws pkg/webhooks/leaderworkerset_webhook.go, ``validateUpdateSubGroupPolicy``)."""
        size = count(get_path(obj, SIZE), 1)
        policy = as_dict(get_path(obj, ("spec", "leaderWorkerTemplate", "subGroupPolicy")))
        sub = policy.get("subGroupSize")
        if size < 1:
            return False
        if not isinstance(sub, int) or isinstance(sub, bool) or sub < 1:
            return True
        if policy.get("type") == "LeaderExcluded":
            return size >= sub and (size - 1) % sub == 0
        return size >= sub and (size % sub == 0 or (size - 1) % sub == 0)
