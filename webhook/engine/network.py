"""What a pod template already brings for its network, read once, before anything is injected.

A training manifest written for a cloud or a cluster carries its own network: NICs from a device plugin
(``rdma/ib``, an SR-IOV VF, a cloud's NIC resource), NICs claimed through DRA, secondary networks (Multus,
GKE multi-networking), the host's own network, and NCCL variables that name the transport. What a template
brings is the user's choice, so a template that brings its own network gets none of the pool's RDMA
resources, Multus networks, IPC_LOCK or NCCL transport variables: a second RDMA device plugin's resource can
leave the Pod unschedulable, a Multus network does nothing on a ``hostNetwork`` Pod, and the pool's HCA names
misdirect NCCL on another NIC. It may still get placement, storage, priority and the gang. Where what it
brings contradicts the pool (a fabric the pool lacks: EFA, GKE's interfaces, the host's network), intent
resolution gives it no pool at all (``intent.no-pool``).

What trainadmit itself wrote on an earlier pass (the pool's own resources and Multus value, claims named
``ta-…`` like its volumes) is not something the template brings, so a second pass decides as the first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..grammars.nccl import is_transport_variable
from ..policy import PolicySet
from .paths import as_dict, as_list
from .workloads import PodTemplate

if TYPE_CHECKING:  # types only: the engine runs on cached policy records too (policy.cache)
    from ..policy.models import PoolSpec

MULTUS_NETWORKS = "k8s.v1.cni.cncf.io/networks"
GKE_INTERFACES = "networking.gke.io/interfaces"
GKE_DEFAULT_INTERFACE = "networking.gke.io/default-interface"
# pod annotations that attach networks of the user's choosing (Multus; GKE multi-networking)
NETWORK_ANNOTATIONS = (MULTUS_NETWORKS, GKE_INTERFACES, GKE_DEFAULT_INTERFACE)
OWN_CLAIM_PREFIX = "ta-"  # names trainadmit gives what it adds to a pod spec (volumes, claims)

# A pod's ``resourceClaims`` entry -> the DeviceClasses its devices come from (from the ResourceClaimTemplate or
# ResourceClaim it names), or None when that object is not known here.
ClaimClasses = Callable[[dict], "tuple[str, ...] | None"]


def unknown_claims(entry: dict) -> None:
    """No ResourceClaimTemplate or ResourceClaim is known: a claim's devices cannot be told."""
    return None


def device_classes(claim: dict) -> tuple[str, ...]:
    """The DeviceClasses a ResourceClaimTemplate's or ResourceClaim's requests name (``exactly`` and every
    ``firstAvailable`` alternative; the v1beta1 flat ``deviceClassName`` too)."""
    spec = as_dict(claim.get("spec"))
    if claim.get("kind") == "ResourceClaimTemplate":
        spec = as_dict(spec.get("spec"))
    found: dict[str, None] = {}
    for request in as_list(as_dict(spec.get("devices")).get("requests")):
        request = as_dict(request)
        for source in (request, as_dict(request.get("exactly")), *map(as_dict, as_list(request.get("firstAvailable")))):
            name = source.get("deviceClassName")
            if isinstance(name, str) and name:
                found[name] = None
    return tuple(found)


@dataclass(frozen=True)
class Brought:
    """What one pod template brings for its network itself (not what the pool or trainadmit gave it)."""

    label: str  # how messages name the template
    devices: tuple[str, ...] = ()  # NIC extended resources, with the container asking: "rdma/ib (container runner)"
    claims: tuple[str, ...] = ()  # DRA claims of NIC classes: "rdma (dra.net)"
    networks: tuple[str, ...] = ()  # network annotations it sets
    host_network: bool = False
    nccl: tuple[str, ...] = ()  # NCCL transport variables its containers set

    @property
    def own_network(self) -> bool:
        """It brings NICs, networks or the host's network: the pool's RDMA and NCCL transport stay out."""
        return bool(self.devices or self.claims or self.networks or self.host_network)

    def describe(self) -> str:
        parts = [*self.devices, *(f"DRA claim {c}" for c in self.claims), *self.networks]
        if self.host_network:
            parts.append("hostNetwork: true")
        return ", ".join(parts)


def brought_by(template: PodTemplate, policy: PolicySet, pool: PoolSpec | None,
               claim_classes: ClaimClasses = unknown_claims) -> Brought:
    """What ``template`` brings for its network, next to what ``pool`` (the one it lands on) would give it."""
    ours = set(pool.rdma.resources) if pool is not None and pool.rdma is not None else set()
    pool_networks = ",".join(pool.rdma.networks) if pool is not None and pool.rdma is not None else None
    devices: dict[str, None] = {}
    nccl: dict[str, None] = {}
    for ref in template.all_containers:
        resources = as_dict(ref.body.get("resources"))
        for section in ("limits", "requests"):
            for name in as_dict(resources.get(section)):
                if isinstance(name, str) and name not in ours and policy.is_nic_resource(name):
                    devices[f"{name} (container {ref.name})"] = None
        for entry in as_list(ref.body.get("env")):
            name = as_dict(entry).get("name")
            if isinstance(name, str) and is_transport_variable(name):
                nccl[name] = None
    claims = []
    for entry in as_list(template.pod_spec.get("resourceClaims")):
        entry = as_dict(entry)
        name = entry.get("name")
        if not isinstance(name, str) or name.startswith(OWN_CLAIM_PREFIX):
            continue
        nic = [c for c in claim_classes(entry) or () if policy.is_nic_class(c)]
        if nic:
            claims.append(f"{name} ({', '.join(nic)})")
    annotations = as_dict(template.pod_meta.get("annotations"))
    networks = tuple(f"{key}" for key in NETWORK_ANNOTATIONS
                     if key in annotations and not (key == MULTUS_NETWORKS and annotations[key] == pool_networks))
    return Brought(template.label, tuple(devices), tuple(claims), networks,
                   template.pod_spec.get("hostNetwork") is True, tuple(nccl))
