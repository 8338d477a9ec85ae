"""The GPUs a workload asks for, from every place a Pod can ask for one: extended resources and DRA claims.

A Pod gets GPUs through an extended resource in a container's limits (``nvidia.com/gpu: 8``, the device
plugin's way) or through a DRA claim (``spec.resourceClaims``) whose requests name a DeviceClass of GPUs: one
the policy names (``Pool.spec.gpu.deviceClasses``, ``Platform.spec.gpuDeviceClasses``), or a class whose
``extendedResourceName`` is a GPU resource. Every rule that speaks of GPUs (quota, whole nodes, domain fit,
gang, pool) runs on what this module counts, so a GPU asked for either way is one GPU.

Counting follows the scheduler (``dra``): a template's claims are allocated once per Pod, a ResourceClaim once
for every Pod naming it; ``All`` takes every GPU of a node (the pool's GPUs per node, once the pool is known);
``firstAvailable`` counts its largest alternative (the Pod may get it). The claim objects come from the
cluster view (the live view, a snapshot, or the objects given with the workload to `trainadmit check`): one
it cannot look up leaves the GPUs it holds uncounted, and says so.
"""

from __future__ import annotations

from dataclasses import field

from ..grammars.lazydataclass import dataclass
from ..policy import PolicySet
from .clusterview import DEVICE_CLASS, RESOURCE_CLAIM, RESOURCE_CLAIM_TEMPLATE, ClusterView, Presence, RefKind
from .dra import DeviceAsk, DeviceRequest, PodClaim, claim_spec, pod_claims, requests
from .paths import Path, as_dict
from .workloads import PodTemplate, Workload, pod_resource_total

MIG_PREFIX = "nvidia.com/mig-"


@dataclass(frozen=True)
class ClaimGpus:
    """The GPUs one claim holds: ``exact`` devices, and ``all`` requests for every GPU of a node."""

    exact: int = 0
    all: int = 0

    def count(self, per_node: int) -> int:
        return self.exact + self.all * per_node


@dataclass
class TemplateGpus:
    """What one Pod of a template asks for: ``extended`` GPUs of the workload's GPU resource, the GPUs of its
    own claims (one set per Pod), and the shared ResourceClaims it names (one set for the workload)."""

    extended: int = 0
    own: ClaimGpus = ClaimGpus()
    shared: dict[str, ClaimGpus] = field(default_factory=dict)  # ResourceClaim name -> its GPUs
    claims: frozenset[str] = frozenset()  # the Pod's names for the claims that hold GPUs

    @property
    def claimed(self) -> bool:
        return bool(self.own.exact or self.own.all or self.shared)


@dataclass
class Demand:
    """The GPUs of a workload: the GPU resources its containers name, the GPU requests of its claims (each a
    tuple of alternatives: how the pool is chosen), per template what one Pod asks for, and what could not
    be counted (claims no view holds)."""

    resources: list[str] = field(default_factory=list)
    gpu_requests: list[tuple[DeviceAsk, ...]] = field(default_factory=list)
    templates: dict[Path, TemplateGpus] = field(default_factory=dict)
    uncounted: list[str] = field(default_factory=list)  # "ResourceClaimTemplate team-a/gpu-8 (claim gpu)"
    missing: list[str] = field(default_factory=list)  # named objects the view knows do not exist

    @property
    def gpu(self) -> bool:
        return bool(self.resources or self.gpu_requests)

    @property
    def gpu_classes(self) -> list[str]:
        return list(dict.fromkeys(a.device_class for request in self.gpu_requests for a in request))


def gpu_resources_of(workload: Workload, policy: PolicySet) -> list[str]:
    """GPU resource names any container of the workload asks for, in a stable order."""
    gpu = policy.gpu_resources
    return [n for n in workload.resource_names if n in gpu or n.startswith(MIG_PREFIX)]


def claim_kind(claim: PodClaim) -> RefKind:
    return RESOURCE_CLAIM if claim.shared else RESOURCE_CLAIM_TEMPLATE


def is_gpu_class(name: str, policy: PolicySet, cluster: ClusterView) -> bool:
    """A DeviceClass of GPUs: named by the policy, or serving a GPU resource (``extendedResourceName``)."""
    if name in policy.gpu_device_classes:
        return True
    presence, obj = cluster.reference(DEVICE_CLASS, name)
    extended = as_dict(as_dict(obj).get("spec")).get("extendedResourceName") if presence is Presence.present else None
    return isinstance(extended, str) and (extended in policy.gpu_resources or extended.startswith(MIG_PREFIX))


def _gpu_requests(found: list[DeviceRequest], policy: PolicySet, cluster: ClusterView,
                  classes: dict[str, bool]) -> tuple[ClaimGpus, list[tuple[DeviceAsk, ...]]]:
    exact = every = 0
    asks: list[tuple[DeviceAsk, ...]] = []
    for request in found:
        gpu = []
        for ask in request.asks:
            if ask.device_class not in classes:
                classes[ask.device_class] = is_gpu_class(ask.device_class, policy, cluster)
            if classes[ask.device_class]:
                gpu.append(ask)
        if not gpu:
            continue
        asks.append(tuple(gpu))
        if request.allocated is not None:  # an allocated claim says what it got
            exact += request.allocated
        elif any(a.count is None for a in gpu):
            every += 1
        else:
            exact += max(a.count or 0 for a in gpu)
    return ClaimGpus(exact, every), asks


def gpu_demand(workload: Workload, policy: PolicySet, cluster: ClusterView, namespace: str | None) -> Demand:
    """What the workload's Pods ask for (see the module doc); ``namespace`` None: a cluster-scoped object,
    whose claims are looked up in each workload's namespace instead (a ClusterTrainingRuntime's)."""
    demand = Demand(resources=gpu_resources_of(workload, policy))
    resource = demand.resources[0] if demand.resources else None
    classes: dict[str, bool] = {}
    for template in workload.templates:
        demand.templates[template.root] = _template(template, resource, policy, cluster, namespace, classes, demand)
    return demand


def _template(template: PodTemplate, resource: str | None, policy: PolicySet, cluster: ClusterView,
              namespace: str | None, classes: dict[str, bool], demand: Demand) -> TemplateGpus:
    gpus = TemplateGpus(extended=pod_resource_total(template, resource) if resource else 0)
    if namespace is None:
        return gpus
    own = ClaimGpus()
    holding: set[str] = set()
    for claim in pod_claims(template.pod_spec):
        kind = claim_kind(claim)
        presence, obj = cluster.reference(kind, claim.object_name, namespace)
        where = f"{kind.kind} {namespace}/{claim.object_name} (claim {claim.name} of {template.label})"
        if presence is Presence.unknown:
            demand.uncounted.append(where)
            continue
        if presence is not Presence.present or obj is None:
            demand.missing.append(where)
            continue
        counted, asks = _gpu_requests(requests(claim_spec(kind.kind, obj), as_dict(obj.get("status"))), policy,
                                      cluster, classes)
        if not asks:
            continue
        demand.gpu_requests.extend(asks)
        holding.add(claim.name)
        if claim.shared:
            gpus.shared[claim.object_name] = counted
        else:
            own = ClaimGpus(own.exact + counted.exact, own.all + counted.all)
    gpus.own = own
    gpus.claims = frozenset(holding)
    return gpus
