"""Read a training user's intent keys and resolve them against the policy set.

Intent is what the user wrote (``trainadmit.io/pool: h100-ib``); resolution is what the platform
means by it (the pool object, its topology level, the priority tier). Unknown names become
violations here, with the list of names the policy does know, so a typo gets a useful answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from typing import TYPE_CHECKING

from ..grammars.lazydataclass import dataclass
from ..policy import PolicySet
from ..policy.vocab import Action
from .demand import MIG_PREFIX, Demand, TemplateGpus, gpu_resources_of
from .dra import DeviceAsk, pod_claims
from .network import ClaimClasses, unknown_claims
from .paths import Path, as_dict, as_list, field_path
from .rule import RuleId, rule
from .workloads import Aliased, PodTemplate, Workload, capable, pod_resource_total

if TYPE_CHECKING:  # types only: the engine runs on cached policy records too (policy.cache)
    from ..policy.models import CheckpointClassSpec, DatasetSpec, PoolSpec, PriorityTierSpec, TopologyLevel

__all__ = ["INTENT_RULES", "MIG_PREFIX", "Resolved", "gpu_resources_of", "has_intent", "resolve"]

INVALID = rule("intent.invalid", Action.deny, "an intent value of the wrong form (gang not \"true\"/\"false\")")
UNKNOWN_POOL = rule("intent.unknown-pool", Action.deny, "the pool label names no Pool of the policy")
UNKNOWN_TOPOLOGY = rule("intent.unknown-topology", Action.deny, "the topology annotation names no level of the pool")
UNKNOWN_DATASET = rule("intent.unknown-dataset", Action.deny, "the datasets annotation names no Dataset")
UNKNOWN_CHECKPOINT = rule("intent.unknown-checkpoint", Action.deny,
                          "the checkpoint annotation names no CheckpointClass")
UNKNOWN_PRIORITY = rule("intent.unknown-priority", Action.deny, "the priority annotation names no PriorityTier")
NO_POOL = rule("intent.no-pool", Action.deny,
               "a GPU workload no pool fits: no pool for its GPU type, or it asks for a fabric no pool provides")
INTENT_RULES = (INVALID, UNKNOWN_POOL, UNKNOWN_TOPOLOGY, UNKNOWN_DATASET, UNKNOWN_CHECKPOINT, UNKNOWN_PRIORITY,
                NO_POOL)

Report = Callable[[RuleId, str, str, str], None]


@dataclass
class Resolved:
    """The resolved intent of one workload; fields are None when not applicable or unresolvable."""

    gpu_resources: list[str] = field(default_factory=list)
    gpu_resource: str | None = None  # the extended resource the containers name, if any
    gpu_classes: list[str] = field(default_factory=list)  # the DRA DeviceClasses of GPUs the claims name
    gpu_requests: list[tuple[DeviceAsk, ...]] = field(default_factory=list)  # their GPU requests (alternatives)
    gpu_templates: list[tuple[PodTemplate, int]] = field(default_factory=list)  # (template, GPUs per Pod)
    # GPUs per Pod from the template's own DRA claims; from ResourceClaims the Pods share (counted once for the
    # workload: name -> GPUs, and per template how many of its GPUs per Pod they are); the Pod's names for the
    # claims that hold GPUs (containers listing them run the training)
    claimed_in: dict[Path, int] = field(default_factory=dict)
    shared_gpus: dict[str, int] = field(default_factory=dict)
    shared_in: dict[Path, int] = field(default_factory=dict)
    gpu_claims: dict[Path, frozenset[str]] = field(default_factory=dict)
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
        """Of the GPU templates (the largest, when they differ); of one, its own without a generator."""
        templates = self.gpu_templates
        if len(templates) == 1:
            return templates[0][1]
        return max((gpus for _, gpus in templates), default=0)

    @property
    def gpu_pods(self) -> int:
        """Of the Pods that run at once, the ones that request GPUs (asked a dozen times a decision, mostly of one
        GPU template: that one's Pods without a generator)."""
        templates = self.gpu_templates
        if len(templates) == 1:
            return templates[0][0].pods
        return sum(t.pods for t, _ in templates)

    @property
    def total_gpus(self) -> int:
        """Every GPU the workload holds at once: each Pod's own, and each shared ResourceClaim's once."""
        own = sum(t.pods * (gpus - self.shared_in.get(t.root, 0)) for t, gpus in self.gpu_templates)
        return own + sum(self.shared_gpus.values())

    @property
    def extended_gpus(self) -> int:
        """The GPUs asked for as the extended resource (what ``requests.<resource>`` quota counts)."""
        return sum(t.pods * (gpus - self.claimed_in.get(t.root, 0) - self.shared_in.get(t.root, 0))
                   for t, gpus in self.gpu_templates)

    @property
    def claimed_gpus(self) -> int:
        """The GPUs asked for through DRA claims (what the DeviceClass's device quota counts)."""
        return self.total_gpus - self.extended_gpus

    @property
    def gpu_unit(self) -> str:
        """What the workload's GPUs are called in messages: its resource, or its DeviceClass's devices."""
        if self.gpu_resource:
            return self.gpu_resource
        return f"{self.gpu_classes[0]} devices" if self.gpu_classes else "GPUs"


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
        for prefix, target in workload.adapter.aliases(workload.obj, workload.inherited):
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


def provides(pool: PoolSpec, request: tuple[DeviceAsk, ...]) -> bool:
    """Whether one of a DRA request's alternatives is for the pool: a class the pool lists, with every
    selector the pool names for it (as written, spaces aside)."""
    return _specificity(pool, request) is not None


def _specificity(pool: PoolSpec, request: tuple[DeviceAsk, ...]) -> int | None:
    """How many of the pool's selectors a request it is for carries (None: not for the pool): a request that
    carries a pool's selectors is for that pool rather than for one that takes any device of the class."""
    best = None
    for ask in request:
        for ref in pool.gpu.deviceClasses:
            if ref.name == ask.device_class and all(" ".join(s.split()) in ask.selectors for s in ref.selectors):
                best = max(best or 0, len(ref.selectors))
    return best


def unprovided(pool: PoolSpec, resource: str | None, requests: list[tuple[DeviceAsk, ...]]) -> str | None:
    """What of the workload's GPUs the pool does not provide (its resource, a DRA class), or None."""
    if resource is not None and pool.gpu.resource != resource:
        return resource
    missing = [r for r in requests if not provides(pool, r)]
    if missing:
        return " or ".join(dict.fromkeys(f"DeviceClass {a.device_class}" for a in missing[0]))
    return None


def _default_pool(policy: PolicySet, resource: str | None, fabrics: dict[str, str], gpu_path: str,
                  requests: list[tuple[DeviceAsk, ...]] = ()) -> tuple[str | None, NoPool | None]:
    """(pool, None) for the pool a workload without a pool label gets, or (None, why none fits)."""
    candidates = sorted(n for n, p in policy.pools.items() if unprovided(p, resource, list(requests)) is None)
    if requests and candidates:  # the pools whose selectors the requests carry, before those taking any device
        rank = {n: sum(_specificity(policy.pools[n], r) or 0 for r in requests) for n in candidates}
        candidates = [n for n in candidates if rank[n] == max(rank.values())]
    what = resource or " and ".join(dict.fromkeys(f"DeviceClass {r[0].device_class}" for r in requests))
    if not candidates:
        if resource is None:
            fix = "claim a DeviceClass a pool lists (Pool.spec.gpu.deviceClasses), or ask the platform team to list " \
                  "this one"
        else:
            offered = sorted({p.gpu.resource for p in policy.pools.values()})
            instead = f"ask for {' or '.join(offered)} at {gpu_path} (the GPUs the pools have), or " if offered else ""
            fix = f"{instead}ask the platform team for a pool of {resource}"
        return None, NoPool(f"no pool provides {what}", gpu_path, fix + _IGNORE)
    fitting = [n for n in candidates if _fits(n, policy.pools[n], fabrics)]
    if not fitting:
        offered = ", ".join(f"{n} ({fabric_name(n, policy.pools[n])})" for n in candidates)
        default = (policy.default_pools.get(resource) if resource else None) or candidates[0]
        return None, _no_pool_for_fabrics(fabrics, f"no pool for {what} provides (pools: {offered})",
                                          f"to run on pool {default}")
    default = policy.default_pools.get(resource) if resource else next(
        (n for n in fitting if policy.pools[n].default), None)
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


def _asking_gpus(workload: Workload, demand: Demand) -> list[PodTemplate]:
    """The templates whose Pods ask for GPUs (a resource or a claim), before the pool is known."""
    return [t for t in workload.templates
            if (asked := demand.templates.get(t.root)) is not None and (asked.extended > 0 or asked.claimed)]


def _first_gpu_field(workload: Workload, demand: Demand, resource: str | None) -> str:
    """The first field of the user's object that asks for the workload's GPUs: a container's resource, else a
    DRA claim holding GPUs; ``spec`` when none is known."""
    for template in _asking_gpus(workload, demand):
        asked = demand.templates[template.root]
        if resource and asked.extended > 0:
            return _user_field(workload, gpu_request(template, resource))
        claim = next((c for c in pod_claims(template.pod_spec) if c.name in asked.claims), None)
        if claim is not None:
            return field_path((*template.spec_path, "resourceClaims", claim.index))
    return "spec"


def _extended_only(workload: Workload, gpu_resources: list[str]) -> Demand:
    resource = gpu_resources[0] if gpu_resources else None
    return Demand(resources=list(gpu_resources), templates={
        t.root: TemplateGpus(extended=pod_resource_total(t, resource) if resource else 0) for t in workload.templates})


def _count_gpus(out: Resolved, workload: Workload, demand: Demand) -> None:
    """GPUs per Pod of each template that asks for any, from every source; a claim for all of a node's GPUs
    counts the pool's GPUs per node (none without a pool)."""
    per_node = out.pool.gpu.perNode if out.pool is not None else 0
    for template in workload.templates:
        asked = demand.templates.get(template.root)
        if asked is None:
            continue
        own = asked.own.count(per_node)
        shared = {name: gpus.count(per_node) for name, gpus in asked.shared.items()}
        gpus = asked.extended + own + sum(shared.values())
        if gpus <= 0:
            continue
        out.gpu_templates.append((template, gpus))
        if own:
            out.claimed_in[template.root] = own
        if shared:
            out.shared_in[template.root] = sum(shared.values())
            out.shared_gpus.update(shared)
        if asked.claims:
            out.gpu_claims[template.root] = asked.claims


def has_intent(workload: Workload, policy: PolicySet) -> bool:
    prefix = policy.platform.intentPrefix + "/"
    applied = policy.keys.applied
    return any(k.startswith(prefix) and k != applied for k in (*workload.labels, *workload.annotations))


def resolve(workload: Workload, policy: PolicySet, gpu_resources: list[str], report: Report,
            demand: Demand | None = None, claim_classes: ClaimClasses = unknown_claims) -> Resolved:
    """Resolve intent; ``report(rule, path, message, hint)`` records each problem. ``demand`` is what the
    Pods ask for (``demand.gpu_demand``: extended resources and DRA claims); without it, the extended
    ``gpu_resources`` alone. ``claim_classes`` tells the DeviceClasses of the DRA claims the templates make
    (a fabric's NICs may be claimed that way)."""
    keys = policy.keys
    labels, annotations = workload.labels, workload.annotations
    out = Resolved()
    if demand is None:
        demand = _extended_only(workload, gpu_resources)
    out.gpu_resources = gpu_resources
    out.gpu_resource = out.gpu_resources[0] if out.gpu_resources else None
    out.gpu_classes = demand.gpu_classes
    out.gpu_requests = list(demand.gpu_requests)
    out.pods = workload.pods
    out.gang_size = workload.gang_size

    # pool (label), and the fabric it must provide
    out.fabrics = fabrics_of(workload, policy, _asking_gpus(workload, demand), claim_classes)
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
            if foreign and (out.gpu_resource or demand.gpu_requests):
                provided = fabric_name(pool_value, policy.pools[pool_value])
                none = _no_pool_for_fabrics(foreign, f"pool {pool_value} ({provided}) does not provide",
                                            f"to run on pool {pool_value}")
                out.no_pool, no_pool = none.why, none
            else:
                out.pool_name = pool_value
    elif out.gpu_resource or demand.gpu_requests:
        gpu_path = _first_gpu_field(workload, demand, out.gpu_resource)
        out.pool_name, no_pool = _default_pool(policy, out.gpu_resource, out.fabrics, gpu_path, demand.gpu_requests)
        out.no_pool = no_pool.why if no_pool else None
    out.pool = policy.pools.get(out.pool_name) if out.pool_name else None
    _count_gpus(out, workload, demand)
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
        named = None  # the level the annotation names, looked up once
        if level_value is not None:
            out.level_explicit = True
            named = topo.level(level_value) if level_value != "any" else None
            if level_value != "any" and named is None:
                names = [lv.name for lv in topo.levels] + ["any"]
                report(UNKNOWN_TOPOLOGY, f'metadata.annotations["{keys.topology}"]',
                       f"pool {out.pool_name} has no topology level {level_value!r}",
                       f"use one of: {', '.join(names)}")
                level_value = None
        chosen = level_value if level_value is not None else topo.default
        out.level_name = chosen
        out.level = None if chosen == "any" else named if level_value is not None else topo.level(chosen)

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

    # queue (label), else the policy's; neither: the backend's own (the plan's target.default_queue)
    queue_value = labels.get(keys.queue)
    out.queue_explicit = queue_value is not None
    out.queue = queue_value if queue_value is not None else policy.platform.gang.queue
    return out
