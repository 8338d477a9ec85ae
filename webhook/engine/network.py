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

What trainadmit itself wrote on an earlier pass (the pool's own resources, Multus value and NIC claim, claims
named ``ta-…`` like its volumes) is not something the template brings, so a second pass decides as the first.
Which DeviceClasses hold NICs and which GPUs is the policy's (``PolicySet.is_nic_class``, ``gpu_device_classes``:
a class the policy calls a GPU class is never a NIC class).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..grammars.lazydataclass import dataclass
from ..grammars.nccl import VARIABLE_PREFIX, is_transport_variable
from ..policy import PolicySet
from .clusterview import ClusterView, Presence
from .demand import claim_kind
from .dra import TEMPLATE_NAME, claim_spec, device_classes, pod_claims
from .paths import as_dict, as_list
from .workloads import PodTemplate, env_named

if TYPE_CHECKING:  # types only: the engine runs on cached policy records too (policy.cache)
    from ..policy.models import PoolSpec

MULTUS_NETWORKS = "k8s.v1.cni.cncf.io/networks"
GKE_INTERFACES = "networking.gke.io/interfaces"
GKE_DEFAULT_INTERFACE = "networking.gke.io/default-interface"
# pod annotations that attach networks of the user's choosing (Multus; GKE multi-networking)
NETWORK_ANNOTATIONS = (MULTUS_NETWORKS, GKE_INTERFACES, GKE_DEFAULT_INTERFACE)
OWN_CLAIM_PREFIX = "ta-"  # names trainadmit gives what it adds to a pod spec (volumes, claims)
POOL_NIC_CLAIM = "trainadmit-rdma"  # the Pod's name for the pool's NIC claim (Pool.spec.rdma.claimTemplate)

# A pod's ``resourceClaims`` entry -> the DeviceClasses its devices come from (from the ResourceClaimTemplate or
# ResourceClaim it names), or None when that object is not known here.
ClaimClasses = Callable[[dict], "tuple[str, ...] | None"]


def unknown_claims(entry: dict) -> None:
    """No ResourceClaimTemplate or ResourceClaim is known: a claim's devices cannot be told."""
    return None


def claim_device_classes(cluster: ClusterView, namespace: str | None, entry: dict) -> tuple[str, ...] | None:
    """The DeviceClasses a pod's ``resourceClaims`` entry gets devices from, read from the ResourceClaimTemplate
    or ResourceClaim the cluster view holds (as ``demand`` reads a claim's GPUs); None when it holds neither."""
    for claim in pod_claims({"resourceClaims": [entry]}):
        kind = claim_kind(claim)
        presence, obj = cluster.reference(kind, claim.object_name, namespace)
        if presence is Presence.present and obj is not None:
            return tuple(device_classes(claim_spec(kind.kind, obj)))
    return None


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
    nic: dict[str, bool] = {}  # resource name -> a NIC of the policy's; containers repeat names (cpu, memory)
    for ref in template.all_containers:
        resources = as_dict(ref.body.get("resources"))
        for section in ("limits", "requests"):
            for name in as_dict(resources.get(section)):
                if not isinstance(name, str) or name in ours:
                    continue
                found = nic.get(name)
                if found is None:
                    found = nic[name] = policy.is_nic_resource(name)
                if found:
                    devices[f"{name} (container {ref.name})"] = None
        for _, _, name in env_named(ref.body.get("env"), VARIABLE_PREFIX):  # only an NCCL variable can be one
            if is_transport_variable(name):
                nccl[name] = None
    pool_claim = pool.rdma.claimTemplate if pool is not None and pool.rdma is not None else None
    claims = []
    for entry in as_list(template.pod_spec.get("resourceClaims")):
        entry = as_dict(entry)
        name = entry.get("name")
        if not isinstance(name, str) or name.startswith(OWN_CLAIM_PREFIX) or name == POOL_NIC_CLAIM:
            continue
        if pool_claim is not None and entry.get(TEMPLATE_NAME) == pool_claim:
            continue  # the pool's own NICs (Pool.spec.rdma.claimTemplate), as its own resources are
        nic = [c for c in claim_classes(entry) or () if policy.is_nic_class(c)]
        if nic:
            claims.append(f"{name} ({', '.join(nic)})")
    annotations = as_dict(template.pod_meta.get("annotations"))
    networks = tuple(f"{key}" for key in NETWORK_ANNOTATIONS
                     if key in annotations and not (key == MULTUS_NETWORKS and annotations[key] == pool_networks))
    return Brought(template.label, tuple(devices), tuple(claims), networks,
                   template.pod_spec.get("hostNetwork") is True, tuple(nccl))
