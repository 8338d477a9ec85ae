"""Kubeflow Trainer's TrainingRuntime and ClusterTrainingRuntime: the JobSet template a TrainJob takes its Pods
from, and the Pods it yields for one TrainJob, as Trainer computes them.

A runtime's ``spec.template.spec.replicatedJobs[]`` each hold a Job template. Trainer sizes them for a TrainJob
(kubeflow/trainer ``pkg/runtime/core/trainingruntime.go`` ``newRuntimeInfo``, ``framework/plugins/torch``,
``plainml``, ``mpi``, ``jobset/builder.go``):

- the replicated job labelled ``trainer.kubeflow.org/trainjob-ancestor-step: trainer`` runs the runtime's
  ``spec.mlPolicy.numNodes`` Pods (its Job's ``parallelism`` without an mlPolicy), or, in a torch or plain
  runtime, the TrainJob's ``spec.trainer.numNodes``;
- in an MPI runtime the TrainJob's ``numNodes`` sizes the replicated job named ``node`` instead: ``numNodes``,
  or ``numNodes - 1`` (at least 1) when ``mpi.runLauncherAsNode`` makes the launcher one of the nodes;
- every other replicated job runs its Job's ``parallelism`` Pods (1 when unset) in each of its ``replicas``
  Jobs (1 for the initializers, which Trainer forces to one);
- ``spec.trainer.resourcesPerNode``, when it sets limits or requests, replaces the resources of every
  container named ``node`` (and ``launcher``, with runLauncherAsNode), and ``spec.trainer.env`` is upserted
  into their env.

A runtime is itself decided as a template (``InheritedTemplate``): never mutated, and its GPU templates must
pass the rules that do not depend on a TrainJob's size (pool, placement, RDMA, NCCL values, whole nodes for
its own node count). Its gang comes from ``spec.podGroupPolicy``, which trainadmit leaves alone.
"""

from __future__ import annotations

from ...grammars.lazydataclass import dataclass
from ..paths import Path, as_dict, as_list, get_path
from .base import NATIVE_POD_GROUP, Adapter, Gang, GangMethod, TemplateSpec, count

ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER = "trainer"  # the ancestor value of the replicated job Trainer sizes by numNodes
NODE, LAUNCHER = "node", "launcher"
REPLICATED_JOBS = ("spec", "template", "spec", "replicatedJobs")
ML_NUM_NODES = ("spec", "mlPolicy", "numNodes")
_TEMPLATE = "a runtime is a template: the TrainJobs that use it are the workloads, each forming its gang"


@dataclass(frozen=True)
class PodSet:
    """The Pods one replicated job of a runtime yields for one TrainJob."""

    index: int  # in spec.template.spec.replicatedJobs
    name: str
    ancestor: str | None  # trainer, dataset-initializer, model-initializer
    pods: int
    sized: bool  # the TrainJob's numNodes sizes it
    template: dict  # the Pod template, as the runtime holds it
    trainer_containers: frozenset[str]  # containers Trainer writes resourcesPerNode and env into

    @property
    def role(self) -> str:
        if self.sized or self.ancestor == TRAINER:
            return NODE
        return self.ancestor or self.name


def pod_sets(runtime: dict, trainer: dict | None = None) -> list[PodSet]:
    """The replicated jobs of ``runtime`` (a (Cluster)TrainingRuntime), sized for a TrainJob whose
    ``spec.trainer`` is ``trainer`` (None: the runtime alone, with its own mlPolicy)."""
    spec = as_dict(runtime.get("spec"))
    ml = as_dict(spec.get("mlPolicy"))
    mpi = ml.get("mpi")
    launcher_is_node = isinstance(mpi, dict) and mpi.get("runLauncherAsNode") is True
    wanted = as_dict(trainer).get("numNodes")
    nodes = wanted if isinstance(wanted, int) and not isinstance(wanted, bool) and wanted >= 0 else None
    writes = frozenset({NODE, LAUNCHER} if launcher_is_node else {NODE})
    out = []
    for i, rjob in enumerate(as_list(get_path(runtime, REPLICATED_JOBS))):
        if not isinstance(rjob, dict):
            continue
        name = rjob.get("name") if isinstance(rjob.get("name"), str) else f"#{i}"
        job = as_dict(rjob.get("template"))
        labels = as_dict(as_dict(job.get("metadata")).get("labels"))
        ancestor = labels.get(ANCESTOR) if isinstance(labels.get(ANCESTOR), str) else None
        job_spec = as_dict(job.get("spec"))
        parallelism = count(job_spec.get("parallelism"), 1)
        # the replicated job the TrainJob's numNodes sizes: MPI's node job, else the trainer's
        sized = name == NODE if isinstance(mpi, dict) else ancestor == TRAINER
        if ancestor == TRAINER:
            pods = count(ml.get("numNodes"), 1) if ml else parallelism
        elif ancestor is not None:  # an initializer: one Job
            pods = parallelism
        else:
            pods = parallelism * count(rjob.get("replicas"), 1)
        if sized and nodes is not None:
            pods = max(nodes - 1, 1) if isinstance(mpi, dict) and launcher_is_node else nodes
        template = as_dict(job_spec.get("template"))
        containers = {c.get("name") for c in as_list(as_dict(template.get("spec")).get("containers"))
                      if isinstance(c, dict)}
        out.append(PodSet(i, name, ancestor, pods, sized, template, frozenset(writes & containers)))
    return out


class RuntimeAdapter(Adapter):
    """A (Cluster)TrainingRuntime decided as the template it is: its replicated jobs' Pod templates, each
    with the Pods the runtime alone yields (its mlPolicy's node count)."""

    group, versions = "trainer.kubeflow.org", ("v1alpha1",)
    operator = "Kubeflow Trainer"
    inherited_by = "TrainJob"
    gangs = {NATIVE_POD_GROUP: Gang(GangMethod.unsupported, reason=_TEMPLATE),
             "coscheduling": Gang(GangMethod.unsupported, reason=_TEMPLATE),
             "volcano": Gang(GangMethod.unsupported, reason=_TEMPLATE),
             "kueue": Gang(GangMethod.unsupported, reason=_TEMPLATE)}
    template_patterns = ((*REPLICATED_JOBS, "[]", "template", "spec", "template"),)
    required = (("spec",),)

    def templates(self, obj: dict) -> list[TemplateSpec]:
        return [TemplateSpec(_root(s.index), s.role, s.pods, True, f"replicatedJobs[{s.index}] ({s.name})")
                for s in pod_sets(obj)]

    def template_roots(self, obj: dict) -> list[Path]:
        return [_root(i) for i, _ in enumerate(as_list(get_path(obj, REPLICATED_JOBS)))]

    def count_fields(self, obj: dict) -> list[Path]:
        """The counts its Pods are sized by: its own node count, and each replicated job's ``replicas`` and
        its Job's ``parallelism``."""
        found = [*super().count_fields(obj), ML_NUM_NODES]
        for i, _ in enumerate(as_list(get_path(obj, REPLICATED_JOBS))):
            found += [(*REPLICATED_JOBS, i, "replicas"), (*REPLICATED_JOBS, i, "template", "spec", "parallelism")]
        return found


def _root(index: int) -> Path:
    return (*REPLICATED_JOBS, index, "template", "spec", "template")


class TrainingRuntimeAdapter(RuntimeAdapter):
    kind, plural = "TrainingRuntime", "trainingruntimes"


class ClusterTrainingRuntimeAdapter(RuntimeAdapter):
    kind, plural, namespaced = "ClusterTrainingRuntime", "clustertrainingruntimes", False
