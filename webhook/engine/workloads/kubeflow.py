"""Kubeflow: PyTorchJob, MPIJob, TFJob and PaddleJob (training-operator v1, kubeflow.org/v1) and MPIJob
v2beta1 (mpi-operator).

Templates: ``spec.<x>ReplicaSpecs.<Type>.template``, one Pod per replica (``<job>-<type>-<i>``); ``replicas``
defaults to 1 (MPIJob: Launcher 1, Worker 0). TFJob's types are PS, Worker, Chief, Master and Evaluator,
PaddleJob's Master and Worker.
Gangs: the operators form one when started with ``--gang-scheduler-name`` (training-operator:
``volcano`` or ``scheduler-plugins``) or ``--gang-scheduling`` (mpi-operator); the PodGroup is named
after the job and filled from ``spec.runPolicy.schedulingPolicy`` (``minAvailable`` defaults to all
replicas, v2beta1: workers + 1; ``queue``; ``priorityClass``). Kueue queues them with its label and
``spec.runPolicy.suspend``. On every sync both operators rebuild their PodGroup from ``minAvailable`` (else
the replicas' sum) and update it when it differs, so a resize reaches the gang through ``minAvailable``.
The training operator runs as ServiceAccount ``kubeflow/training-operator`` (its standalone install), the MPI
operator as ``mpi-operator/mpi-operator``. Sources: ``fixtures/operators/README.md``;
kubeflow/trainer@release-1.9 ``pkg/controller.v1/common/job.go`` (``ReconcileJobs``, ``SyncPodGroup``);
kubeflow/mpi-operator ``pkg/controller/podgroup.go``.
"""

from __future__ import annotations

from ..paths import Path, as_dict, get_path, with_values
from .base import NATIVE_POD_GROUP, Adapter, Gang, GangFields, GangMethod, Scale, TemplateSpec, count, kai_gang

POLICY = ("spec", "runPolicy", "schedulingPolicy")
RUN_POLICY_SUSPEND = ("spec", "runPolicy", "suspend")
ELASTIC = ("spec", "elasticPolicy")
TRAINING_OPERATOR = "training-operator --gang-scheduler-name"
KAI_KUBEFLOW_SIZE = "spec.runPolicy.schedulingPolicy.minAvailable, else every replica"
TRAINING_OPERATOR_ACCOUNT = "system:serviceaccount:kubeflow:training-operator"


def _replica_templates(obj: dict, field: str, defaults: dict[str, int]) -> list[TemplateSpec]:
    specs = as_dict(get_path(obj, ("spec", field)))
    out = []
    for key, replica in specs.items():
        if not isinstance(replica, dict) or not isinstance(replica.get("template"), dict):
            continue
        pods = count(replica.get("replicas"), defaults.get(key.capitalize(), 1))
        out.append(TemplateSpec(("spec", field, key, "template"), key.lower(), pods, True, f"{field}.{key}",
                                Scale((("spec", field, key, "replicas"),))))
    return out


def _fields(queue: bool, priority: bool, reads: str) -> GangFields:
    return GangFields(size=(*POLICY, "minAvailable"), queue=(*POLICY, "queue") if queue else None,
                      priority=(*POLICY, "priorityClass") if priority else None, reads=reads)


def _training_operator_gangs(kai: Gang | None = None) -> dict[str, Gang]:
    """The training operator's gangs, the same for each of its kinds that Kueue integrates; KAI's podgrouper
    groups each kind by its own minimum (``kai``: the kind's, when it differs)."""
    return {
        NATIVE_POD_GROUP: Gang(GangMethod.templates),
        "coscheduling": Gang(GangMethod.fields, _fields(False, False, f"{TRAINING_OPERATOR}=scheduler-plugins")),
        "volcano": Gang(GangMethod.fields, _fields(True, True, f"{TRAINING_OPERATOR}=volcano")),
        "kueue": Gang(GangMethod.kueue, suspend=RUN_POLICY_SUSPEND),
        "kai": kai or kai_gang(KAI_KUBEFLOW_SIZE),
    }


def _elastic_gang_size(obj: dict, templates: list[TemplateSpec]) -> int:
    """An elastic job gangs its minimum (the other roles + elasticPolicy.minReplicas workers), not its current
    size, or it could never shrink below the gang nor start with fewer workers; 0 when it is not elastic."""
    minimum = as_dict(get_path(obj, ELASTIC)).get("minReplicas")
    if isinstance(minimum, int) and not isinstance(minimum, bool) and minimum >= 1:
        return sum(t.pods for t in templates if t.role != "worker") + minimum
    return 0


class _KubeflowAdapter(Adapter):
    """What the training operators' kinds share: Pods labelled with the job's name, templates under
    ``<replicas_field>``."""

    replicas_field: str
    default_replicas: dict[str, int]
    pods_label = "training.kubeflow.org/job-name"

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        cls.template_patterns = (("spec", cls.replicas_field, "*", "template"),)

    def templates(self, obj: dict) -> list[TemplateSpec]:
        return _replica_templates(obj, self.replicas_field, self.default_replicas)

    def child_labels(self) -> tuple[str, ...]:
        return (self.pods_label, "training.kubeflow.org/operator-name")

    def counts_with(self, obj: dict, values: dict[Path, int]) -> dict[Path, int]:
        """``runPolicy.schedulingPolicy.minAvailable`` is the gang the operator builds its PodGroup from: one larger
        than the job's Pods never starts, and one that held every Pod keeps holding every Pod."""
        out = super().counts_with(obj, values)
        minimum = get_path(obj, (*POLICY, "minAvailable"))
        if isinstance(minimum, int) and not isinstance(minimum, bool) and minimum > 0:
            before = sum(t.pods for t in self.templates(obj))
            after = sum(t.pods for t in self.templates(with_values(obj, out)))
            if after != before and (minimum == before or minimum > after):
                out[(*POLICY, "minAvailable")] = after
        return out


def _elastic_counts(obj: dict, field: str, out: dict[Path, int]) -> dict[Path, int]:
    """An elastic job's workers stay within ``elasticPolicy.minReplicas`` and ``maxReplicas`` (the operator scales
    them between the two): the bounds widen to hold a new Worker count."""
    workers = out.get(("spec", field, "Worker", "replicas"))
    policy = as_dict(get_path(obj, ELASTIC))
    if workers is None or not policy:
        return out
    low, high = policy.get("minReplicas"), policy.get("maxReplicas")
    if isinstance(low, int) and not isinstance(low, bool) and low > workers:
        out[(*ELASTIC, "minReplicas")] = workers
    if isinstance(high, int) and not isinstance(high, bool) and high < workers:
        out[(*ELASTIC, "maxReplicas")] = workers
    return out


SLOTS_PER_WORKER = ("spec", "slotsPerWorker")


def _slots(obj: dict, root: Path, before: int, after: int) -> dict[Path, object]:
    """An MPIJob's ``slotsPerWorker`` is the MPI ranks of each worker, one per GPU when it equals the worker's GPUs:
    it follows them."""
    slots = get_path(obj, SLOTS_PER_WORKER)
    if root == ("spec", "mpiReplicaSpecs", "Worker", "template") and slots == before:
        return {SLOTS_PER_WORKER: after}
    return {}


class PyTorchJobAdapter(_KubeflowAdapter):
    group, versions, kind, plural = "kubeflow.org", ("v1",), "PyTorchJob", "pytorchjobs"
    operator = "the Kubeflow training operator"
    gangs = _training_operator_gangs(kai_gang(KAI_KUBEFLOW_SIZE + "; elastic: Master + elasticPolicy.minReplicas"))
    replicas_field, default_replicas = "pytorchReplicaSpecs", {"Master": 1, "Worker": 1}
    scale_path = ("spec", "pytorchReplicaSpecs", "Worker", "replicas")
    counts = ((*ELASTIC, "minReplicas"), (*ELASTIC, "maxReplicas"))
    controllers = (TRAINING_OPERATOR_ACCOUNT,)

    def gang_size(self, obj: dict, templates: list[TemplateSpec]) -> int:
        return _elastic_gang_size(obj, templates) or super().gang_size(obj, templates)

    def counts_with(self, obj: dict, values: dict[Path, int]) -> dict[Path, int]:
        return _elastic_counts(obj, self.replicas_field, super().counts_with(obj, values))


class MPIJobV1Adapter(_KubeflowAdapter):
    group, versions, kind, plural = "kubeflow.org", ("v1",), "MPIJob", "mpijobs"
    operator = "the Kubeflow training operator"
    gangs = {
        NATIVE_POD_GROUP: Gang(GangMethod.templates),
        "coscheduling": Gang(GangMethod.fields, _fields(False, False, f"{TRAINING_OPERATOR}=scheduler-plugins")),
        "volcano": Gang(GangMethod.fields, _fields(True, True, f"{TRAINING_OPERATOR}=volcano")),
        # Kueue's MPIJob integration is built on v2beta1 and claims only kubeflow.org/v2*
        "kueue": Gang(GangMethod.unsupported, reason="Kueue manages kubeflow.org/v2beta1 MPIJobs only"),
        "kai": kai_gang(KAI_KUBEFLOW_SIZE),
    }
    replicas_field, default_replicas = "mpiReplicaSpecs", {"Launcher": 1, "Worker": 0}
    controllers = (TRAINING_OPERATOR_ACCOUNT,)
    counts = (SLOTS_PER_WORKER,)

    def tied_to_gpus(self, obj: dict, root: Path, before: int, after: int) -> dict[Path, object]:
        return _slots(obj, root, before, after)


class MPIJobV2Adapter(_KubeflowAdapter):
    group, versions, kind, plural = "kubeflow.org", ("v2beta1",), "MPIJob", "mpijobs"
    operator = "the MPI operator"
    gangs = {
        NATIVE_POD_GROUP: Gang(GangMethod.unsupported,
                               reason="the v2beta1 MPIJob CRD's pod template has no schedulingGroup (a 1.35 PodSpec): "
                                      "the apiserver would prune it"),
        "coscheduling": Gang(GangMethod.fields, _fields(False, False, "mpi-operator --gang-scheduling=<name>")),
        "volcano": Gang(GangMethod.fields, _fields(True, True, "mpi-operator --gang-scheduling=volcano")),
        "kueue": Gang(GangMethod.kueue, suspend=RUN_POLICY_SUSPEND),
        "kai": kai_gang(KAI_KUBEFLOW_SIZE),
    }
    # the launcher is one batch/v1 Job's Pod; workers are Pods of the MPIJob
    replicas_field, default_replicas = "mpiReplicaSpecs", {"Launcher": 1, "Worker": 0}
    controllers = ("system:serviceaccount:mpi-operator:mpi-operator",)
    counts = (SLOTS_PER_WORKER,)

    def tied_to_gpus(self, obj: dict, root: Path, before: int, after: int) -> dict[Path, object]:
        return _slots(obj, root, before, after)


class TFJobAdapter(_KubeflowAdapter):
    """TensorFlow: PS, Worker, Chief, Master and Evaluator replicas, each ``replicas`` Pods (default 1)."""

    group, versions, kind, plural = "kubeflow.org", ("v1",), "TFJob", "tfjobs"
    operator = "the Kubeflow training operator"
    gangs = _training_operator_gangs()
    replicas_field, default_replicas = "tfReplicaSpecs", {}
    controllers = (TRAINING_OPERATOR_ACCOUNT,)


class PaddleJobAdapter(_KubeflowAdapter):
    """PaddlePaddle: Master and Worker replicas (default 1); an elastic PaddleJob gangs its minimum, as a
    PyTorchJob does."""

    group, versions, kind, plural = "kubeflow.org", ("v1",), "PaddleJob", "paddlejobs"
    scale_path = ("spec", "paddleReplicaSpecs", "Worker", "replicas")
    operator = "the Kubeflow training operator"
    # KAI's podgrouper has no PaddleJob grouper: its default one gives the PodGroup minMember 1 (KAI-Scheduler
    # pkg/podgrouper; fixtures/operators/kai/README.md)
    gangs = _training_operator_gangs(Gang(GangMethod.unsupported, reason="KAI's podgrouper has no PaddleJob grouper "
                                          "(its default one makes a PodGroup of minMember 1)"))
    replicas_field, default_replicas = "paddleReplicaSpecs", {}
    counts = ((*ELASTIC, "minReplicas"), (*ELASTIC, "maxReplicas"))
    controllers = (TRAINING_OPERATOR_ACCOUNT,)

    def gang_size(self, obj: dict, templates: list[TemplateSpec]) -> int:
        return _elastic_gang_size(obj, templates) or super().gang_size(obj, templates)

    def counts_with(self, obj: dict, values: dict[Path, int]) -> dict[Path, int]:
        return _elastic_counts(obj, self.replicas_field, super().counts_with(obj, values))
