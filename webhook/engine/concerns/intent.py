"""Read a training user's intent keys and resolve them against the policy set.

Intent is what the user wrote (``trainadmit.io/pool: h100-ib``); resolution is what the platform
means by it (the pool object, its topology level, the priority tier). Unknown names become
violations here, with the list of names the policy does know, so a typo gets a useful answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...policy import PolicySet
from ...policy.vocab import Action
from ..concern import Concern
from ..network import ClaimClasses, unknown_claims
from ..paths import Path, as_dict, as_list, field_path
from ..reads import INTENT_KEYS, Reads
from ..rule import RuleId, rule
from ..workloads import Aliased, PodTemplate, Workload, capable, pod_resource_total

if TYPE_CHECKING:  # types only: the engine runs on cached policy records too (policy.cache)
    from ...policy.models import CheckpointClassSpec, DatasetSpec, PoolSpec, PriorityTierSpec, TopologyLevel

MIG_PREFIX = "nvidia.com/mig-"

INVALID = rule("intent.invalid", Action.deny, "an intent value of the wrong form (gang not \"true\"/\"false\")")
UNKNOWN_POOL = rule("intent.unknown-pool", Action.deny, "the pool label names no Pool of the policy")
UNKNOWN_TOPOLOGY = rule("intent.unknown-topology", Action.deny, "the topology annotation names no level of the pool")
UNKNOWN_DATASET = rule("intent.unknown-dataset", Action.deny, "the datasets annotation names no Dataset")
UNKNOWN_CHECKPOINT = rule("intent.unknown-checkpoint", Action.deny,
                          "the checkpoint annotation names no CheckpointClass")
UNKNOWN_PRIORITY = rule("intent.unknown-priority", Action.deny, "the priority annotation names no PriorityTier")
NO_POOL = rule("intent.no-pool", Action.deny,
               "a GPU workload no pool fits: no pool for its GPU type, or it asks for a fabric no pool provides")
# the intent keys (and what matching reads: who owns the object), the fabrics asked for (annotation keys,
# resources), the GPU resources of every container
CONCERN = Concern("intent", rules=(INVALID, UNKNOWN_POOL, UNKNOWN_TOPOLOGY, UNKNOWN_DATASET, UNKNOWN_CHECKPOINT,
                                   UNKNOWN_PRIORITY, NO_POOL),
                  reads=Reads(metadata=("labels", "annotations", "ownerReferences"), annotations=(INTENT_KEYS,),
                              pod=("hostNetwork", "resourceClaims"), container=("resources",),
                              init_container=("resources",)))

Report = Callable[[RuleId, str, str, str], None]


@dataclass
class Resolved:
    """The resolved intent of one workload; fields are None when not applicable or unresolvable."""

    gpu_resources: list[str] = field(default_factory=list)
    gpu_resource: str | None = None
    gpu_templates: list[tuple[PodTemplate, int]] = field(default_factory=list)  # (template, GPUs per Pod)
    pods: int = 1  # Pods that run at once, all templates
    gang_size: int = 1  # Pods the operator counts in the gang
    pool_name: str | None = None
    pool: PoolSpec | None = None
    pool_explicit: bool = False
    gang: bool = False
    gang_explicit: bool = False
    level_name: str | None = None
    level: TopologyLevel | None = None
    level_explicit: bool = False
    datasets: list[tuple[str, DatasetSpec]] = field(default_factory=list)
    checkpoint: tuple[str, CheckpointClassSpec] | None = None
    tier: tuple[str, PriorityTierSpec] | None = None
    queue: str | None = None
    queue_explicit: bool = False
    fabrics: dict[str, str] = field(default_factory=dict)  # fabric the workload asks for -> what asked for it
    no_pool: str | None = None  # why no pool fits this GPU workload

    @property
    def gpus_per_pod(self) -> int:
        """Of the GPU templates (the largest, when they differ)."""
        return max((gpus for _, gpus in self.gpu_templates), default=0)

    @property
    def gpu_pods(self) -> int:
        """Of the Pods that run at once, the ones that request GPUs."""
        return sum(t.pods for t, _ in self.gpu_templates)

    @property
    def total_gpus(self) -> int:
        return sum(t.pods * gpus for t, gpus in self.gpu_templates)


def gpu_resources_of(workload: Workload, policy: PolicySet) -> list[str]:
    """GPU resource names any container of the workload asks for, in a stable order."""
    gpu = policy.gpu_resources
    return [n for n in workload.resource_names if n in gpu or n.startswith(MIG_PREFIX)]


def _asked(workload: Workload, wanted: frozenset[str], gpu_roots: set, claim_classes: ClaimClasses) -> dict[str, str]:
    """The keys of ``wanted`` (what can mean a fabric) the object carries, each with the first field that holds
    it: resources by name, annotation keys, DRA classes ("class:<name>"), and "hostNetwork" (on a template that
    runs GPUs; a CPU launcher's host network is not NCCL's)."""
    found: dict[str, str] = {}
    for key in workload.annotations:
        if key in wanted:
            found.setdefault(key, f'metadata.annotations["{key}"]')
    for template in workload.templates:
        for key in as_dict(template.pod_meta.get("annotations")):
            if key in wanted and key not in found:
                found[key] = field_path((*template.meta_path, "annotations", key))
        for ref in template.all_containers:
            resources = as_dict(ref.body.get("resources"))
            for section in ("limits", "requests"):
                for name in as_dict(resources.get(section)):
                    if name in wanted and name not in found:
                        found[name] = _user_field(workload, (*template.container_path(ref), "resources", section,
                                                             name))
        for i, entry in enumerate(as_list(template.pod_spec.get("resourceClaims"))):
            for device_class in (claim_classes(entry) if isinstance(entry, dict) else None) or ():
                found.setdefault(f"class:{device_class}", field_path((*template.spec_path, "resourceClaims", i)))
        if template.root in gpu_roots and template.pod_spec.get("hostNetwork") is True:
            found.setdefault("hostNetwork", field_path((*template.spec_path, "hostNetwork")))
    return found


def _user_field(workload: Workload, path: Path) -> str:
    """A template path as a field of the user's object (a TrainJob's container resources are in spec.trainer)."""
    if capable(workload.adapter, Aliased):
        for prefix, target in workload.adapter.aliases(workload.obj):
            if path[: len(prefix)] == prefix:
                return field_path((*target, *path[len(prefix):]))
    return field_path(path)


def fabrics_of(workload: Workload, policy: PolicySet, gpu_templates: list[PodTemplate] | None = None,
               claim_classes: ClaimClasses = unknown_claims) -> dict[str, str]:
    """The fabrics a workload asks for (fabric name -> the field that asks for it): those of Platform.spec.fabrics,
    and the fabric of each pool whose RDMA resources it requests. A fabric that yields to another the workload
    also asks for (``Fabric.yieldsTo``) is not asked for."""
    fabrics = policy.platform.fabrics
    asked = _asked(workload, policy.fabric_wanted, {t.root for t in gpu_templates or ()}, claim_classes)
    if not asked:
        return {}
    hits: dict[str, str] = {}
    for name, keys in policy.fabric_keys:
        where = next((asked[k] for k in keys if k in asked), None)
        if where is not None:
            hits[name] = where
    found = {name: where for name, where in hits.items() if not any(other in hits for other in fabrics[name].yieldsTo)}
    for name, pool in sorted(policy.pools.items()):
        hit = next((asked[r] for r in pool.rdma.resources if r in asked), None) if pool.rdma else None
        if hit is not None:
            found.setdefault(fabric_name(name, pool), hit)
    return found


def fabric_name(pool_name: str, pool: PoolSpec) -> str:
    """A pool's fabric: the name it declares, or its own name (a fabric only it provides)."""
    return pool.fabric or pool_name


def _fits(pool_name: str, pool: PoolSpec, fabrics: dict[str, str]) -> bool:
    return all(f == fabric_name(pool_name, pool) for f in fabrics)


@dataclass(frozen=True)
class NoPool:
    """Why no pool fits a GPU workload, the field of the object that makes it so, and what would."""

    why: str
    path: str
    fix: str


_IGNORE = " (or set Platform.spec.noPool: ignore to leave such workloads untouched)"


def _no_pool_for_fabrics(fabrics: dict[str, str], pools: str, fits: str) -> NoPool:
    asked = ", ".join(f"{f} ({where})" for f, where in sorted(fabrics.items()))
    first = sorted(fabrics.items())[0]
    return NoPool(f"it asks for fabric {asked}, which {pools}", first[1],
                  f"ask the platform team for a pool with fabric {first[0]}, or remove {first[1]} {fits}" + _IGNORE)


def _default_pool(policy: PolicySet, resource: str, fabrics: dict[str, str],
                  gpu_path: str) -> tuple[str | None, NoPool | None]:
    """(pool, None) for the pool a workload without a pool label gets, or (None, why none fits)."""
    candidates = sorted(n for n, p in policy.pools.items() if p.gpu.resource == resource)
    if not candidates:
        offered = sorted({p.gpu.resource for p in policy.pools.values()})
        instead = f"ask for {' or '.join(offered)} at {gpu_path} (the GPUs the pools have), or " if offered else ""
        return None, NoPool(f"no pool provides {resource}", gpu_path,
                            f"{instead}ask the platform team for a pool of {resource}" + _IGNORE)
    fitting = [n for n in candidates if _fits(n, policy.pools[n], fabrics)]
    if not fitting:
        offered = ", ".join(f"{n} ({fabric_name(n, policy.pools[n])})" for n in candidates)
        default = policy.default_pools.get(resource) or candidates[0]
        return None, _no_pool_for_fabrics(fabrics, f"no pool for {resource} provides (pools: {offered})",
                                          f"to run on pool {default}")
    default = policy.default_pools.get(resource)
    return (default if default in fitting else fitting[0]), None


def gpu_request(template: PodTemplate, resource: str) -> Path:
    """Where a template asks for its GPUs: the first regular (else init) container's limit, else request, of
    ``resource``; its containers when none does."""
    for ref in sorted(template.all_containers, key=lambda c: c.group != "containers"):
        resources = as_dict(ref.body.get("resources"))
        for section in ("limits", "requests"):
            if resource in as_dict(resources.get(section)):
                return (*template.container_path(ref), "resources", section, resource)
    return (*template.spec_path, "containers")


def has_intent(workload: Workload, policy: PolicySet) -> bool:
    prefix = policy.platform.intentPrefix + "/"
    applied = policy.keys.applied
    return any(k.startswith(prefix) and k != applied for k in (*workload.labels, *workload.annotations))


def resolve(workload: Workload, policy: PolicySet, gpu_resources: list[str], report: Report,
            claim_classes: ClaimClasses = unknown_claims) -> Resolved:
    """Resolve intent; ``report(rule, path, message, hint)`` records each problem; ``claim_classes`` tells the
    DeviceClasses of the DRA claims the templates make (a fabric's NICs may be claimed that way)."""
    keys = policy.keys
    labels, annotations = workload.labels, workload.annotations
    out = Resolved()
    out.gpu_resources = gpu_resources
    out.gpu_resource = out.gpu_resources[0] if out.gpu_resources else None
    out.pods = workload.pods
    out.gang_size = workload.gang_size
    if out.gpu_resource:
        for template in workload.templates:
            gpus = pod_resource_total(template, out.gpu_resource)
            if gpus > 0:
                out.gpu_templates.append((template, gpus))

    # pool (label), and the fabric it must provide
    out.fabrics = fabrics_of(workload, policy, [t for t, _ in out.gpu_templates], claim_classes)
    no_pool: NoPool | None = None
    pool_value = labels.get(keys.pool)
    if pool_value is not None:
        out.pool_explicit = True
        if pool_value not in policy.pools:
            report(UNKNOWN_POOL, f'metadata.labels["{keys.pool}"]',
                   f"pool {pool_value!r} is not defined by the platform policy",
                   f"use one of: {', '.join(sorted(policy.pools)) or '(none defined)'}")
        else:
            # another pool's RDMA resources on this pool are rdma.pool-without-rdma; a fabric of another
            # cloud means no node of this pool can run the workload
            foreign = {f: w for f, w in out.fabrics.items() if f in policy.platform.fabrics
                       and f != fabric_name(pool_value, policy.pools[pool_value])}
            if foreign and out.gpu_resource:
                provided = fabric_name(pool_value, policy.pools[pool_value])
                none = _no_pool_for_fabrics(foreign, f"pool {pool_value} ({provided}) does not provide",
                                            f"to run on pool {pool_value}")
                out.no_pool, no_pool = none.why, none
            else:
                out.pool_name = pool_value
    elif out.gpu_resource:
        gpu_path = _user_field(workload, gpu_request(out.gpu_templates[0][0], out.gpu_resource)) \
            if out.gpu_templates else "spec"
        out.pool_name, no_pool = _default_pool(policy, out.gpu_resource, out.fabrics, gpu_path)
        out.no_pool = no_pool.why if no_pool else None
    out.pool = policy.pools.get(out.pool_name) if out.pool_name else None
    if out.no_pool and no_pool is not None and policy.platform.noPool == "deny":
        report(NO_POOL, no_pool.path, f"no pool fits this {workload.kind}: {no_pool.why}", no_pool.fix)

    # gang (annotation)
    gang_value = annotations.get(keys.gang)
    if gang_value is not None:
        out.gang_explicit = True
        if gang_value in ("true", "false"):
            out.gang = gang_value == "true"
        else:
            report(INVALID, f'metadata.annotations["{keys.gang}"]',
                   f"must be \"true\" or \"false\", got {gang_value!r}", f'set {keys.gang}: "true" or "false"')
    if not out.gang_explicit:
        out.gang = out.gang_size > 1 and out.gpu_pods > 0

    # topology level (annotation)
    level_value = annotations.get(keys.topology)
    if out.pool is not None:
        topo = out.pool.topology
        if level_value is not None:
            out.level_explicit = True
            if level_value != "any" and topo.level(level_value) is None:
                names = [lv.name for lv in topo.levels] + ["any"]
                report(UNKNOWN_TOPOLOGY, f'metadata.annotations["{keys.topology}"]',
                       f"pool {out.pool_name} has no topology level {level_value!r}",
                       f"use one of: {', '.join(names)}")
                level_value = None
        chosen = level_value if level_value is not None else topo.default
        out.level_name = chosen
        out.level = topo.level(chosen) if chosen != "any" else None

    # datasets (annotation, comma list)
    ds_value = annotations.get(keys.datasets)
    if ds_value is not None:
        for name in (n.strip() for n in str(ds_value).split(",")):
            if not name:
                continue
            spec = policy.datasets.get(name)
            if spec is None:
                report(UNKNOWN_DATASET, f'metadata.annotations["{keys.datasets}"]',
                       f"dataset {name!r} is not defined by the platform policy",
                       f"use one of: {', '.join(sorted(policy.datasets)) or '(none defined)'}")
            elif all(n != name for n, _ in out.datasets):
                out.datasets.append((name, spec))

    # checkpoint class (annotation)
    ck_value = annotations.get(keys.checkpoint, policy.platform.defaults.checkpoint)
    if ck_value != "none":
        spec = policy.checkpoints.get(ck_value)
        if spec is None:
            report(UNKNOWN_CHECKPOINT, f'metadata.annotations["{keys.checkpoint}"]',
                   f"checkpoint class {ck_value!r} is not defined by the platform policy",
                   f"use one of: {', '.join([*sorted(policy.checkpoints), 'none'])}")
        else:
            out.checkpoint = (ck_value, spec)

    # priority tier (annotation)
    tier_value = annotations.get(keys.priority, policy.platform.defaults.priority)
    if tier_value is not None:
        spec = policy.tiers.get(tier_value)
        if spec is None:
            report(UNKNOWN_PRIORITY, f'metadata.annotations["{keys.priority}"]',
                   f"priority tier {tier_value!r} is not defined by the platform policy",
                   f"use one of: {', '.join(sorted(policy.tiers)) or '(none defined)'}")
        else:
            out.tier = (tier_value, spec)

    # queue (label)
    queue_value = labels.get(keys.queue)
    out.queue_explicit = queue_value is not None
    out.queue = queue_value if queue_value is not None else policy.default_queue
    return out
