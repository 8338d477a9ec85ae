"""KubeRay: RayCluster and RayJob (ray.io/v1).

Templates: the head (``headGroupSpec.template``) and each worker group (``workerGroupSpecs[].template``),
under ``spec.rayClusterSpec`` for a RayJob, plus the RayJob's submitter Pod (``submitterPodTemplate``,
in K8sJobMode, the default), which is outside the gang. A worker group yields
``clamp(replicas, minReplicas, maxReplicas) * numOfHosts`` Pods, 0 when suspended (CRD defaults:
replicas 0, numOfHosts 1). The gang scheduler is the operator's ``--batch-scheduler`` flag; for
scheduler-plugins only CRs labelled ``ray.io/gang-scheduling-enabled`` get a PodGroup; for Volcano the
queue and priority come from the CR labels ``volcano.sh/queue-name`` and ``ray.io/priority-class-name``
(ray-operator/controllers/ray/batchscheduler/{volcano,scheduler-plugins}/). There is no longer a
``ray.io/scheduler-name`` label (removed upstream, PR #4305). On a resize the Volcano plugin updates its
PodGroup's ``minMember`` and ``minResources`` on the next sync; the scheduler-plugins plugin creates its PodGroup
once and never updates it. The operator runs as ServiceAccount ``kuberay-operator``, in ``ray-system`` (its
kustomize install) or ``default`` (its Helm quick start).
"""

from __future__ import annotations

from ..paths import Path, as_dict, as_list, get_path
from .base import NATIVE_POD_GROUP, Adapter, Follow, Gang, GangFields, GangMethod, Scale, TemplateSpec, count, kai_gang

# only the operator's own namespace: an admin of `default` could mint `default:kuberay-operator` (a policy whose
# KubeRay runs elsewhere names it in Platform.spec.controllers, in a namespace only the platform team administers)
KUBERAY = ("system:serviceaccount:ray-system:kuberay-operator",)

_GANGS = {
    NATIVE_POD_GROUP: Gang(GangMethod.templates),
    "coscheduling": Gang(GangMethod.fields, GangFields(switch=(("metadata", "labels", "ray.io/gang-scheduling-enabled"),
                                                               "true"),
                                                       reads="kuberay-operator --batch-scheduler=scheduler-plugins"),
                         resize=Follow.never,
                         resize_reason="KubeRay creates the scheduler-plugins PodGroup once and never updates it "
                                       "(batchscheduler/scheduler-plugins)"),
    "volcano": Gang(GangMethod.fields, GangFields(queue=("metadata", "labels", "volcano.sh/queue-name"),
                                                  priority=("metadata", "labels", "ray.io/priority-class-name"),
                                                  reads="kuberay-operator --batch-scheduler=volcano")),
    "kueue": Gang(GangMethod.kueue, suspend=("spec", "suspend")),
    "kai": kai_gang("the head + each worker group's minReplicas (else replicas) × numOfHosts"),
}


def _cluster_templates(obj: dict, base: Path) -> list[TemplateSpec]:
    cluster = as_dict(get_path(obj, base))
    out = []
    if isinstance(get_path(cluster, ("headGroupSpec", "template")), dict):
        out.append(TemplateSpec((*base, "headGroupSpec", "template"), "head", 1, True, "headGroupSpec"))
    for i, group in enumerate(as_list(cluster.get("workerGroupSpecs"))):
        if not isinstance(group, dict) or not isinstance(group.get("template"), dict):
            continue
        replicas = count(group.get("replicas"), 0)
        low, high = count(group.get("minReplicas"), 0), count(group.get("maxReplicas"), 2147483647)
        pods = 0 if group.get("suspend") is True else min(max(replicas, low), high) * count(group.get("numOfHosts"), 1)
        name = group.get("groupName") if isinstance(group.get("groupName"), str) else str(i)
        group_path = (*base, "workerGroupSpecs", i)
        out.append(TemplateSpec((*group_path, "template"), "worker", pods, True, f"workerGroupSpecs[{name}]",
                                Scale(((*group_path, "replicas"), (*group_path, "numOfHosts")),
                                      bounds=((*group_path, "minReplicas"), (*group_path, "maxReplicas")))))
    return out


def _submitter(obj: dict) -> bool:
    """A RayJob in K8sJobMode (the CRD default) submits from a Job of its own."""
    return get_path(obj, ("spec", "submissionMode"), "K8sJobMode") == "K8sJobMode"


class RayClusterAdapter(Adapter):
    group, versions, kind, plural = "ray.io", ("v1",), "RayCluster", "rayclusters"
    operator = "the KubeRay operator"
    gangs = _GANGS
    pods_label = "ray.io/cluster"
    controllers = KUBERAY
    template_patterns = (("spec", "headGroupSpec", "template"), ("spec", "workerGroupSpecs", "[]", "template"))

    def templates(self, obj: dict) -> list[TemplateSpec]:
        return _cluster_templates(obj, ("spec",))

    def child_labels(self) -> tuple[str, ...]:
        return ("ray.io/cluster", "ray.io/node-type")


class RayJobAdapter(Adapter):
    group, versions, kind, plural = "ray.io", ("v1",), "RayJob", "rayjobs"
    operator = "the KubeRay operator"
    gangs = _GANGS
    controllers = KUBERAY
    pods_label = None  # its RayCluster's name is generated: trainadmit labels the templates itself
    template_patterns = (("spec", "rayClusterSpec", "headGroupSpec", "template"),
                         ("spec", "rayClusterSpec", "workerGroupSpecs", "[]", "template"),
                         ("spec", "submitterPodTemplate"))

    def templates(self, obj: dict) -> list[TemplateSpec]:
        out = _cluster_templates(obj, ("spec", "rayClusterSpec"))
        if _submitter(obj) and isinstance(get_path(obj, ("spec", "submitterPodTemplate")), dict):
            out.append(TemplateSpec(("spec", "submitterPodTemplate"), "submitter", 1, False, "submitterPodTemplate"))
        return out

    untemplated_role = "submitter"

    def untemplated_pods(self, obj: dict) -> int:
        """Without submitterPodTemplate, K8sJobMode still runs KubeRay's default submitter Pod."""
        return 1 if _submitter(obj) and not isinstance(get_path(obj, ("spec", "submitterPodTemplate")), dict) else 0

    def child_labels(self) -> tuple[str, ...]:
        return ("ray.io/originated-from-cr-name", "ray.io/originated-from-crd")
