"""Kubeflow Trainer v2 TrainJob (trainer.kubeflow.org/v1alpha1): no pod template of its own.

Its Pods come from a (Cluster)TrainingRuntime's JobSet template; a TrainJob changes them per job
through ``spec.trainer`` (``numNodes``, ``resourcesPerNode`` merged into the container named
``node``, ``env``) and ``spec.runtimePatches[]`` (a list keyed by ``manager``; each patch may touch
pod metadata and a restricted pod spec: nodeSelector, affinity, tolerations, volumes, and per
container volumeMounts and securityContext, but no container resources and no env for ``node``).
``podTemplateOverrides`` is gone (replaced by runtimePatches).

So trainadmit's view of a TrainJob is one template, role ``node``, at its own runtime patch
(manager ``trainadmit.io/admission``, replicated job ``node``), with the ``node`` container's
resources and env read from and written to ``spec.trainer``. Pods: ``spec.trainer.numNodes`` (the
runtime's ``mlPolicy.numNodes`` is unknown here: 1). Gangs come from the runtime's
``podGroupPolicy`` (coscheduling or Volcano), which a TrainJob cannot change; Kueue admits a
TrainJob through its queue label and ``spec.suspend``. PriorityClass is not patchable per job.
Sources: trainer.kubeflow.org_trainjobs.yaml; kubeflow/trainer pkg/runtime/core/trainingruntime.go.
"""

from __future__ import annotations

from functools import cached_property

from ..paths import Path, as_dict, as_list, field_path, get_path
from .base import NATIVE_POD_GROUP, Adapter, Gang, GangMethod, PodTemplate, Scale, TemplateSpec, count

MANAGER = "trainadmit.io/admission"
NUM_NODES = ("spec", "trainer", "numNodes")
NODE = "node"  # the trainer's replicated job and container, as Trainer's runtimes name them
_RUNTIME = "Trainer forms gangs from the TrainingRuntime's podGroupPolicy, which a TrainJob cannot change"


def _patch_index(obj: dict) -> int:
    patches = as_list(get_path(obj, ("spec", "runtimePatches")))
    for i, patch in enumerate(patches):
        if isinstance(patch, dict) and patch.get("manager") == MANAGER:
            return i
    return len(patches)


def _root(obj: dict) -> Path:
    return ("spec", "runtimePatches", _patch_index(obj), "trainingRuntimeSpec", "template", "spec", "replicatedJobs",
            0, "template", "spec", "template")


class TrainJobTemplate(PodTemplate):
    """The ``node`` Pods of a TrainJob: trainadmit's runtime patch, with the ``node`` container's
    resources and env from ``spec.trainer``."""

    @cached_property
    def pod_spec(self) -> dict:
        spec = dict(as_dict(get_path(self._obj, self.spec_path)))
        trainer = as_dict(get_path(self._obj, ("spec", "trainer")))
        patched = next((c for c in as_list(spec.get("containers")) if isinstance(c, dict) and c.get("name") == NODE),
                       {})
        node = {**patched, "name": NODE}
        if trainer.get("resourcesPerNode") is not None:
            node["resources"] = trainer["resourcesPerNode"]
        if trainer.get("env") is not None:
            node["env"] = trainer["env"]
        spec["containers"] = [node]
        return spec


class TrainJobAdapter(Adapter):
    group, versions, kind, plural = "trainer.kubeflow.org", ("v1alpha1",), "TrainJob", "trainjobs"
    operator = "Kubeflow Trainer"
    gangs = {NATIVE_POD_GROUP: Gang(GangMethod.unsupported, reason=_RUNTIME),
             "coscheduling": Gang(GangMethod.unsupported, reason=_RUNTIME),
             "volcano": Gang(GangMethod.unsupported, reason=_RUNTIME),
             "kueue": Gang(GangMethod.kueue, suspend=("spec", "suspend")),
             "kai": Gang(GangMethod.unsupported,
                         reason="KAI groups a TrainJob's JobSet when the TrainingRuntime's pod template sets "
                                "schedulerName: kai-scheduler, which a TrainJob's runtime patches cannot set")}
    pods_label = "jobset.sigs.k8s.io/jobset-name"  # TrainJob -> JobSet of the same name -> Jobs -> Pods
    template_patterns = (("spec", "runtimePatches", "[]", "trainingRuntimeSpec", "template", "spec", "replicatedJobs",
                          "[]", "template", "spec", "template"),)
    resource_patterns = (("spec", "trainer", "resourcesPerNode"),)  # where its GPUs are asked for
    # runtime patches may not set a PriorityClass, nor add init containers (only change the runtime's)
    cannot_carry = frozenset({"priorityClassName", "initContainers"})

    def templates(self, obj: dict) -> list[TemplateSpec]:
        if not isinstance(get_path(obj, ("spec", "trainer")), dict):
            return []
        pods = count(get_path(obj, NUM_NODES), 1)
        return [TemplateSpec(_root(obj), "node", pods, True, "spec.trainer / runtime patch node", Scale((NUM_NODES,)))]

    def template_view(self, obj: dict, spec: TemplateSpec) -> PodTemplate:
        return TrainJobTemplate(obj, spec)

    def aliases(self, obj: dict) -> list[tuple[Path, Path]]:
        container = (*_root(obj), "spec", "containers", 0)
        return [((*container, "resources"), ("spec", "trainer", "resourcesPerNode")),
                ((*container, "env"), ("spec", "trainer", "env"))]

    def skeleton(self, obj: dict) -> tuple[Path, dict] | None:
        """trainadmit's runtime patch, added once so later writes have their parents."""
        if _patch_index(obj) < len(as_list(get_path(obj, ("spec", "runtimePatches")))):
            return None
        entry = {"manager": MANAGER, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
            {"name": NODE, "template": {"spec": {"template": {"spec": {"containers": [{"name": NODE}]}}}}}]}}}}
        return ("spec", "runtimePatches"), entry

    def child_labels(self) -> tuple[str, ...]:
        return ("jobset.sigs.k8s.io/jobset-name", "trainer.kubeflow.org/trainjob-ancestor-step")

    def mounts_elsewhere(self, obj: dict, template: PodTemplate, container: str) -> dict[str, str]:
        """What the other managers' runtime patches mount into ``container`` of the ``node`` Pods."""
        out: dict[str, str] = {}
        for i, patch in enumerate(as_list(get_path(obj, ("spec", "runtimePatches")))):
            if not isinstance(patch, dict) or patch.get("manager") == MANAGER:
                continue
            jobs = as_list(get_path(patch, ("trainingRuntimeSpec", "template", "spec", "replicatedJobs")))
            for j, rjob in enumerate(jobs):
                if not isinstance(rjob, dict) or rjob.get("name") != NODE:
                    continue
                containers = as_list(get_path(rjob, ("template", "spec", "template", "spec", "containers")))
                for k, body in enumerate(containers):
                    if not isinstance(body, dict) or body.get("name") != container:
                        continue
                    for m, mount in enumerate(as_list(body.get("volumeMounts"))):
                        where = field_path(("spec", "runtimePatches", i, "trainingRuntimeSpec", "template", "spec",
                                            "replicatedJobs", j, "template", "spec", "template", "spec", "containers",
                                            k, "volumeMounts", m))
                        if isinstance(mount, dict) and isinstance(mount.get("mountPath"), str):
                            out.setdefault(mount["mountPath"], where)
        return out
