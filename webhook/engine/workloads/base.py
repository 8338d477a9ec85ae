"""What every workload kind shares: a view of the object, its pod templates, and the adapter protocol.

A workload is one object trainadmit decides on (a batch/v1 Job, a Pod, a PyTorchJob, a JobSet…).
Its adapter knows the kind: where its pod templates live, the role of each, how many Pods each
yields at once and which fields of the kind hold those counts (``Scale``), which of them its operator
puts in one gang, and how the kind joins each gang backend (one table, ``Adapter.gangs``, for every
kind: a batch/v1 Job and a Pod too). What only some kinds have is a small protocol (``Aliased``,
``GangShape``, …). The engine only sees ``Workload`` and ``PodTemplate`` views, so a new kind is one
adapter module plus its tests.

The CLI reads objects as users wrote them; the server receives them after the apiserver (and, for
custom resources, the CRD's defaults) applied. Adapters read every count with the same defaults
the apiserver or the operator applies, so both paths reach the same decision.
"""

from __future__ import annotations

from enum import StrEnum
from functools import cached_property, lru_cache
from typing import Any, Protocol, TypeGuard, TypeVar, runtime_checkable

from ...grammars.lazydataclass import dataclass
from ...grammars.quantity import as_count
from ..backends import KAI_QUEUE
from ..paths import Path, as_dict, as_list, get_path
from ..reads import Reads

# what every Workload view and adapter reads: the kind, the identity and owners, the kind's own spec whole
# (counts, gang settings, where the templates are); the templates' insides are read by the concerns
WORKLOAD_READS = Reads(object=("apiVersion", "kind", "metadata", "spec"),
                       metadata=("name", "generateName", "namespace", "labels", "annotations", "ownerReferences"))


@dataclass(frozen=True)
class ContainerRef:
    """One container of a pod spec, with where it sits (for patch paths and messages)."""

    group: str  # "containers" or "initContainers"
    index: int
    body: dict

    @property
    def name(self) -> str:
        name = self.body.get("name")
        return name if isinstance(name, str) else f"#{self.index}"

    @property
    def is_sidecar(self) -> bool:
        return self.group == "initContainers" and self.body.get("restartPolicy") == "Always"


@dataclass(frozen=True)
class Scale:
    """Where a template's Pod count comes from, in the kind's own fields: the fields whose product it is
    (a JobSet's ``replicatedJobs[0].replicas`` times ``replicatedJobs[0].template.spec.parallelism``), the
    fields that must change with them (a batch/v1 Job's ``completions``) and the fields that bound it (a Ray
    worker group's ``minReplicas`` / ``maxReplicas``). Advice about the number of workers names these, so
    that it speaks of fields the user's kind has; each of them must hold a non-negative whole number, and an
    UPDATE that changes one is a resize."""

    fields: tuple[Path, ...]
    follow: tuple[Path, ...] = ()
    bounds: tuple[Path, ...] = ()

    @property
    def all(self) -> tuple[Path, ...]:
        return (*self.fields, *self.follow, *self.bounds)


@dataclass(frozen=True)
class TemplateSpec:
    """Where an adapter found a pod template: the path to the PodTemplateSpec (``()`` for a Pod,
    whose own metadata and spec play that part), its role, the Pods it yields at once, whether
    the operator counts them in the workload's gang, and the fields that hold that count."""

    root: Path
    role: str
    pods: int
    in_gang: bool = True
    label: str = ""  # how messages name it: "Worker", "workerGroupSpecs[0] (gpu-group)"
    scale: Scale | None = None  # None: a fixed count (a Ray head, a Pod)
    inherited: Any = None  # what the template inherits from another object (a TrainJob's runtime's Job)


class PodTemplate:
    """A read-only view of one pod template of a workload. Derived values are cached properties:
    a view describes one state of the object, so build a new one after the object changed."""

    def __init__(self, obj: dict, spec: TemplateSpec):
        self.spec = spec
        self.root: Path = spec.root
        self.role = spec.role
        self.pods = spec.pods
        self.in_gang = spec.in_gang
        self.label = spec.label or spec.role
        self.meta_path: Path = (*spec.root, "metadata")
        self.spec_path: Path = (*spec.root, "spec")
        self._obj = obj

    @cached_property
    def pod_spec(self) -> dict:
        return as_dict(get_path(self._obj, self.spec_path))

    @cached_property
    def pod_meta(self) -> dict:
        return as_dict(get_path(self._obj, self.meta_path))

    @cached_property
    def all_containers(self) -> list[ContainerRef]:
        """Init containers (sidecars included) and regular containers, in that order."""
        out = []
        for group in ("initContainers", "containers"):
            for index, body in enumerate(as_list(self.pod_spec.get(group))):
                if isinstance(body, dict):
                    out.append(ContainerRef(group, index, body))
        return out

    @cached_property
    def main_containers(self) -> list[ContainerRef]:
        """The regular containers: the ones that run the training process."""
        return [ref for ref in self.all_containers if ref.group == "containers"]

    @cached_property
    def resource_names(self) -> list[str]:
        """Every resource any container asks a positive amount of (limits or requests), first-seen order.
        ``nvidia.com/gpu: 0`` asks for nothing: a CPU-only container that states it has no GPU."""
        found: dict[str, None] = {}
        for ref in self.all_containers:
            resources = ref.body.get("resources")
            if not isinstance(resources, dict):
                continue
            for section in ("limits", "requests"):
                values = resources.get(section)
                if isinstance(values, dict):
                    found.update((name, None) for name, value in values.items() if as_count(value) != 0)
        return list(found)

    def container_path(self, ref: ContainerRef) -> Path:
        return (*self.spec_path, ref.group, ref.index)

    @property
    def scheduler_name(self) -> str | None:
        """The user's scheduler, or None when it is unset or the apiserver default."""
        name = self.pod_spec.get("schedulerName")
        return name if isinstance(name, str) and name and name != "default-scheduler" else None


def count(value: Any, default: int) -> int:
    """A non-negative whole number from a manifest (replicas, parallelism…), or the default."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default


class GangMethod(StrEnum):
    """How a workload of a kind joins a gang under one backend.

    - ``spec``: the kind has a gang field of its own (a batch/v1 Job's ``spec.scheduling``, 1.37): trainadmit
      writes the gang there and the kind's controller builds the rest (Workload + PodGroup).
    - ``templates``: trainadmit writes the backend's keys on every gang template and its reconciler
      creates the PodGroup, owned by the workload, once it exists (the operator forms no gang).
    - ``fields``: trainadmit writes the keys the operator (or the backend's own controller) reads on the
      object (minimum size, queue, priority, the switch that turns its gang on); they do the rest. For an
      operator it needs the operator configured for that backend (a flag trainadmit cannot see): the
      README lists the flag per kind.
    - ``kueue``: the queue label and the kind's suspend flag (Kueue admits the whole workload at once).
    - ``unsized``: the kind cannot tell its gang's size (a bare Pod: its siblings are unknown here); gang
      intent gets a warning and no gang.
    - ``unsupported``: the kind cannot carry this backend's gang; a warning says why.
    """

    spec = "spec"
    templates = "templates"
    fields = "fields"
    kueue = "kueue"
    unsized = "unsized"
    unsupported = "unsupported"


@dataclass(frozen=True)
class GangFields:
    """Where a kind's operator reads its gang settings on the object (``fields`` method).
    Values under labels/annotations are written as strings."""

    size: Path | None = None  # minimum number of Pods
    queue: Path | None = None
    # the value the kind's CRD defaults ``queue`` to: it is set before admission runs, so it means
    # "no queue chosen" (a user who writes it explicitly cannot be told apart, and gets the policy's)
    queue_crd_default: str | None = None
    priority: Path | None = None  # PriorityClass name
    switch: tuple[Path, str] | None = None  # a key that turns the operator's gang on, and its value
    reads: str = ""  # for docs/workloads.md: which operator setting makes it act on these fields


class Follow(StrEnum):
    """What carries a resize (an UPDATE that changes the workload's counts) to the workload's gang.

    - ``reconciler``: trainadmit's reconciler updates the PodGroup it created to the new size (a native
      PodGroup only where its gang size may change: ``scheduling.k8s.io/v1beta1``; in 1.36's ``v1alpha2``
      ``schedulingPolicy`` is immutable, so there a resize is refused).
    - ``size_field``: the gang's size is a field of the object (the kind's own ``minCount``, or the
      ``GangFields.size`` its operator reads); the same change must set it to the new size, and the kind's
      controller then updates its PodGroup.
    - ``operator``: the operator recomputes its gang from the object's counts on every sync.
    - ``requeue``: Kueue sees a Workload that no longer matches the job, recreates it at the new size and
      queues it again (the job is suspended until Kueue admits it).
    - ``never``: nothing updates the gang once it exists (``Gang.resize_reason`` says why): refused.
    """

    reconciler = "reconciler"
    size_field = "size-field"
    operator = "operator"
    requeue = "requeue"
    never = "never"


@dataclass(frozen=True)
class Gang:
    """One backend's way for a kind: the method and what it needs, or why not (``unsupported``, ``unsized``).

    ``path``: the kind's own gang field (``spec``); ``fields``: the keys its operator reads (``fields``);
    ``suspend``: the kind's suspend flag (``kueue``; None: Kueue gates the Pods itself); ``scheduler_name``:
    trainadmit writes the policy's scheduler name on the gang templates (always for ``templates``: the
    PodGroup is the scheduler's); ``resize``: what carries a resize to the gang when the method does not
    say it (``follow``), with ``resize_reason`` for ``never``."""

    method: GangMethod
    fields: GangFields | None = None
    reason: str = ""
    path: Path | None = None
    suspend: Path | None = None
    scheduler_name: bool = False
    formed_by: str = ""  # the mechanism that forms this kind's gang whatever the policy's backend ("volcano")
    resize: Follow | None = None
    resize_reason: str = ""

    @property
    def writes_scheduler_name(self) -> bool:
        return self.scheduler_name or self.method is GangMethod.templates

    @property
    def follow(self) -> Follow | None:
        """What carries a resize to this gang (None: the kind has no gang under this backend)."""
        if self.resize is not None:
            return self.resize
        if self.method is GangMethod.fields:
            return Follow.size_field if self.fields is not None and self.fields.size is not None else Follow.operator
        return {GangMethod.templates: Follow.reconciler, GangMethod.spec: Follow.size_field,
                GangMethod.kueue: Follow.requeue}.get(self.method)

    @property
    def size_path(self) -> Path | None:
        """The field of the object that holds the gang's size, when the object holds it."""
        if self.method is GangMethod.spec and self.path is not None:
            return (*self.path, "schedulingPolicy", "gang", "minCount")
        return self.fields.size if self.method is GangMethod.fields and self.fields is not None else None


# who reads the KAI gang fields: KAI's podgrouper, for Pods whose schedulerName is KAI's
KAI_PODGROUPER = "KAI's podgrouper"


def kai_gang(size_from: str) -> Gang:
    """A kind KAI's podgrouper groups by itself (its minimum from ``size_from``): trainadmit writes the queue label on
    the object and KAI's scheduler name on the gang templates."""
    return Gang(GangMethod.fields, GangFields(queue=("metadata", "labels", KAI_QUEUE),
                                              reads=f"{KAI_PODGROUPER} (minMember: {size_from})"), scheduler_name=True)


# The gang backends a kind can be asked to join, by id: the policy's backend, and for native the mode
# (a kind without a gang field of its own joins a native gang in pod-group mode).
NATIVE_JOB_SCHEDULING = "native/job-scheduling"
NATIVE_POD_GROUP = "native/pod-group"
BACKEND_IDS = (NATIVE_JOB_SCHEDULING, NATIVE_POD_GROUP, "coscheduling", "volcano", "kueue", "kai")


# The Kubernetes controllers that create Pods and child objects from a template, as the apiserver names
# them: each with its own ServiceAccount (kube-controller-manager --use-service-account-credentials, as
# kubeadm runs it), or all of them as the controller-manager itself when it runs without
KUBE_CONTROLLER_MANAGER = "system:kube-controller-manager"


def kube_controller(name: str) -> tuple[str, ...]:
    """The users a built-in controller of kube-controller-manager makes its requests as."""
    return (f"system:serviceaccount:kube-system:{name}", KUBE_CONTROLLER_MANAGER)


@dataclass(frozen=True)
class Owner:
    """A kind whose objects control Pods or child objects, and who creates those children.

    A Pod or child object whose controller ownerReference names an object of this kind is left alone as
    "made by its controller" only when the request comes from one of ``users`` (or from a user the policy
    adds under ``resource`` in ``Platform.spec.controllers``): anyone else may write any ownerReference.
    ``decided``: trainadmit decided the owner itself; otherwise (a StatefulSet that a LeaderWorkerSet
    created) the child must also carry the provenance annotation of a template trainadmit decided."""

    api_versions: tuple[str, ...]
    kind: str
    resource: str  # "<plural>.<group>", as kubectl names it: the key of Platform.spec.controllers
    users: tuple[str, ...]
    decided: bool = True


@dataclass(frozen=True)
class FieldType:
    """A field of the kind the engine reads, and the type it must have (else ``object.malformed``)."""

    path: Path
    kind: type | tuple[type, ...]
    what: str  # "a whole number"


class Adapter:
    """One workload kind. Subclasses declare the kind and find its templates; the engine asks the rest.
    The base class itself stands for "a kind trainadmit does not handle": no templates.

    What only some kinds have is a small protocol below (``Aliased``, ``Skeleton``, …), checked with
    ``isinstance``, not a flag every adapter carries."""

    group: str = ""
    versions: tuple[str, ...] = ("v1",)
    kind: str = ""
    plural: str = ""
    namespaced: bool = True
    operator: str = ""  # who creates its Pods, for messages ("the Kubeflow training operator")
    # gang backend id (BACKEND_IDS) -> how this kind joins that backend's gang
    gangs: dict[str, Gang] = {}
    # where the pod templates are, as path patterns: "*" any map value, "[]" any list item; the webhook
    # configuration's matchConditions are generated from them (tests/workloads/test_operators.py checks that every
    # template ``templates()`` finds is an instance of one)
    template_patterns: tuple[Path, ...] = ()
    # a label every Pod of the workload carries, to select them all for topology colocation; None:
    # trainadmit puts its own workload label on the templates
    pods_label: str | None = None
    # fields of the kind the engine reads whose type must be right (a Job's completionMode is a string)
    field_types: tuple[FieldType, ...] = ()
    # counts of the kind outside its templates' Scale (an elastic job's minReplicas/maxReplicas): with the
    # templates' scale fields and the gang sizes its operators read, each must be a non-negative whole number
    counts: tuple[Path, ...] = ()
    # the users its operator creates the Pods and child objects as (its default ServiceAccount as its own
    # install manifests name it); a policy adds others in Platform.spec.controllers
    controllers: tuple[str, ...] = ()
    # kinds trainadmit does not decide that its operator creates, whose own children come from a template
    # trainadmit decided (a LeaderWorkerSet's StatefulSets)
    intermediate_owners: tuple[Owner, ...] = ()
    required: tuple[Path, ...] = ()  # fields the kind cannot do without (a Job's spec)
    # the field its CRD's scale subresource writes (``specReplicasPath``): a `kubectl scale` of it is an UPDATE of
    # ``<plural>/scale`` that the validating webhook decides as the resize it is (``engine.scale``)
    scale_path: Path | None = None

    @property
    def api_versions(self) -> tuple[str, ...]:
        return tuple(f"{self.group}/{v}" if self.group else v for v in self.versions)

    def templates(self, obj: dict) -> list[TemplateSpec]:
        return []

    def templates_of(self, obj: dict, inherited: dict | None) -> list[TemplateSpec]:
        """The templates, given the object the kind inherits its Pods from (``Inheriting``; None: unknown)."""
        return self.templates(obj)

    def template_roots(self, obj: dict) -> list[Path]:
        """Where the templates are (a kind with fixed places answers without counting its Pods)."""
        return [t.root for t in self.templates(obj)]

    def child_labels(self) -> tuple[str, ...]:
        """Labels this kind's operator puts on the Pods (and child objects) it creates: at least the one
        naming the workload, when there is one."""
        return (self.pods_label,) if self.pods_label else ()

    @property
    def resource(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def owner(self) -> Owner:
        """This kind as the controller of the Pods and child objects its operator creates."""
        return Owner(self.api_versions, self.kind, self.resource, self.controllers)

    def count_fields(self, obj: dict) -> list[Path]:
        """Every field of ``obj`` that holds a count trainadmit reads: its templates' scale fields, the
        kind's own counts, and the gang sizes its operators read (a spec field, not an annotation)."""
        found: dict[Path, None] = {}
        for spec in self.templates(obj):
            if spec.scale is not None:
                found.update(dict.fromkeys(spec.scale.all))
        found.update(_kind_counts(self))
        return list(found)

    def counts_with(self, obj: dict, values: dict[Path, int]) -> dict[Path, int]:
        """``values`` (new values of some of ``obj``'s count fields) with every count field the kind ties to them, at
        the values that keep the object one the kind's own admission and operator take: a template's ``follow``
        fields take its first field's value (a Job's completions), its ``bounds`` widen to hold it (a Ray worker
        group's minReplicas / maxReplicas). Kinds with other ties extend it (a Volcano Job's minAvailable)."""
        out = dict(values)
        for spec in self.templates(obj):
            scale = spec.scale
            if scale is None or not scale.fields or scale.fields[0] not in values:
                continue
            value = values[scale.fields[0]]
            out.update((path, value) for path in scale.follow)
            if len(scale.bounds) == 2:
                low, high = (get_path(obj, path) for path in scale.bounds)
                if isinstance(low, int) and not isinstance(low, bool) and low > value:
                    out[scale.bounds[0]] = value
                if isinstance(high, int) and not isinstance(high, bool) and high < value:
                    out[scale.bounds[1]] = value
        return out

    def counts_valid(self, obj: dict) -> bool:
        """Whether the kind's own admission takes ``obj``'s counts (a value a count fix must never offer)."""
        return True

    def tied_to_gpus(self, obj: dict, root: Path, before: int, after: int) -> dict[Path, object]:
        """Fields of the kind that follow the GPUs per Pod of the template at ``root`` when they change from
        ``before`` to ``after`` (an MPIJob's slotsPerWorker, its MPI ranks per worker)."""
        return {}

    def template_view(self, obj: dict, spec: TemplateSpec) -> PodTemplate:
        """How the engine reads a template (a kind whose Pods are assembled from several places overrides it)."""
        return PodTemplate(obj, spec)

    def gang_size(self, obj: dict, templates: list[TemplateSpec]) -> int:
        """Pods the operator counts in one gang (by default every Pod of an in-gang template)."""
        return sum(t.pods for t in templates if t.in_gang)

    def gang(self, backend: str) -> Gang:
        """How this kind joins the backend ``backend`` (an id of BACKEND_IDS). The answer for a backend the kind has
        no integration with is built only then (every plan asks, so no default is built for nothing)."""
        found = self.gangs.get(backend)
        if found is not None:
            return found
        return Gang(GangMethod.unsupported, reason=f"{self.kind} has no {backend} integration")

    def backend_id(self, backend: str, native_mode: str) -> str:
        """The id of the gang this kind joins when the policy's backend is ``backend``: native in the
        policy's mode where the kind has it, else in pod-group mode (every kind with templates has that)."""
        if backend != "native":
            return backend
        wanted = f"native/{native_mode}"
        return wanted if wanted in self.gangs else NATIVE_POD_GROUP


@lru_cache(maxsize=64)
def _kind_counts(adapter: Adapter) -> dict[Path, None]:
    """The count fields of a kind that do not depend on the object: its own ``counts``, then the gang sizes its
    operators read in a spec field (not an annotation), in the gang table's order. Adapters are one object per
    kind and both are the class's, so they are read once; callers only read the dict."""
    found: dict[Path, None] = dict.fromkeys(adapter.counts)
    for gang in adapter.gangs.values():
        size = gang.size_path
        if size is not None and not (len(size) >= 2 and size[-2] in ("labels", "annotations")):
            found[size] = None
    return found


# ---- optional capabilities ---------------------------------------------------------------------------

C = TypeVar("C")

def capable(adapter: Adapter, capability: type[C]) -> TypeGuard[C]:
    """Whether ``adapter`` has an optional ``capability`` (one of the protocols below). Adapters are one
    object per kind, so the answer is remembered: a runtime protocol check walks the protocol's members."""
    return _capable(adapter, capability)


@lru_cache(maxsize=256)
def _capable(adapter: Adapter, capability: type) -> bool:
    return isinstance(adapter, capability)


@runtime_checkable
class Aliased(Protocol):
    """Writes under some template paths really go elsewhere (a TrainJob's container resources and env
    live in ``spec.trainer``, not in its runtime patch)."""

    def aliases(self, obj: dict, inherited: dict | None = None) -> list[tuple[Path, Path]]: ...


@runtime_checkable
class Skeleton(Protocol):
    """The kind's writable templates need parents added before anything is written into them (a TrainJob's
    runtime patch of trainadmit's own): ``(list path, item)`` appends and ``(path, value)`` sets, in order."""

    def skeleton(self, obj: dict, inherited: dict | None = None) -> list[tuple[str, Path, Any]]: ...


@dataclass(frozen=True)
class InheritedRef:
    """The object a workload takes its Pods from (a TrainJob's runtime): its kind and name, namespaced or
    not (a namespaced one is in the workload's namespace), and the field that names it."""

    group: str
    version: str
    kind: str
    name: str
    namespaced: bool
    path: Path


@runtime_checkable
class Inheriting(Protocol):
    """The kind's Pods come from another object as much as from its own fields (a TrainJob's from its
    (Cluster)TrainingRuntime's template): the engine looks that object up in the cluster view and gives it
    to ``templates_of``."""

    def inherited_ref(self, obj: dict) -> InheritedRef | None: ...


@runtime_checkable
class InheritedTemplate(Protocol):
    """The kind is a template other workloads inherit their Pods from (a TrainingRuntime): it is never
    mutated, and its templates are decided by the rules that do not depend on a workload's size;
    ``inherited_by`` names the kind that inherits it."""

    inherited_by: str


@runtime_checkable
class UntemplatedPods(Protocol):
    """The operator creates Pods from no template the object holds (a RayJob's default submitter), in the
    role ``untemplated_role``; they request no GPUs."""

    untemplated_role: str

    def untemplated_pods(self, obj: dict) -> int: ...


@runtime_checkable
class GroupedGangs(Protocol):
    """The workload is several gangs, one per group of Pods (a LeaderWorkerSet): ``group_label`` is the
    label whose value differs between groups."""

    group_label: str


@runtime_checkable
class PatchedTemplates(Protocol):
    """The kind's templates are patches over a runtime's (a TrainJob's runtime patches), which cannot
    carry every field of a pod template: ``cannot_carry`` names the ones they cannot (``priorityClassName``,
    ``initContainers``: a new init container)."""

    cannot_carry: frozenset[str]


@runtime_checkable
class MountsElsewhere(Protocol):
    """Containers of the kind's templates also get mounts from outside the template trainadmit writes (a TrainJob's
    other runtime patches, which Trainer merges by ``mountPath``, so a second mount at a path replaces one):
    ``mounts_elsewhere`` gives, for one container of ``template``, each such mountPath and where it is set."""

    def mounts_elsewhere(self, obj: dict, template: PodTemplate, container: str) -> dict[str, str]: ...


@runtime_checkable
class ResourcesOutsideTemplates(Protocol):
    """The kind asks for container resources outside its templates (a TrainJob's
    ``spec.trainer.resourcesPerNode``): path patterns of those ResourceRequirements."""

    resource_patterns: tuple[Path, ...]


@dataclass(frozen=True)
class GangShapeProblem:
    """Why a workload cannot run as one gang in its own terms (a Job that is not Indexed): ``rule`` is the
    suffix of the gang rule it breaks (``completion-mode``)."""

    rule: str
    path: str
    message: str
    hint: str
    fix: tuple[tuple[Path, object], ...] = ()  # the fields the hint sets, and their values


@runtime_checkable
class GangShape(Protocol):
    """The kind has fields that must take certain values for its Pods to run as one gang (a batch/v1
    Job: Indexed, parallelism = completions)."""

    def gang_shape(self, obj: dict, workers: int) -> list[GangShapeProblem]: ...


@runtime_checkable
class DefaultedGangSize(Protocol):
    """The kind's own admission webhook fills its gang-size field when it is left unset or 0 (Volcano's fills a
    Job's ``spec.minAvailable`` from its tasks): ``defaulted_gang_size`` is what it becomes and how, or None when the
    object sets a size of its own. trainadmit then writes no size: the kind's own default is the user's choice."""

    defaulted_by: str

    def defaulted_gang_size(self, obj: dict) -> tuple[int, str] | None: ...


@runtime_checkable
class OwnMinimums(Protocol):
    """Templates of the kind carry a gang minimum of their own (a Volcano task's ``minAvailable``): ``own_minimums``
    gives, per template that sets one, (the field, the template's root, the minimum, the template's Pods)."""

    def own_minimums(self, obj: dict) -> list[tuple[Path, Path, int, int]]: ...


@runtime_checkable
class RunLabelled(Protocol):
    """Every run of the workload labels its Pods with a value unique to the run (a Job's controller uid),
    so that a ``generateName`` workload's gang can still be told apart: ``run_label`` is that label."""

    run_label: str


class Workload:
    """A read-only view of one object trainadmit decides on: identity, its pod templates, and sums."""

    def __init__(self, obj: dict, adapter: Adapter, inherited: dict | None = None):
        self.obj = obj
        self.adapter = adapter
        self.inherited = inherited  # the object its Pods come from too (``Inheriting``), as the view holds it
        self.kind: str = obj.get("kind", "")
        self.api_version: str = obj.get("apiVersion", "")

    def with_object(self, obj: dict) -> Workload:
        """The same workload in another state of its object (mutated, stored), inheriting the same object."""
        return Workload(obj, self.adapter, self.inherited)

    # ---- identity ---------------------------------------------------------------------------
    @cached_property
    def meta(self) -> dict:
        return as_dict(self.obj.get("metadata"))

    # the view's identity is read by many concerns: cached, as the view describes one state of the object
    @cached_property
    def name(self) -> str | None:
        name = self.meta.get("name")
        return name if isinstance(name, str) and name else None

    @cached_property
    def generate_name(self) -> str | None:
        name = self.meta.get("generateName")
        return name if isinstance(name, str) and name else None

    @property
    def display_name(self) -> str:
        return self.name or (f"{self.generate_name}<generated>" if self.generate_name else "<unnamed>")

    @cached_property
    def namespace(self) -> str | None:
        ns = self.meta.get("namespace")
        return ns if isinstance(ns, str) and ns else None

    @cached_property
    def labels(self) -> dict:
        return as_dict(self.meta.get("labels"))

    @cached_property
    def annotations(self) -> dict:
        return as_dict(self.meta.get("annotations"))

    @property
    def controller(self) -> dict | None:
        for ref in as_list(self.meta.get("ownerReferences")):
            if isinstance(ref, dict) and ref.get("controller") is True:
                return ref
        return None

    # ---- templates ----------------------------------------------------------------------------
    @cached_property
    def templates(self) -> list[PodTemplate]:
        specs = self.adapter.templates_of(self.obj, self.inherited)
        return [self.adapter.template_view(self.obj, spec) for spec in specs]

    @cached_property
    def resource_names(self) -> list[str]:
        found: dict[str, None] = {}
        for template in self.templates:
            found.update(dict.fromkeys(template.resource_names))
        return list(found)

    @property
    def pods(self) -> int:
        """Pods that run at once across all templates (and any the operator makes from no template)."""
        extra = self.adapter.untemplated_pods(self.obj) if capable(self.adapter, UntemplatedPods) else 0
        return sum(t.pods for t in self.templates) + extra

    @cached_property
    def gang_size(self) -> int:
        """Pods the operator counts in one gang of the workload."""
        return self.adapter.gang_size(self.obj, [t.spec for t in self.templates])


def env_named(env: object, prefix: str) -> list[tuple[int, dict, str]]:
    """(index, entry, name) of each entry of a container's ``env`` list that is a map whose name is a string starting
    with ``prefix`` (``NCCL_``), in order; nothing of a value that is no list."""
    if not isinstance(env, list):
        return []
    return [(i, e, n) for i, e in enumerate(env)
            if isinstance(e, dict) and isinstance(n := e.get("name"), str) and n.startswith(prefix)]


def resource_count(container: dict, resource: str) -> tuple[int | None, int | None, bool]:
    """(limit, request, malformed) of a whole-number resource in one container.

    For extended resources Kubernetes copies a limit into an unset request, so a limit alone
    counts as both.
    """
    resources = as_dict(container.get("resources"))
    limits = as_dict(resources.get("limits"))
    requests = as_dict(resources.get("requests"))
    limit = request = None
    malformed = False
    if resource in limits:
        limit = as_count(limits[resource])
        malformed |= limit is None
    if resource in requests:
        request = as_count(requests[resource])
        malformed |= request is None
    return limit, request, malformed


def pod_resource_total(template: PodTemplate, resource: str) -> int:
    """Effective per-pod amount of a resource: max(regular + sidecars, largest init container)."""
    regular = 0
    largest_init = 0
    for ref in template.all_containers:
        limit, request, _ = resource_count(ref.body, resource)
        amount = limit if limit is not None else (request or 0)
        if ref.group == "containers" or ref.is_sidecar:
            regular += amount
        else:
            largest_init = max(largest_init, amount)
    return max(regular, largest_init)
