"""The questions the engine asks about the cluster, and the answer "unknown".

The engine never lists nodes itself: it asks through ``ClusterView``. ``NoCluster`` answers
"unknown" (the policy's own figures are used, and the objects a decision names stay unverified);
``trainadmit.cluster`` implements the protocol from saved objects (`check --cluster`) and from a live
list + watch (`serve --cluster-live`).

Four families of questions:
- sizes: nodes of a pool and of its largest topology domain (every node the pool's selector matches);
- capacity: of those, how many can take the work now (Ready, schedulable, taints tolerated, GPUs
  allocatable, the pool's health labels), how many once cordoned nodes return, and which are not
  usable and why;
- references: whether an object a decision names (PriorityClass, PVC, NetworkAttachmentDefinition,
  queue, the ResourceClaimTemplate or ResourceClaim a Pod's DRA devices come from and their DeviceClass,
  a TrainJob's runtime) exists, with what the engine reads of it, and whether an API group/version (a
  PodGroup kind the reconciler writes) is served;
- workloads: what a namespace's unfinished training workloads hold of a GPU resource (its budget);
- freshness: whether the view itself is too old to be trusted;
- the cluster itself: the apiserver's version and the group/versions it serves (``Discovered``), from which
  ``engine.target`` chooses what the policy leaves to ``auto``.

The kinds a decision may reference are declared here (``REFERENCE_KINDS``), once: the live view
lists and watches them, the snapshot reads them, and deploy/'s RBAC grants exactly that.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

from ..grammars.lazydataclass import dataclass

if TYPE_CHECKING:  # types only: the engine runs on cached policy records too (policy.cache)
    from ..policy.models import NodeLabelRequirement, PoolSpec, TopologyLevel


class Presence(StrEnum):
    """What the view knows about one referenced object."""

    unknown = "unknown"  # the view does not hold this kind (no view, or not in the snapshot)
    missing = "missing"  # the view holds every object of the kind, and not this one
    not_served = "not-served"  # the cluster does not serve the kind at all (its CRD is not installed)
    present = "present"


@dataclass(frozen=True)
class RefKind:
    """A kind of object a decision may name: what it takes to list it and to tell a user how to make one."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    provided_by: str  # who installs the kind ("Kubernetes", "Multus", …), for "not served" messages

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


PRIORITY_CLASS = RefKind("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", False, "Kubernetes")
PERSISTENT_VOLUME_CLAIM = RefKind("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", True, "Kubernetes")
NETWORK_ATTACHMENT = RefKind("k8s.cni.cncf.io", "v1", "NetworkAttachmentDefinition", "network-attachment-definitions",
                             True, "Multus")
VOLCANO_QUEUE = RefKind("scheduling.volcano.sh", "v1beta1", "Queue", "queues", False, "Volcano")
KUEUE_LOCAL_QUEUE = RefKind("kueue.x-k8s.io", "v1beta1", "LocalQueue", "localqueues", True, "Kueue")
# where a Pod's DRA devices are asked for, and what kind of device each class holds (resource.k8s.io/v1: GA in
# Kubernetes 1.34, so an older cluster does not serve it)
DRA = "Kubernetes 1.34+ (resource.k8s.io/v1)"
RESOURCE_CLAIM_TEMPLATE = RefKind("resource.k8s.io", "v1", "ResourceClaimTemplate", "resourceclaimtemplates", True, DRA)
RESOURCE_CLAIM = RefKind("resource.k8s.io", "v1", "ResourceClaim", "resourceclaims", True, DRA)
DEVICE_CLASS = RefKind("resource.k8s.io", "v1", "DeviceClass", "deviceclasses", False, DRA)
# the runtimes a Kubeflow Trainer TrainJob takes its Pods from
TRAINING_RUNTIME = RefKind("trainer.kubeflow.org", "v1alpha1", "TrainingRuntime", "trainingruntimes", True,
                           "Kubeflow Trainer")
CLUSTER_TRAINING_RUNTIME = RefKind("trainer.kubeflow.org", "v1alpha1", "ClusterTrainingRuntime",
                                   "clustertrainingruntimes", False, "Kubeflow Trainer")
# Kinds every cluster serves (the view lists them from the start) and kinds a CRD or a newer Kubernetes adds
# (absent: "not served").
CORE_REFERENCE_KINDS: tuple[RefKind, ...] = (PRIORITY_CLASS, PERSISTENT_VOLUME_CLAIM)
CRD_REFERENCE_KINDS: tuple[RefKind, ...] = (NETWORK_ATTACHMENT, VOLCANO_QUEUE, KUEUE_LOCAL_QUEUE,
                                            RESOURCE_CLAIM_TEMPLATE, RESOURCE_CLAIM, DEVICE_CLASS, TRAINING_RUNTIME,
                                            CLUSTER_TRAINING_RUNTIME)
REFERENCE_KINDS: tuple[RefKind, ...] = CORE_REFERENCE_KINDS + CRD_REFERENCE_KINDS
# what a workload's GPUs are counted from besides its own fields, which a submission often carries with the
# workload (a ResourceClaimTemplate in the Job's file, a TrainingRuntime beside the TrainJob): `trainadmit check`
# reads them from its input files too
COMPANION_KINDS: tuple[RefKind, ...] = (RESOURCE_CLAIM_TEMPLATE, RESOURCE_CLAIM, DEVICE_CLASS, TRAINING_RUNTIME,
                                        CLUSTER_TRAINING_RUNTIME)


def ref_kind(group: str, kind: str) -> RefKind | None:
    """The referenced kind of this API group and name, if a decision may reference it."""
    return next((k for k in REFERENCE_KINDS if k.group == group and k.kind == kind), None)


@dataclass(frozen=True)
class Discovered:
    """What the apiserver says about itself (``/version``, ``/apis``): its minor version, when known, and every
    group/version it serves. Discovery is all a view can see of a cluster's features: a scheduler's feature
    gates (``GangScheduling``, ``TopologyAwareWorkloadScheduling``) and the controller-manager's
    (``WorkloadWithJob``) never show in it."""

    version: tuple[int, int] | None  # (1, 36); None: the view did not read /version (a snapshot without it)
    git_version: str  # "v1.36.2", as the apiserver reports it ("" when unknown)
    api_versions: frozenset[str]  # "scheduling.k8s.io/v1alpha2", …, and "v1"

    def serves(self, api_version: str) -> bool:
        return api_version in self.api_versions

    def serves_group(self, group: str) -> bool:
        prefix = f"{group}/"
        return any(v.startswith(prefix) for v in self.api_versions)

    @property
    def version_text(self) -> str:
        if self.version is None:
            return "an unknown version"
        return f"{self.version[0]}.{self.version[1]}" + (f" ({self.git_version})" if self.git_version else "")


@dataclass(frozen=True)
class Capacity:
    """Nodes of a pool (``level`` None) or of its largest domain of a level that can take a workload.

    ``usable``: can take it now; ``eventually``: also counting nodes that are only cordoned (an
    administrator's reversible decision); ``total``: every node the pool's selector matches. For a
    level, each figure is the largest over the level's domains."""

    usable: int
    eventually: int
    total: int


@dataclass(frozen=True)
class Unusable:
    """Why nodes of one domain (or of the whole pool) cannot take a workload now: reason -> node names.

    For a level, the domain is the one with the most nodes usable once cordons lift (the best chance)."""

    domain: str | None  # the domain's label value, None for the whole pool
    total: int
    usable: int
    eventually: int
    reasons: dict[str, list[str]] = field(default_factory=dict)  # "cordoned" included

    def describe(self, limit: int = 4) -> str:
        parts = []
        for reason, names in sorted(self.reasons.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            more = f", … ({len(names) - limit} more)" if len(names) > limit else ""
            shown = ", ".join(sorted(names)[:limit]) + more
            parts.append(f"{len(names)} {reason} ({shown})")
        return "; ".join(parts)


@dataclass(frozen=True)
class NamespaceUsage:
    """What a namespace's other unfinished workloads hold of one resource: the total, how many hold any,
    and the largest holders ("Kind name", amount) for messages."""

    total: int
    workloads: int
    largest: tuple[tuple[str, int], ...] = ()

    def describe(self) -> str:
        named = ", ".join(f"{who}: {amount}" for who, amount in self.largest)
        more = self.workloads - len(self.largest)
        return named + (f" and {more} more" if more > 0 else "")


class ClusterView(Protocol):
    name: str

    def pool_nodes(self, pool: PoolSpec) -> int | None:
        """Nodes of the pool, or None when unknown."""

    def largest_domain(self, pool: PoolSpec, level: TopologyLevel) -> int | None:
        """Pool nodes in the largest domain of ``level``, or None when unknown."""

    def gpu_quota(self, namespace: str, resource: str) -> tuple[int, int] | None:
        """(hard, used) of the namespace's binding ResourceQuota on ``requests.<resource>``."""

    def device_quota(self, namespace: str, device_class: str) -> tuple[int, int] | None:
        """(hard, used) of the namespace's binding ResourceQuota on the DRA devices of ``device_class``
        (``<class>.deviceclass.resource.k8s.io/devices``: devices its ResourceClaims request)."""

    def pool_nodes_matching(self, pool: PoolSpec, requirements: Sequence[NodeLabelRequirement]) -> int | None:
        """Nodes of the pool whose labels meet every one of ``requirements``, or None when unknown."""
    def capacity(self, pool: PoolSpec, level: TopologyLevel | None, tolerations: tuple[dict, ...]) -> Capacity | None:
        """Usable nodes for Pods with ``tolerations`` in the pool or its largest ``level`` domain; None: unknown."""

    def unusable(self, pool: PoolSpec, level: TopologyLevel | None, tolerations: tuple[dict, ...]) -> Unusable | None:
        """The unusable nodes of the pool, or of its largest ``level`` domain, by reason (for messages)."""

    def reference(self, kind: RefKind, name: str, namespace: str | None = None) -> tuple[Presence, dict | None]:
        """Whether the named object exists (and the object when it does)."""

    def serves(self, api_version: str) -> bool | None:
        """Whether the cluster serves ``group/version`` (None: unknown)."""

    def discovered(self) -> Discovered | None:
        """The apiserver's version and served group/versions (None: the view has no discovery)."""

    def stale(self) -> str | None:
        """Why the view cannot be trusted right now (too old), or None."""

    def namespace_gpus(self, namespace: str, resource: str, exclude: tuple[str, str] | None = None
                       ) -> NamespaceUsage | None:
        """What the namespace's unfinished workloads but ``exclude`` (kind, name) hold of ``resource``;
        None when the view does not know the namespace's workloads."""

    def reconciler(self) -> str | None:
        """Why nothing makes what decisions leave to trainadmit's elected reconciler (the PodGroups of the
        backends that need one, the lifting of its placement gate): the server runs without it, or it cannot
        hold its Lease or do its work. None: one runs, or the view cannot tell (``check``)."""


class NoCluster:
    name = "none"
    constant = True  # every answer is the same, always (the memo need not ask again)

    def pool_nodes(self, pool: PoolSpec) -> int | None:
        return None

    def largest_domain(self, pool: PoolSpec, level: TopologyLevel) -> int | None:
        return None

    def gpu_quota(self, namespace: str, resource: str) -> tuple[int, int] | None:
        return None

    def device_quota(self, namespace: str, device_class: str) -> tuple[int, int] | None:
        return None

    def pool_nodes_matching(self, pool: PoolSpec, requirements: Sequence[NodeLabelRequirement]) -> int | None:
        return None

    def capacity(self, pool: PoolSpec, level: TopologyLevel | None, tolerations: tuple[dict, ...]) -> Capacity | None:
        return None

    def unusable(self, pool: PoolSpec, level: TopologyLevel | None, tolerations: tuple[dict, ...]) -> Unusable | None:
        return None

    def reference(self, kind: RefKind, name: str, namespace: str | None = None) -> tuple[Presence, dict | None]:
        return Presence.unknown, None

    def serves(self, api_version: str) -> bool | None:
        return None

    def discovered(self) -> Discovered | None:
        return None

    def stale(self) -> str | None:
        return None

    def namespace_gpus(self, namespace: str, resource: str, exclude: tuple[str, str] | None = None
                       ) -> NamespaceUsage | None:
        return None

    def reconciler(self) -> str | None:
        return None


class DiscoveryOnly(NoCluster):
    """A view that answers only what the cluster is (``discovered``, from ``view``): what a decision keeps of a
    live view that fell behind. Counts and objects go stale within seconds; a cluster's version and APIs do not,
    and without them ``auto`` would assume another cluster than the one the server runs on."""

    constant = False

    def __init__(self, view: ClusterView):
        self._view = view

    def discovered(self) -> Discovered | None:
        return self._view.discovered()

    def reconciler(self) -> str | None:  # the server's own processes: they do not go stale with the view
        return self._view.reconciler()
