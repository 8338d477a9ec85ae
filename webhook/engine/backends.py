"""The keys of each gang mechanism, declared once: what trainadmit writes for a backend, what the plan
looks for to tell that an object already carries a gang (ours from a previous pass, or another's), and what
the adapters name in their gang tables. Sources: shared/reference/gang.md, fixtures/operators/README.md."""

from __future__ import annotations

POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"  # scheduler-plugins coscheduling
LEGACY_POD_GROUP_LABEL = "pod-group.scheduling.sigs.k8s.io"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
VOLCANO_MIN_MEMBER = "scheduling.volcano.sh/group-min-member"
VOLCANO_QUEUE = "scheduling.volcano.sh/queue-name"
KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
KUEUE_POD_GROUP = "kueue.x-k8s.io/pod-group-name"
KUEUE_PRIORITY = "kueue.x-k8s.io/priority-class"
KUEUE_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
SAKKARA_GROUP = "sakkara.group.name"
JOBSET_EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"
# NVIDIA KAI Scheduler: its podgrouper builds a PodGroup for every workload whose Pods name its scheduler, with the
# queue from this label on the top owner (else the Pod), the size of a batch/v1 Job from the annotation, and
# topology from the placement annotations (fixtures/operators/kai/README.md: KAI-Scheduler pkg/podgrouper)
KAI_SCHEDULER = "kai-scheduler"
KAI_QUEUE = "kai.scheduler/queue"
KAI_BATCH_MIN_MEMBER = "kai.scheduler/batch-min-member"
KAI_TOPOLOGY = "kai.scheduler/topology"
KAI_REQUIRED_PLACEMENT = "kai.scheduler/topology-required-placement"

KUEUE_PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
KAI_PREFERRED_PLACEMENT = "kai.scheduler/topology-preferred-placement"
# annotations with which a workload asks its gang scheduler for a topology itself (object or pod template)
TOPOLOGY_REQUESTS = (KUEUE_REQUIRED_TOPOLOGY, KUEUE_PREFERRED_TOPOLOGY, KAI_TOPOLOGY, KAI_REQUIRED_PLACEMENT,
                     KAI_PREFERRED_PLACEMENT)

# on a pod template: label -> the mechanism it belongs to
TEMPLATE_LABELS = ((POD_GROUP_LABEL, "coscheduling"), (LEGACY_POD_GROUP_LABEL, "coscheduling"),
                   (KUEUE_POD_GROUP, "kueue"), (SAKKARA_GROUP, "sakkara"), (KAI_QUEUE, "kai"))
# on the object itself: label -> mechanism
OBJECT_LABELS = ((KUEUE_QUEUE, "kueue"), (KAI_QUEUE, "kai"))
# a pod template's schedulerName -> the mechanism of a scheduler that forms gangs of its own
SCHEDULER_GANGS = ((KAI_SCHEDULER, "kai"),)
# on a pod template: annotation -> mechanism
TEMPLATE_ANNOTATIONS = ((VOLCANO_GROUP_ANNOTATION, "volcano"), (JOBSET_EXCLUSIVE, "jobset-exclusive"))


def native_podgroup_name(workload: str) -> str:
    """The native PodGroup trainadmit's reconciler creates for a workload, named in its templates' schedulingGroup:
    a schedulingGroup that names another PodGroup is the user's own gang."""
    return f"{workload}-gang"
