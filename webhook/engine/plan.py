"""The plan: what several concerns must agree on, decided once per decision, before any mutation.

Concerns do not pass state to each other. Whether the workload gets a gang of ours and through which
backend and method, which other gang mechanism it already carries, how its workers are colocated at the
requested level, which of its templates run GPUs and get the pool's configuration, and which of the kind's
fields hold its counts: each is decided here by one function, from the object as received, the resolved
intent and the policy. Every concern then reads the plan and writes only its own fields, so no concern's
answer depends on which one ran before it (``tests/engine/test_concern_order.py`` runs them in many orders).

The cluster it is for comes first (``plan_target``: the Kubernetes version, gates and gang backend, chosen
from the policy and what the cluster serves, ``engine.target``): the gang, the colocation and the concerns
read that, never the policy's ``auto`` settings.

To decide something new that several concerns need (the GPUs a DRA claim asks for), add a field and the one
function that fills it.
"""

from __future__ import annotations

from dataclasses import field, replace
from enum import StrEnum
from functools import lru_cache
from typing import TYPE_CHECKING

from ..grammars.lazydataclass import dataclass
from ..policy import PolicySet
from ..policy.policyset import TOPOLOGY_GATE
from ..policy.vocab import GangBackend
from .applied import read_applied
from .backends import (
    JOBSET_EXCLUSIVE,
    KAI_REQUIRED_PLACEMENT,
    KAI_TOPOLOGY,
    KUEUE_REQUIRED_TOPOLOGY,
    OBJECT_LABELS,
    SCHEDULER_GANGS,
    TEMPLATE_ANNOTATIONS,
    TEMPLATE_LABELS,
    TOPOLOGY_REQUESTS,
    VOLCANO_MIN_MEMBER,
    native_podgroup_name,
)
from .clusterview import ClusterView
from .intent import Resolved
from .network import Brought, ClaimClasses, brought_by, unknown_claims
from .paths import Path, as_dict, field_path, get_path
from .target import Target, choose
from .workloads import Adapter, Gang, GangMethod, GroupedGangs, PodTemplate, Workload, capable

if TYPE_CHECKING:  # types only: the engine runs on cached policy records too (policy.cache)
    from ..policy.models import TopologyLevel


GATE = "gate"  # the colocation method of the placement gate (engine.concerns.reconciler.GATE_METHOD)
# Gang schedulers that form a gang of gated Pods and place it once the gate is lifted, but cannot choose its domain
# (auto gave them required pod affinity before the gate; docs/scheduling.md, "The placement gate under a gang
# scheduler", has the sources): scheduler-plugins Coscheduling counts every labelled Pod, gated ones too, towards
# minMember in PreFilter (pkg/coscheduling/core/core.go) and its timeout runs only in Permit, which a gated Pod never
# reaches;
# Volcano skips a task whose Pod has schedulingGates in allocate, backfill and preempt (job_info.go SchGated);
# KAI gives such a Pod the status Gated, and a PodSet with a Gated Pod is not ready for scheduling (pod_info.go,
# podset IsReadyForScheduling). Where one of them cannot use the gate for a workload, auto keeps pod affinity.
GANG_SCHEDULERS_GATED = (GangBackend.coscheduling, GangBackend.volcano, GangBackend.kai)


class NoGang(StrEnum):
    """Why a workload that asks for a gang gets none of ours."""

    unsized = "unsized"  # the kind cannot tell its gang's size (a bare Pod)
    foreign = "foreign"  # it already carries another gang mechanism
    unsupported = "unsupported"  # the kind cannot join the policy's backend
    name_required = "name-required"  # the backend names its PodGroup after the workload, which has no name yet
    unavailable = "unavailable"  # the cluster has no gang backend the policy allows (Target.unavailable)


@dataclass(frozen=True)
class GangPlan:
    """The workload's gang: ``backend`` is the id of the backend whose gang it gets (or kept from an earlier
    pass), None for none of ours; ``why_not`` says why when one was asked for."""

    requested: bool = False
    backend_id: str = ""  # the backend this kind would join under the policy ("native/pod-group", "volcano"…)
    gang: Gang | None = None  # how the kind joins it
    size: int = 0  # Pods the kind's operator counts in the gang
    foreign: tuple[tuple[str, str], ...] = ()  # other gang mechanisms the object carries: (mechanism, where)
    why_not: NoGang | None = None

    @property
    def backend(self) -> str | None:
        return self.backend_id if self.requested and self.why_not is None else None

    @property
    def mechanism(self) -> str:
        """What forms the workload's gang, for people: the kind's own mechanism (a Volcano Job's gang is Volcano's
        whatever the policy's backend or the intent), the backend, or "none"."""
        if self.gang is not None and self.gang.formed_by and self.why_not is not NoGang.foreign:
            return self.gang.formed_by
        return self.backend or "none"

    @property
    def foreign_names(self) -> str:
        return ", ".join(sorted(name for name, _ in self.foreign))


@dataclass(frozen=True)
class Colocation:
    """How the workers are kept in one domain of the requested level, when there is anything to colocate
    (``method`` None: no level, or at most one GPU Pod). ``native``: the native gang's topology constraint,
    which the gang concern writes with the gang (``by_gang``); ``kueue``: Kueue's TAS annotation;
    ``gate``: the placement gate, lifted by the elected reconciler once one domain has room for the whole gang
    (``cluster.placement``); ``podAffinity``: required pod affinity to the workload's own Pods; ``none``: nothing
    colocates them.
    ``unavailable`` says why the chosen method cannot be used for this workload."""

    level_name: str | None = None
    level: TopologyLevel | None = None
    method: str | None = None
    by_gang: bool = False
    unavailable: str = ""
    left_to: str = ""  # why trainadmit adds no colocation: the workload's own topology request, another gang
    uncarried: str = ""  # why auto's method cannot be carried by this workload's gang (no colocation is added)
    ungated: str = ""  # why auto's placement gate cannot hold this workload, so a gang scheduler keeps pod affinity

    @property
    def applies(self) -> bool:
        """The workers are colocated at the level (by some method that can be used here)."""
        return self.method not in (None, "none") and not self.unavailable


@dataclass(frozen=True)
class ScaleField:
    """A field of the workload that holds a count of its Pods, as the object has it (None: unset)."""

    path: Path
    value: object


@dataclass(frozen=True)
class TemplateScale:
    """One template's count fields (the product is its Pods), the fields that follow the first (a Job's
    completions), and the Pods it runs now."""

    root: Path
    fields: tuple[ScaleField, ...]
    follow: tuple[ScaleField, ...]
    pods: int


@dataclass(frozen=True)
class Scale:
    """The fields of the kind that hold its Pod counts, per template, and which template advice about the number
    of workers changes: the one with the most Pods among those that run GPUs (a PyTorchJob's Worker, not its
    Master; an MPIJob's workers, not its launcher). The size fix (``fit.largest``) gives values, in those fields,
    that pass every size rule."""

    templates: tuple[TemplateScale, ...] = ()
    largest: int = 0

    @property
    def target(self) -> TemplateScale | None:
        return self.templates[self.largest] if self.largest < len(self.templates) else None

    @property
    def path(self) -> str | None:
        """The field advice about the number of workers points at: the largest template's first count field the
        object sets (its first when it sets none: the one advice adds)."""
        target = self.target
        if target is None or not target.fields:
            return None
        return field_path(next((f.path for f in target.fields if f.value is not None), target.fields[0].path))

    def as_dict(self) -> dict[str, object]:
        return {field_path(f.path): f.value for t in self.templates for f in t.fields}


@dataclass(frozen=True)
class ResizePlan:
    """An UPDATE that changes the workload's counts (Pods or GPUs of a template, or its gang's size): the
    sizes before and after, whether it grows (a limit can only be broken by growing), the gang the workload
    got when it was created (its provenance annotation; "" when it got none, None when nothing says), and
    that gang's size field: its value before and after, and the size the gang needs now."""

    pods: tuple[int, int] = (0, 0)
    gpu_pods: tuple[int, int] = (0, 0)
    gpus: tuple[int, int] = (0, 0)
    gang_size: tuple[int, int] = (0, 0)
    grown: bool = False
    created_gang: str | None = None
    size_field: Path | None = None
    size_values: tuple[object, object] = (None, None)
    # the gang size the workload needed before and needs now, whatever its size field says: the size field
    # held the whole workload when it equalled the first (as trainadmit writes it), else a minimum of the user's
    needed: tuple[int, int] = (0, 0)

    @property
    def added_gpus(self) -> int:
        return self.gpus[1] - self.gpus[0]


@dataclass(frozen=True)
class Plan:
    target: Target = field(default_factory=Target)
    gang: GangPlan = GangPlan()
    colocation: Colocation = Colocation()
    pool_templates: tuple[PodTemplate, ...] = ()  # get the pool's placement, RDMA, NCCL, storage, preflight
    scale: Scale = Scale()
    brought: tuple[tuple[Path, Brought], ...] = ()  # per pool template (by root): the network it brings itself
    resize: ResizePlan | None = None  # an UPDATE that resizes the workload

    def network_of(self, template: PodTemplate) -> Brought | None:
        """What ``template`` brings for its network, when it brings anything (None: nothing of its own)."""
        return next((b for root, b in self.brought if root == template.root), None)

    def own_network(self, template: PodTemplate) -> bool:
        """The template brings its own network: the pool's RDMA and NCCL transport stay out of it."""
        found = self.network_of(template)
        return found is not None and found.own_network


# ---- the decisions --------------------------------------------------------------------------------

def present_gangs(workload: Workload) -> dict[str, str]:
    """The gang mechanisms the object already carries (ours from a previous pass, or another's):
    mechanism id -> where it was seen."""
    w = workload
    found: dict[str, str] = {}
    for backend, path in _spec_gangs(w.adapter):  # the kind's own gang field (a Job's spec.scheduling)
        if get_path(w.obj, path) is not None:
            found.setdefault(backend, field_path(path))
    if VOLCANO_MIN_MEMBER in w.annotations:
        found["volcano"] = f'metadata.annotations["{VOLCANO_MIN_MEMBER}"]'
    for key, backend in OBJECT_LABELS:
        if key in w.labels:
            found.setdefault(backend, f'metadata.labels["{key}"]')
    if JOBSET_EXCLUSIVE in w.annotations:
        found["jobset-exclusive"] = f'metadata.annotations["{JOBSET_EXCLUSIVE}"]'
    for t in w.templates:
        meta, spec = t.pod_meta, t.pod_spec
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        group = spec.get("schedulingGroup")
        if group or spec.get("workloadRef"):  # ours names the PodGroup after the workload; another, the user's
            named = group.get("podGroupName") if isinstance(group, dict) else None
            ours = w.name is not None and named == native_podgroup_name(w.name)
            found.setdefault("native/pod-group" if ours else f"native PodGroup {named or '(workloadRef)'}",
                             field_path((*t.spec_path, "schedulingGroup")))
        scheduler_name = spec.get("schedulerName")
        for scheduler, backend in SCHEDULER_GANGS:
            if scheduler_name == scheduler:
                found.setdefault(backend, field_path((*t.spec_path, "schedulerName")))
        # where (the template's metadata, as a field) is only spelt out for a key that is there
        if isinstance(labels, dict) and labels:
            for key, backend in TEMPLATE_LABELS:
                if key in labels:
                    found.setdefault(backend, f'{field_path(t.meta_path)}.labels["{key}"]')
        if isinstance(annotations, dict) and annotations:
            for key, backend in TEMPLATE_ANNOTATIONS:
                if key in annotations:
                    found.setdefault(backend, f'{field_path(t.meta_path)}.annotations["{key}"]')
    return found


@lru_cache(maxsize=64)
def _spec_gangs(adapter: Adapter) -> tuple[tuple[str, Path], ...]:
    """The backends whose gang the kind writes in a field of its own (``GangMethod.spec``), with that field, in the
    adapter's order. Adapters are one object per kind and their gang table is the class's, so it is read once."""
    return tuple((backend, gang.path) for backend, gang in adapter.gangs.items()
                 if gang.method is GangMethod.spec and gang.path is not None)


# (id of the platform, id of the discovery) -> (the platform, the discovery, their target): ``choose`` is a function of
# the two, both immutable (a frozen policy model or cached record, a frozen ``Discovered``), so one policy on one
# cluster view gets one target, chosen once rather than per decision. The entry holds both objects, so their ids cannot
# be reused while it stands, and the identity check makes an equal id of another object a miss. A few entries: a
# server has one policy generation and one view at a time (a reload or a rediscovery is a new object: a miss).
_TARGETS: dict[tuple[int, int], tuple[object, object, Target]] = {}
_TARGETS_KEPT = 8


def plan_target(policy: PolicySet, cluster: ClusterView) -> Target:
    """The cluster the decision is for: what ``auto`` chose from the cluster's discovery (or assumed without it),
    what the policy set explicitly, and what of that the cluster cannot honour."""
    platform, discovered = policy.platform, cluster.discovered()
    key = (id(platform), id(discovered))
    found = _TARGETS.get(key)
    if found is not None and found[0] is platform and found[1] is discovered:
        return found[2]
    target = choose(platform, discovered)
    if len(_TARGETS) >= _TARGETS_KEPT:
        _TARGETS.clear()
    _TARGETS[key] = (platform, discovered, target)
    return target


def plan_gang(workload: Workload, resolved: Resolved, target: Target) -> GangPlan:
    """One gang per workload, through the target's backend, unless the cluster has none the policy allows, the
    kind cannot join it or the object already carries another gang mechanism (then it gets none of ours, and
    none of the gang-shape rules)."""
    if target.backend is None:
        return GangPlan(requested=resolved.gang, size=resolved.gang_size,
                        why_not=NoGang.unavailable if resolved.gang else None)
    backend_id = workload.adapter.backend_id(target.backend.value, target.native_mode)
    gang = workload.adapter.gang(backend_id)
    base = GangPlan(requested=resolved.gang, backend_id=backend_id, gang=gang, size=resolved.gang_size)
    if not resolved.gang:
        return base
    if gang.method is GangMethod.unsized:
        return replace(base, why_not=NoGang.unsized)
    foreign = tuple((b, where) for b, where in present_gangs(workload).items() if b != backend_id)
    if foreign:
        return replace(base, foreign=foreign, why_not=NoGang.foreign)
    if gang.method is GangMethod.unsupported:
        return replace(base, why_not=NoGang.unsupported)
    if gang.method is GangMethod.templates and workload.name is None:
        return replace(base, why_not=NoGang.name_required)
    return base


def colocation_method(policy: PolicySet, target: Target) -> str:
    """How workers are colocated: the policy's choice, or (auto) the method the cluster's scheduler can
    hold to its promise: all workers in one domain once one has room, none bound while none has.

    A native gang's PodGroup topology constraint does (the scheduler tries each domain as one placement);
    the apiserver drops it without the TopologyAwareWorkloadScheduling gate. Without the gate auto adds no
    colocation (``none``) rather than required pod affinity: with pod affinity the first worker picks its
    domain alone, and when that domain is too small kube-scheduler 1.36 binds none of a native gang for
    good although another domain fits it (with no gang enforced it binds the workers that fit and leaves
    the rest waiting, holding GPUs). The topology concern says so (``topology.colocation-risk``). KAI's
    podgrouper places the gang in a domain of the Topology named by ``gang.kaiTopology``; Kueue, its own
    topology-aware admission. Coscheduling's and Volcano's schedulers, and KAI's without a Topology, colocate only
    by pod affinity, with the same risk.
    A cluster with no gang backend gets no colocation either, for the same reason as a native gang without the
    gate. The backend is the target's (what ``gang.backend: auto`` chose on this cluster), not the policy's word.

    Where auto would otherwise add no colocation (no gang backend; a native gang without the gate) or required pod
    affinity (coscheduling, Volcano, KAI without ``gang.kaiTopology``: ``GANG_SCHEDULERS_GATED``) it chooses the
    placement gate (``GATE``): the mutating webhook gates the gang's Pods and the elected reconciler's ungater
    (``cluster.placement``) writes one domain with room for the whole gang into all of them before lifting it.
    Where a gang scheduler runs it still forms the gang; the gate only chooses the domain it cannot.
    """
    gang = policy.platform.gang
    if gang.topologyMethod != "auto":
        return gang.topologyMethod
    if target.backend is GangBackend.native:
        return "native" if TOPOLOGY_GATE in target.gates else GATE
    if target.backend is GangBackend.kueue:
        return "kueue"
    if target.backend is GangBackend.kai and gang.kaiTopology:
        return "kai"
    return GATE  # no gang backend; coscheduling, Volcano, KAI without a Topology: GANG_SCHEDULERS_GATED


def _no_gang_of_ours(resolved: Resolved, gang: GangPlan, kind: str) -> str:
    """Why the workload has no gang of the target's backend to carry its colocation ("" when it has one)."""
    if not gang.requested:
        if resolved.gang_explicit:
            return "its gang annotation turns the gang off"
        return (f"this {kind} has none: its operator counts {resolved.gang_size} of its {resolved.pods} Pods in a "
                "gang (an elastic job counts its minimum)")
    if gang.why_not is NoGang.foreign:
        return f"another mechanism forms its gang ({gang.foreign_names})"
    if gang.why_not is not None:
        return f"this {kind} gets none ({gang.why_not.value})"
    if gang.gang is not None and gang.gang.formed_by:
        return f"{gang.gang.formed_by} forms this {kind}'s gang"
    return ""


def _uncarried(resolved: Resolved, policy: PolicySet, target: Target, gang: GangPlan, method: str,
               kind: str) -> str:
    """Why the gang cannot carry the colocation ``method`` asks for ("" when it can): the native topology
    constraint is part of a native gang (Job.spec.scheduling or a native PodGroup), KAI's placement annotations
    are read by KAI's podgrouper when it groups the workload."""
    backend = target.backend
    wanted = GangBackend.native if method == "native" else GangBackend.kai
    what = "the native topology constraint is part of a native gang" if method == "native" else \
        "KAI's topology placement is read by KAI's podgrouper when it groups the workload"
    if backend is not wanted:
        whose = "the policy's gang backend" if target.backend_from == "policy" else "the cluster's gang backend"
        return f"{what}, and {whose} is {target.backend_name}"
    if method == "kai" and not policy.platform.gang.kaiTopology:
        return f"{what}, which needs the name of a KAI Topology (Platform.spec.gang.kaiTopology)"
    missing = _no_gang_of_ours(resolved, gang, kind)
    if missing:
        return f"{what}, and {missing}"
    if method == "native" and gang.gang is not None and gang.gang.method not in (GangMethod.spec, GangMethod.templates):
        return f"{what}, and this {kind} joins its gang through its operator's fields, which carry none"
    return ""


def own_topology(workload: Workload, node_label: str, policy: PolicySet) -> str:
    """Where the workload already asks a gang scheduler for a topology of its own (Kueue's podset topology
    annotations, KAI's placement annotations), other than the value trainadmit itself writes; "" for nowhere."""
    ours = {KUEUE_REQUIRED_TOPOLOGY: node_label, KAI_REQUIRED_PLACEMENT: node_label,
            KAI_TOPOLOGY: policy.platform.gang.kaiTopology}
    places = [(None, workload.annotations)] + [(t, as_dict(t.pod_meta.get("annotations"))) for t in workload.templates]
    for template, found in places:
        if not found:  # no annotations here (most templates): no request
            continue
        for key in TOPOLOGY_REQUESTS:
            if key in found and found[key] != ours.get(key):
                where = field_path(template.meta_path) if template is not None else "metadata"
                return f'{where}.annotations["{key}"]'
    return ""


def plan_colocation(resolved: Resolved, policy: PolicySet, target: Target, gang: GangPlan,
                    workload: Workload) -> Colocation:
    """Colocation at the requested level, for workloads with more than one GPU Pod. A method the workload's gang
    must carry (native, kai) that it cannot: under auto nothing colocates the workers (required pod affinity
    instead would let the workers that fit start and hold their GPUs while the rest wait: see
    ``colocation_method``), and the decision says why; a method the policy names is unavailable."""
    r = resolved
    if r.level is None or r.gpu_pods <= 1:
        return Colocation(level_name=r.level_name, level=r.level)
    theirs = own_topology(workload, r.level.nodeLabel, policy)
    if theirs:
        return Colocation(r.level_name, r.level, left_to=f"its own topology request ({theirs})")
    if gang.why_not is NoGang.foreign:
        return Colocation(r.level_name, r.level, left_to=f"{gang.foreign_names}, which forms and places its gang")
    method = colocation_method(policy, target)
    if method == GATE:
        why = _ungateable(resolved, workload, target, gang)
        if not why:
            return Colocation(r.level_name, r.level, GATE)
        if target.backend in GANG_SCHEDULERS_GATED:  # what auto chose before the gate under a gang scheduler
            return Colocation(r.level_name, r.level, "podAffinity", ungated=why)
        method = "none"  # what auto chose before the gate: no colocation, and the note says why
    if method == "none" and policy.platform.gang.topologyMethod == "auto" and target.backend is GangBackend.native:
        # auto would use the native constraint but for the topology gate: where this workload's gang could not
        # carry it even with the gate, that is the reason (the gate's warning would name a fix that cannot help)
        why = _uncarried(resolved, policy, target, gang, "native", workload.kind)
        if why:
            return Colocation(r.level_name, r.level, uncarried=why)
    unavailable = ""
    by_gang = False
    if method in ("native", "kai"):
        why = _uncarried(resolved, policy, target, gang, method, workload.kind)
        if not why:
            by_gang = method == "native"
        elif policy.platform.gang.topologyMethod == "auto":
            return Colocation(r.level_name, r.level, uncarried=why)
        else:
            unavailable = why
    return Colocation(r.level_name, r.level, method, by_gang, unavailable)


def _gang_minimum(workload: Workload, gang: GangPlan, resolved: Resolved) -> int:
    """The Pods the workload's gang holds: the value of its gang's size field when the object sets one (a KAI Job's
    ``kai.scheduler/batch-min-member``, a PyTorchJob's ``minAvailable``), else the size its operator counts."""
    path = gang.gang.size_path if gang.gang is not None else None
    value = get_path(workload.obj, path) if path is not None else None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else resolved.gang_size


def _ungateable(resolved: Resolved, workload: Workload, target: Target, gang: GangPlan) -> str:
    """Why the placement gate cannot colocate this workload's workers ("" when it can): the ungater places one gang
    per workload, and a kind that gangs each group of its Pods on its own (a LeaderWorkerSet) has several. Under a
    gang scheduler (``GANG_SCHEDULERS_GATED``) whose gang holds fewer Pods than the workload runs (a Volcano Job's
    ``minAvailable``, a PyTorchJob's ``schedulingPolicy.minAvailable`` below its replicas), the ungater, which
    releases a gang once one domain has room for every Pod it waits for, would wait for room the gang does not
    need: such a workload keeps pod affinity."""
    if not resolved.gang and not resolved.gang_explicit:
        return (f"the placement gate waits for all of a gang's Pods, and this {workload.kind}'s operator counts "
                f"{resolved.gang_size} of its {resolved.pods} Pods in its gang (an elastic job counts its minimum)")
    if capable(workload.adapter, GroupedGangs):
        return f"the placement gate places one gang per workload, and a {workload.kind} gangs each group on its own"
    minimum = _gang_minimum(workload, gang, resolved)
    if target.backend in GANG_SCHEDULERS_GATED and resolved.gang and minimum < resolved.pods:
        return (f"the placement gate releases a gang once one domain has room for all of its Pods, and this "
                f"{workload.kind}'s gang holds {minimum} of its {resolved.pods} Pods: it would wait for room the "
                "gang does not need")
    return ""


def plan_pool_templates(workload: Workload, resolved: Resolved) -> tuple[PodTemplate, ...]:
    """The templates that get the pool's placement, RDMA, NCCL and storage: the ones whose Pods use GPUs
    (a launcher, a Ray head or an initializer does not), or every template when the workload uses no GPU
    but names a pool explicitly."""
    r = resolved
    if r.gpu_templates:
        return tuple(t for t, _ in r.gpu_templates)
    return tuple(workload.templates) if r.pool is not None and r.pool_explicit else ()


def plan_scale(workload: Workload, resolved: Resolved) -> Scale:
    """The kind's count fields, as its adapter declares them, with the values the object holds; advice changes
    the template with the most Pods among those that run GPUs (any, when none does)."""
    gpu_roots = {t.root for t, _ in resolved.gpu_templates}
    obj = workload.obj
    found = []
    for t in workload.templates:
        declared = t.spec.scale
        if declared is None:
            continue
        found.append((TemplateScale(t.root, tuple([ScaleField(p, get_path(obj, p)) for p in declared.fields]),
                                    tuple([ScaleField(p, get_path(obj, p)) for p in declared.follow]), t.pods),
                      t.root in gpu_roots))
    if len(found) < 2:  # one template (a Job's), or none: nothing to choose between
        return Scale(tuple(t for t, _ in found), 0)
    largest = max(range(len(found)), key=lambda i: (found[i][1], found[i][0].pods, -i))
    return Scale(tuple(t for t, _ in found), largest)


def plan_networks(templates: tuple[PodTemplate, ...], resolved: Resolved, policy: PolicySet,
                  claim_classes: ClaimClasses) -> tuple[tuple[Path, Brought], ...]:
    """What each pool template brings for its network itself (``network.brought_by``), where it brings any."""
    out = []
    for template in templates:
        brought = brought_by(template, policy, resolved.pool, claim_classes)
        if brought.own_network or brought.nccl:
            out.append((template.root, brought))
    return tuple(out)


def _shape(workload: Workload, resolved: Resolved) -> tuple:
    gpus = {t.root: n for t, n in resolved.gpu_templates}
    return (tuple((t.root, t.pods, gpus.get(t.root, 0)) for t in workload.templates), workload.pods,
            workload.gang_size)


def _without(obj: dict, path: Path) -> dict:
    """``obj`` without the field at ``path`` (copies along the path only)."""
    if not path:
        return obj
    head, rest = path[0], path[1:]
    if not isinstance(obj, dict) or head not in obj:
        return obj
    out = dict(obj)
    if rest:
        out[head] = _without(obj[head], rest) if isinstance(obj[head], dict) else obj[head]
    else:
        del out[head]
    return out


def _needed(workload: Workload, size_field: Path) -> int:
    """The gang size ``workload`` needs with nothing in its gang's size field (the whole gang, as the adapter
    counts it)."""
    bare = _without(workload.obj, size_field)
    return workload.adapter.gang_size(bare, workload.adapter.templates(bare))


def plan_resize(before: tuple[Workload, Resolved] | None, workload: Workload, resolved: Resolved,
                policy: PolicySet) -> ResizePlan | None:
    """What an UPDATE changes in the workload's size, or None when it changes none of its counts. ``before``
    is the stored object and its intent (None: unreadable, so the whole new size counts as growth)."""
    if before is not None and _shape(*before) == _shape(workload, resolved):
        return None
    old, old_r = before if before is not None else (None, Resolved(pods=0, gang_size=0))
    applied = read_applied(old.obj, policy) if old is not None else None
    created = applied.get("gang") if applied is not None else None
    created_gang = None if not isinstance(created, str) else "" if created == "none" else created
    size_field: Path | None = None
    values: tuple[object, object] = (None, None)
    needed = (old.gang_size if old is not None else 0, workload.gang_size)
    if created_gang:
        size_field = workload.adapter.gang(created_gang).size_path
        if size_field is not None:
            values = (get_path(old.obj, size_field) if old is not None else None, get_path(workload.obj, size_field))
            needed = (_needed(old, size_field) if old is not None else 0, _needed(workload, size_field))
    grown = (resolved.total_gpus > old_r.total_gpus or resolved.gpu_pods > old_r.gpu_pods
             or resolved.pods > old_r.pods)
    return ResizePlan((old_r.pods, resolved.pods), (old_r.gpu_pods, resolved.gpu_pods),
                      (old_r.total_gpus, resolved.total_gpus), (old.gang_size if old is not None else 0,
                                                                  workload.gang_size),
                      grown, created_gang, size_field, values, needed)


def make_plan(workload: Workload, resolved: Resolved, policy: PolicySet, cluster: ClusterView,
              claim_classes: ClaimClasses = unknown_claims, before: tuple[Workload, Resolved] | None = None,
              update: bool = False) -> Plan:
    """The plan of a decision on the cluster ``cluster`` shows (its discovery chooses what ``auto`` means);
    ``claim_classes`` tells the DeviceClasses of the request's DRA claims (the cluster's, in the request's
    namespace); for an UPDATE (``update``), with what it changes in the workload's size against the stored
    object (``before``)."""
    target = plan_target(policy, cluster)
    gang = plan_gang(workload, resolved, target)
    pool_templates = plan_pool_templates(workload, resolved)
    return Plan(target=target, gang=gang, colocation=plan_colocation(resolved, policy, target, gang, workload),
                pool_templates=pool_templates,
                scale=plan_scale(workload, resolved),
                brought=plan_networks(pool_templates, resolved, policy, claim_classes),
                resize=plan_resize(before, workload, resolved, policy) if update else None)
