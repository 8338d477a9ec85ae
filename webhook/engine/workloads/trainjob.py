"""Kubeflow Trainer v2 TrainJob (trainer.kubeflow.org/v1alpha1): no pod template of its own.

Its Pods come from a (Cluster)TrainingRuntime's JobSet template (``spec.runtimeRef``; ``runtime``), sized and
filled for the TrainJob by Trainer: ``spec.trainer.numNodes``, ``resourcesPerNode`` (which replaces the
resources of the runtime's ``node`` containers) and ``env``; and ``spec.runtimePatches[]`` (a list keyed by
``manager``; each patch may touch pod metadata and a restricted pod spec: nodeSelector, affinity,
tolerations, volumes, and per container volumeMounts, securityContext and env, but no container resources and
no env for ``node``). ``podTemplateOverrides`` is gone (replaced by runtimePatches).

So trainadmit's view of a TrainJob is one template per replicated job of its runtime, each at trainadmit's own
runtime patch (manager ``trainadmit.io/admission``) for that replicated job, read as the runtime's Pod
template with every runtime patch applied and the ``node`` containers' resources and env from
``spec.trainer`` (where trainadmit writes them too). When the runtime is not known (no cluster view, and not
given to `trainadmit check`), the view is the one template Trainer's runtimes call ``node``, with the
TrainJob's own fields: ``numNodes`` Pods (1 when unset), ``resourcesPerNode``.

When the runtime asks for the GPUs and the TrainJob sets no ``resourcesPerNode``, trainadmit copies the
runtime's ``node`` resources there before adding its own (RDMA devices): ``resourcesPerNode`` replaces the
runtime's resources rather than joining them, and this way the Pods ask for what admission counted.

Gangs come from the runtime's ``podGroupPolicy`` (coscheduling or Volcano), which a TrainJob cannot change;
Kueue admits a TrainJob through its queue label and ``spec.suspend``. PriorityClass is not patchable per job.
Sources: trainer.kubeflow.org_trainjobs.yaml; kubeflow/trainer pkg/runtime/core/trainingruntime.go,
pkg/runtime/framework/plugins/jobset/builder.go.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from ..paths import Path, as_dict, as_list, field_path, get_path
from .base import (
    NATIVE_POD_GROUP,
    Adapter,
    Gang,
    GangMethod,
    InheritedRef,
    PodTemplate,
    Scale,
    TemplateSpec,
    count,
)
from .runtime import NODE, PodSet, pod_sets

MANAGER = "trainadmit.io/admission"
NUM_NODES = ("spec", "trainer", "numNodes")
RUNTIME_REF = ("spec", "runtimeRef")
PATCHES = ("spec", "runtimePatches")
RESOURCES_PER_NODE = ("spec", "trainer", "resourcesPerNode")
ENV = ("spec", "trainer", "env")
_RUNTIME = "Trainer forms gangs from the TrainingRuntime's podGroupPolicy, which a TrainJob cannot change"
RUNTIME_KINDS = {"TrainingRuntime": True, "ClusterTrainingRuntime": False}  # kind -> namespaced
_PATCH_TEMPLATE = ("trainingRuntimeSpec", "template", "spec", "replicatedJobs")


def _patch_index(obj: dict) -> int:
    patches = as_list(get_path(obj, PATCHES))
    for i, patch in enumerate(patches):
        if isinstance(patch, dict) and patch.get("manager") == MANAGER:
            return i
    return len(patches)


def _own_jobs(obj: dict) -> list[str]:
    """The replicated jobs trainadmit's runtime patch names, in its order."""
    patches = as_list(get_path(obj, PATCHES))
    index = _patch_index(obj)
    patch = as_dict(patches[index]) if index < len(patches) else {}
    return [str(as_dict(r).get("name")) for r in as_list(get_path(patch, _PATCH_TEMPLATE))]


def _job_order(obj: dict, names: list[str]) -> list[str]:
    """Where each replicated job is in trainadmit's patch: as it already is, then the others in runtime order."""
    own = _own_jobs(obj)
    return own + [n for n in names if n not in own]


def _root(obj: dict, position: int = 0) -> Path:
    return (*PATCHES, _patch_index(obj), *_PATCH_TEMPLATE, position, "template", "spec", "template")


def _by_name(items: list, name: str) -> dict | None:
    return next((i for i in items if isinstance(i, dict) and i.get("name") == name), None)


def _merge_containers(base: list, patch: list) -> list:
    """Containers merged by name (a runtime patch's strategic merge): patched fields replace, env and
    volumeMounts merge by name and mount path."""
    out = [dict(c) if isinstance(c, dict) else c for c in base]
    for change in patch:
        if not isinstance(change, dict):
            continue
        target = _by_name(out, change.get("name"))
        if target is None:
            out.append(dict(change))
            continue
        for key, value in change.items():
            if key == "env" and isinstance(value, list):
                target[key] = _upsert(as_list(target.get(key)), value, "name")
            elif key == "volumeMounts" and isinstance(value, list):
                target[key] = _upsert(as_list(target.get(key)), value, "mountPath")
            else:
                target[key] = value
    return out


def _upsert(base: list, patch: list, key: str) -> list:
    out = list(base)
    for item in patch:
        at = next((i for i, old in enumerate(out) if isinstance(old, dict) and isinstance(item, dict)
                   and old.get(key) == item.get(key)), None)
        if at is None:
            out.append(item)
        else:
            out[at] = item
    return out


def _merge_pod_spec(base: dict, patch: dict) -> dict:
    out = dict(base)
    for key, value in patch.items():
        if key in ("containers", "initContainers") and isinstance(value, list):
            out[key] = _merge_containers(as_list(out.get(key)), value)
        elif key == "nodeSelector" and isinstance(value, dict):
            out[key] = {**as_dict(out.get(key)), **value}
        elif key in ("tolerations", "imagePullSecrets", "schedulingGates") and isinstance(value, list):
            out[key] = [*as_list(out.get(key)), *value]
        elif key == "volumes" and isinstance(value, list):
            out[key] = _upsert(as_list(out.get(key)), value, "name")
        else:
            out[key] = value
    return out


def _merge_meta(base: dict, patch: dict) -> dict:
    out = dict(base)
    for key in ("labels", "annotations"):
        if isinstance(patch.get(key), dict):
            out[key] = {**as_dict(out.get(key)), **patch[key]}
    return out


class TrainJobTemplate(PodTemplate):
    """The Pods of one replicated job of a TrainJob: the runtime's template (when known) with every runtime
    patch for that job applied (trainadmit's last), and the ``node`` containers' resources and env from
    ``spec.trainer``."""

    @cached_property
    def _composed(self) -> tuple[dict, dict]:
        source: PodSet | None = self.spec.inherited
        name = source.name if source is not None else NODE
        base = as_dict(source.template) if source is not None else {}
        meta, spec = as_dict(base.get("metadata")), as_dict(base.get("spec"))
        patches = as_list(get_path(self._obj, PATCHES))
        own = _patch_index(self._obj)
        for patch in [*(p for i, p in enumerate(patches) if i != own), *patches[own:own + 1]]:
            job = _by_name(as_list(get_path(as_dict(patch), _PATCH_TEMPLATE)), name)
            template = as_dict(get_path(as_dict(job), ("template", "spec", "template")))
            meta = _merge_meta(meta, as_dict(template.get("metadata")))
            spec = _merge_pod_spec(spec, as_dict(template.get("spec")))
        writes = source.trainer_containers if source is not None else frozenset({NODE})
        trainer = as_dict(get_path(self._obj, ("spec", "trainer")))
        resources = as_dict(trainer.get("resourcesPerNode"))
        containers = []
        for container in as_list(spec.get("containers")) or ([{"name": NODE}] if source is None else []):
            if isinstance(container, dict) and container.get("name") in writes:
                container = dict(container)
                if "limits" in resources or "requests" in resources:
                    container["resources"] = resources
                if trainer.get("env") is not None:
                    container["env"] = _upsert(as_list(container.get("env")), as_list(trainer["env"]), "name")
            containers.append(container)
        if source is None:  # only the trainer's node container is known
            containers = [c for c in containers if isinstance(c, dict) and c.get("name") == NODE][:1] or [
                {"name": NODE}]
        spec["containers"] = containers
        return meta, spec

    @cached_property
    def pod_spec(self) -> dict:
        return self._composed[1]

    @cached_property
    def pod_meta(self) -> dict:
        return self._composed[0]


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
    controllers = ("system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager",)
    template_patterns = ((*PATCHES, "[]", *_PATCH_TEMPLATE, "[]", "template", "spec", "template"),)
    resource_patterns = (RESOURCES_PER_NODE,)  # where its GPUs are asked for, besides its runtime
    # runtime patches may not set a PriorityClass, nor add init containers (only change the runtime's), nor claim
    # DRA devices
    cannot_carry = frozenset({"priorityClassName", "initContainers", "resourceClaims"})

    def inherited_ref(self, obj: dict) -> InheritedRef | None:
        """``spec.runtimeRef``, with the CRD's defaults (apiGroup trainer.kubeflow.org, kind
        ClusterTrainingRuntime); None for a runtime of another API."""
        ref = as_dict(get_path(obj, RUNTIME_REF))
        group = ref.get("apiGroup", "trainer.kubeflow.org")
        kind = ref.get("kind", "ClusterTrainingRuntime")
        name = ref.get("name")
        if group != "trainer.kubeflow.org" or kind not in RUNTIME_KINDS or not isinstance(name, str) or not name:
            return None
        return InheritedRef(group, "v1alpha1", kind, name, RUNTIME_KINDS[kind], RUNTIME_REF)

    def templates(self, obj: dict) -> list[TemplateSpec]:
        return self.templates_of(obj, None)

    def templates_of(self, obj: dict, inherited: dict | None) -> list[TemplateSpec]:
        trainer = get_path(obj, ("spec", "trainer"))
        if inherited is None:
            if not isinstance(trainer, dict):
                return []
            pods = count(get_path(obj, NUM_NODES), 1)
            return [TemplateSpec(_root(obj, _job_order(obj, [NODE]).index(NODE)), NODE, pods, True,
                                 "spec.trainer / runtime patch node", Scale((NUM_NODES,)))]
        sets = pod_sets(inherited, trainer if isinstance(trainer, dict) else None)
        order = _job_order(obj, [s.name for s in sets])
        kind, name = inherited.get("kind"), as_dict(inherited.get("metadata")).get("name")
        return [TemplateSpec(_root(obj, order.index(s.name)), s.role, s.pods, True,
                             f"{kind} {name} replicatedJobs[{s.index}] ({s.name})",
                             Scale((NUM_NODES,)) if s.sized else None, s) for s in sets]

    def template_roots(self, obj: dict) -> list[Path]:
        return [_root(obj, i) for i in range(max(len(_own_jobs(obj)), 1))]

    def template_view(self, obj: dict, spec: TemplateSpec) -> PodTemplate:
        return TrainJobTemplate(obj, spec)

    def aliases(self, obj: dict, inherited: dict | None = None) -> list[tuple[Path, Path]]:
        """The ``node`` containers' resources and env are written to ``spec.trainer``."""
        out = []
        for spec in self.templates_of(obj, inherited):
            view = TrainJobTemplate(obj, spec)
            writes = spec.inherited.trainer_containers if spec.inherited is not None else frozenset({NODE})
            for ref in view.main_containers:
                if ref.body.get("name") in writes:
                    container = view.container_path(ref)
                    out += [((*container, "resources"), RESOURCES_PER_NODE), ((*container, "env"), ENV)]
        return out

    def skeleton(self, obj: dict, inherited: dict | None = None) -> list[tuple[str, Path, Any]]:
        """trainadmit's runtime patch (one replicated job per runtime job, each with the runtime's containers,
        so that later writes have their parents and land on the container of the same name), added once; and,
        when the runtime's node containers ask for resources the TrainJob does not set, those resources in
        ``resourcesPerNode`` (which would otherwise replace them)."""
        ops: list[tuple[str, Path, Any]] = []
        sets = pod_sets(inherited, as_dict(get_path(obj, ("spec", "trainer")))) if inherited is not None else []
        if _patch_index(obj) >= len(as_list(get_path(obj, PATCHES))):
            jobs = []
            for name in _job_order(obj, [s.name for s in sets] or [NODE]):
                source = next((s for s in sets if s.name == name), None)
                names = [c.get("name") for c in as_list(as_dict(as_dict(source.template).get("spec")).get(
                    "containers")) if isinstance(c, dict)] if source is not None else [NODE]
                jobs.append({"name": name, "template": {"spec": {"template": {"spec": {"containers": [
                    {"name": n} for n in names]}}}}})
            entry = {"manager": MANAGER, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": jobs}}}}
            ops.append(("append", PATCHES, entry))
        pinned = as_dict(get_path(obj, RESOURCES_PER_NODE))
        if sets and "limits" not in pinned and "requests" not in pinned:
            found = [as_dict(c.get("resources")) for s in sets
                     for c in as_list(as_dict(s.template.get("spec")).get("containers"))
                     if isinstance(c, dict) and c.get("name") in s.trainer_containers]
            resources = {k: v for k, v in (found[0] if found else {}).items() if k in ("limits", "requests")}
            if resources and all({k: v for k, v in f.items() if k in ("limits", "requests")} == resources
                                 for f in found):
                ops.append(("set", RESOURCES_PER_NODE, resources))
        return ops

    def child_labels(self) -> tuple[str, ...]:
        return ("jobset.sigs.k8s.io/jobset-name", "trainer.kubeflow.org/trainjob-ancestor-step")

    def mounts_elsewhere(self, obj: dict, template: PodTemplate, container: str) -> dict[str, str]:
        """What the other managers' runtime patches mount into ``container`` of ``template``'s replicated job."""
        job = template.spec.inherited.name if template.spec.inherited is not None else NODE
        out: dict[str, str] = {}
        for i, patch in enumerate(as_list(get_path(obj, PATCHES))):
            if not isinstance(patch, dict) or patch.get("manager") == MANAGER:
                continue
            jobs = as_list(get_path(patch, _PATCH_TEMPLATE))
            for j, rjob in enumerate(jobs):
                if not isinstance(rjob, dict) or rjob.get("name") != job:
                    continue
                containers = as_list(get_path(rjob, ("template", "spec", "template", "spec", "containers")))
                for k, body in enumerate(containers):
                    if not isinstance(body, dict) or body.get("name") != container:
                        continue
                    for m, mount in enumerate(as_list(body.get("volumeMounts"))):
                        where = field_path((*PATCHES, i, *_PATCH_TEMPLATE, j, "template", "spec", "template", "spec",
                                            "containers", k, "volumeMounts", m))
                        if isinstance(mount, dict) and isinstance(mount.get("mountPath"), str):
                            out.setdefault(mount["mountPath"], where)
        return out
