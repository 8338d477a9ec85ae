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
from ..reads import INTENT_KEYS, Reads
from ..rule import RuleId, rule
from ..workloads import PodTemplate, Workload, pod_resource_total

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
                              container=("resources",), init_container=("resources",)))

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


def fabrics_of(workload: Workload, policy: PolicySet) -> dict[str, str]:
    """The fabrics a workload asks for (fabric name -> the resource or annotation that asks): those of
    Platform.spec.fabrics, and the fabric of each pool whose RDMA resources it requests."""
    names = set(workload.resource_names)
    annotations = set(workload.annotations)
    for template in workload.templates:
        annotations.update(k for k in (template.pod_meta.get("annotations") or {}) if isinstance(k, str))
    found: dict[str, str] = {}
    for name, fabric in policy.platform.fabrics.items():
        hit = next((r for r in fabric.resources if r in names), None) or \
            next((a for a in fabric.annotations if a in annotations), None)
        if hit is not None:
            found[name] = hit
    for name, pool in sorted(policy.pools.items()):
        hit = next((r for r in pool.rdma.resources if r in names), None) if pool.rdma else None
        if hit is not None:
            found.setdefault(fabric_name(name, pool), hit)
    return found


def fabric_name(pool_name: str, pool: PoolSpec) -> str:
    """A pool's fabric: the name it declares, or its own name (a fabric only it provides)."""
    return pool.fabric or pool_name


def _fits(pool_name: str, pool: PoolSpec, fabrics: dict[str, str]) -> bool:
    return all(f == fabric_name(pool_name, pool) for f in fabrics)


def _default_pool(policy: PolicySet, resource: str, fabrics: dict[str, str]) -> tuple[str | None, str | None]:
    """(pool, None) for the pool a workload without a pool label gets, or (None, why none fits)."""
    candidates = sorted(n for n, p in policy.pools.items() if p.gpu.resource == resource)
    if not candidates:
        return None, f"no pool provides {resource}"
    fitting = [n for n in candidates if _fits(n, policy.pools[n], fabrics)]
    if not fitting:
        asked = ", ".join(f"{f} ({what})" for f, what in sorted(fabrics.items()))
        offered = ", ".join(f"{n} ({fabric_name(n, policy.pools[n])})" for n in candidates)
        return None, f"it asks for fabric {asked}, which no pool for {resource} provides (pools: {offered})"
    default = policy.default_pools.get(resource)
    return (default if default in fitting else fitting[0]), None


def has_intent(workload: Workload, policy: PolicySet) -> bool:
    prefix = policy.platform.intentPrefix + "/"
    applied = policy.keys.applied
    return any(k.startswith(prefix) and k != applied for k in (*workload.labels, *workload.annotations))


def resolve(workload: Workload, policy: PolicySet, gpu_resources: list[str], report: Report) -> Resolved:
    """Resolve intent; ``report(rule, path, message, hint)`` records each problem."""
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
    out.fabrics = fabrics_of(workload, policy)
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
                out.no_pool = (f"it asks for fabric {', '.join(f'{f} ({w})' for f, w in sorted(foreign.items()))}, "
                               f"which pool {pool_value} ({fabric_name(pool_value, policy.pools[pool_value])}) "
                               "does not provide")
            else:
                out.pool_name = pool_value
    elif out.gpu_resource:
        out.pool_name, out.no_pool = _default_pool(policy, out.gpu_resource, out.fabrics)
    out.pool = policy.pools.get(out.pool_name) if out.pool_name else None
    if out.no_pool and policy.platform.noPool == "deny":
        report(NO_POOL, f'metadata.labels["{keys.pool}"]' if out.pool_explicit else "spec",
               f"no pool fits this {workload.kind}: {out.no_pool}",
               "run it where its fabric is, or ask the platform team for a pool (or set Platform.spec.noPool: "
               "ignore to leave such workloads untouched)")

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
    out.queue = queue_value if queue_value is not None else policy.platform.gang.queue
    return out
