"""The policy documents a platform team writes, as strict pydantic models.

Every document has the Kubernetes shape (``apiVersion``/``kind``/``metadata.name``/``spec``) so
that it reads like the rest of a cluster's YAML and can later be served as a CRD. Models forbid
unknown fields: a typo in a policy must be an error at load time, never a silently ignored
setting that makes the webhook do less than the platform team thinks.
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..grammars.preflight import DEFAULT_TIMEOUT_SECONDS, Check, LinkLayer
from ..grammars.quantity import QuantityError, as_count, parse_quantity
from .vocab import Action, Enforceable, GangBackend, LevelLookup, NodeLabelMatch, label_integer

API_VERSION = "trainadmit.io/v1alpha1"

# Kubernetes label keys/values and DNS names, as the apiserver validates them.
_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
LABEL_KEY_RE = re.compile(rf"^({_DNS_SUBDOMAIN}/)?{_LABEL_NAME}$")
LABEL_VALUE_RE = re.compile(rf"^({_LABEL_NAME})?$")
DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
RESOURCE_NAME_RE = re.compile(rf"^({_DNS_SUBDOMAIN}/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
ENV_NAME_RE = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


def _check_label_key(key: str) -> str:
    if not LABEL_KEY_RE.match(key) or len(key) > 317 or len(key.split("/")[-1]) > 63:
        raise ValueError(f"{key!r} is not a valid Kubernetes label key")
    return key


def _check_label_value(value: str) -> str:
    if not LABEL_VALUE_RE.match(value) or len(value) > 63:
        raise ValueError(f"{value!r} is not a valid Kubernetes label value")
    return value


def _unique(names: list[str], what: str) -> None:
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"{what} names repeat: {', '.join(repeated)}")


def _check_quantity(value: str | int) -> str:
    try:
        parse_quantity(value)
    except QuantityError as exc:
        raise ValueError(str(exc)) from exc
    return str(value)


class Strict(BaseModel):
    """Base: unknown fields are errors, instances are immutable, names use camelCase as in YAML."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Metadata(Strict):
    name: Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")]
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Pool


class DeviceClassRef(Strict):
    """A DRA DeviceClass whose devices are the pool's GPUs (``resource.k8s.io/v1``).

    Several pools may share a class (NVIDIA's driver publishes every GPU as ``gpu.nvidia.com``); then each
    names the CEL selectors a claim's request carries to get its GPU type, as the platform team publishes
    them to users (``device.attributes['gpu.nvidia.com'].productName == '…'``)."""

    name: Annotated[str, Field(pattern=_DNS_SUBDOMAIN, max_length=253, description="The DeviceClass's name.")]
    selectors: list[str] = Field(
        default_factory=list, description="CEL selector expressions a request must carry (as written, spaces aside) "
        "to be for this pool; none: every request of the class is.")


class GpuSpec(Strict):
    resource: str = Field("nvidia.com/gpu", description="Extended resource name of the GPU.")
    product: str | None = Field(None, description="GPU product as GPU Feature Discovery labels it.")
    perNode: Annotated[int, Field(ge=1, le=64, description="GPUs on each node of the pool.")]
    deviceClasses: list[DeviceClassRef] = Field(
        default_factory=list, description="DRA DeviceClasses whose devices are this pool's GPUs: a Pod that claims "
        "devices of one (through a ResourceClaimTemplate or ResourceClaim) asks for the pool's GPUs.")

    @field_validator("resource")
    @classmethod
    def _resource(cls, v: str) -> str:
        if not RESOURCE_NAME_RE.match(v) or "/" not in v:
            raise ValueError(f"{v!r} is not an extended resource name (domain/name)")
        return v


class Toleration(Strict):
    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    tolerationSeconds: int | None = None

    def as_k8s(self) -> dict:
        """The toleration as it appears in a PodSpec (no null fields)."""
        return self.model_dump(exclude_none=True)


class TopologyLevel(Strict):
    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]{0,30}$",
                               description="What users write in trainadmit.io/topology (node, rack, zone…).")]
    nodeLabel: str = Field(description="Node label whose value names one domain of this level.")
    maxNodes: Annotated[int, Field(ge=1, description="Nodes in the largest domain of this level.")]

    @field_validator("nodeLabel")
    @classmethod
    def _key(cls, v: str) -> str:
        return _check_label_key(v)


class Topology(LevelLookup, Strict):
    default: str = Field(description="Level used when a Job does not name one ('any' = no colocation).")
    levels: list[TopologyLevel] = Field(min_length=1, description="From the smallest domain to the largest.")

    @model_validator(mode="after")
    def _levels(self) -> Topology:
        # every problem at once: a validator that stops at the first makes the author run lint once per mistake
        names = [lv.name for lv in self.levels]
        problems = []
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            problems.append(f"topology level names repeat: {', '.join(repeated)}")
        if "any" in names:
            problems.append("'any' is reserved: it means 'no colocation'")
        sizes = [lv.maxNodes for lv in self.levels]
        if sizes != sorted(sizes):
            problems.append("topology levels must go from the smallest domain to the largest (maxNodes ascending)")
        if self.default != "any" and self.default not in names:
            problems.append(f"default level {self.default!r} is not one of {names} or 'any'")
        if problems:
            raise ValueError("; ".join(problems))
        return self


class Rdma(Strict):
    resources: dict[str, int | str] = Field(
        default_factory=dict,
        description="Extended RDMA resources per GPU container: whole quantities, injected as written (1 or \"1\").")
    networks: list[str] = Field(default_factory=list, description="Multus networks: [namespace/]name[@ifname].")
    ipcLock: bool = Field(True, description="Add CAP_IPC_LOCK to GPU containers (RDMA pins memory).")
    linkLayer: LinkLayer = Field(LinkLayer.InfiniBand, description="Link layer of the fabric's ports (Ethernet for "
                                 "RoCE); the preflight checks every port has it.")
    claimTemplate: str | None = Field(
        None, pattern=_DNS_SUBDOMAIN, max_length=253,
        description="The pool's NICs as DRA devices (DRANET): a ResourceClaimTemplate of this name, in the "
        "workload's namespace, claimed by every GPU Pod and listed by its GPU containers (instead of, or besides, "
        "extended resources).")

    @field_validator("resources", mode="before")
    @classmethod
    def _res(cls, v: object) -> object:
        """Kept in the form the policy declares (the apiserver takes an int or a string quantity and
        canonicalizes it), so that what a policy test expects is what the policy says."""
        if not isinstance(v, dict):
            return v
        problems = []
        for name, count in v.items():
            if not isinstance(name, str) or not RESOURCE_NAME_RE.match(name) or "/" not in name:
                problems.append(f"{name!r} is not an extended resource name (domain/name)")
            elif isinstance(count, bool) or not isinstance(count, int | str) or not (as_count(count) or 0) >= 1:
                problems.append(f"{name}: {count!r} is not a whole quantity of at least 1")
        if problems:
            raise ValueError("; ".join(problems))
        return v

    @field_validator("networks")
    @classmethod
    def _nets(cls, v: list[str]) -> list[str]:
        pattern = re.compile(r"^([a-z0-9][-a-z0-9]*/)?[a-z0-9][-a-z0-9.]*(@[A-Za-z0-9_.-]{1,15})?$")
        for net in v:
            if not pattern.match(net):
                raise ValueError(f"{net!r} is not a Multus network reference ([namespace/]name[@ifname])")
        return v


class Nccl(Strict):
    """NCCL variables checked like a user's: grammar errors stop the load, the rest are lint warnings.

    The checks are in ``policy.injected``, run by the loader on the raw document: each variable is
    reported at its own line, all in one run (a field validator here would stop at the first)."""

    env: dict[str, str] = Field(
        default_factory=dict, description="NCCL variables set on every GPU container; checked against NCCL's grammar.")

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        bad = [name for name in v if not ENV_NAME_RE.match(name)]
        if bad:
            raise ValueError(f"{', '.join(map(repr, bad))}: not environment variable names")
        return v


class Fabric(Strict):
    """What a workload asks for when it wants a network fabric: device-plugin resources, pod annotations, DRA
    device classes, or the host's own network."""

    resources: list[str] = Field(default_factory=list, description="Extended resources that mean this fabric.")
    annotations: list[str] = Field(default_factory=list, description="Pod annotation keys that mean this fabric.")
    deviceClasses: list[str] = Field(default_factory=list, description="DRA DeviceClasses whose claims mean this "
                                     "fabric (a claim's class is known when its ResourceClaimTemplate is).")
    hostNetwork: bool = Field(False, description="GPU Pods with hostNetwork: true mean this fabric (RDMA through "
                              "the host's NICs, as OCI runs RoCE).")
    yieldsTo: list[str] = Field(default_factory=list, description="Fabrics that are what the workload asks for when "
                                "it matches them too (GKE's multi-networking annotation is on TCPX and TCPXO Pods as "
                                "well as GPUDirect-RDMA ones; the TCPX(O) daemon's annotation tells them apart).")


class NicSettings(Strict):
    """What a NIC is when a pod template brings its own: a template whose containers request one of these
    resources, or claim a device of one of these DRA classes, gets none of the pool's RDMA resources, Multus
    networks or NCCL transport variables (docs/fabrics.md lists the sources)."""

    resources: list[str] = Field(
        default_factory=lambda: ["rdma/*", "*sriov*", "nvidia.com/hostdev", "nvidia.com/mlnxnics",
                                 "nvidia.com/*rdma*", "mellanox.com/*", "vpc.amazonaws.com/efa"],
        description="Extended resources that are NICs: names or fnmatch patterns (rdma/* is every RDMA device "
        "plugin resource, *sriov* an SR-IOV device plugin's VFs).")
    deviceClasses: list[str] = Field(
        default_factory=lambda: ["dra.net", "dranet.net", "*rdma*", "netdev.google.com", "efa.networking.k8s.aws"],
        description="DRA DeviceClasses whose devices are NICs (names or fnmatch patterns; *rdma* is GKE's "
        "mrdma.google.com and every class named for RDMA).")


class NodeLabelRequirement(NodeLabelMatch, Strict):
    """A node label the pool's nodes must carry, injected as a required node-affinity expression.

    The labels are what GPU feature discovery and the GPU and network operators publish
    (``nvidia.com/cuda.driver.major``, ``feature.node.kubernetes.io/rdma.capable``…); ``Gt``/``Lt``
    compare the label as an integer, as the scheduler does."""

    key: str = Field(description="Node label key.")
    operator: Literal["In", "Gt", "Lt", "Exists"] = Field(
        description="In: one of values; Gt/Lt: the label, an integer, is greater/less than the one value; Exists.")
    values: list[str] = Field(default_factory=list, description="In: the allowed values; Gt/Lt: one integer.")

    @field_validator("key")
    @classmethod
    def _key(cls, v: str) -> str:
        return _check_label_key(v)

    @model_validator(mode="after")
    def _values(self) -> NodeLabelRequirement:
        if self.operator == "Exists" and self.values:
            raise ValueError("Exists takes no values")
        if self.operator == "In":
            if not self.values:
                raise ValueError("In needs at least one value")
            for value in self.values:
                _check_label_value(value)
        if self.operator in ("Gt", "Lt") and (len(self.values) != 1 or label_integer(self.values[0]) is None):
            raise ValueError(f"{self.operator} needs exactly one integer value (the scheduler compares integers)")
        return self

    @property
    def identity(self) -> tuple:
        """A hashable stand-in (for index keys)."""
        return (self.key, self.operator, tuple(self.values))


class PreflightResources(Strict):
    """CPU and memory of the preflight container; GPUs and RDMA devices come from the decision."""

    requests: dict[Literal["cpu", "memory"], str] = Field(
        default_factory=lambda: {"cpu": "100m", "memory": "128Mi"}, description="Resource requests.")
    limits: dict[Literal["cpu", "memory"], str] = Field(
        default_factory=lambda: {"cpu": "1", "memory": "256Mi"}, description="Resource limits.")

    @field_validator("requests", "limits", mode="before")
    @classmethod
    def _quantities(cls, v: object) -> object:
        if isinstance(v, dict):
            return {k: _check_quantity(q) if isinstance(q, str | int) and not isinstance(q, bool) else q
                    for k, q in v.items()}
        return v


class Preflight(Strict):
    """The start-up check of the pool's GPU Pods: an init container running `trainadmit preflight`.

    It fails the Pod, with one line naming the node and what is wrong, when the node does not give it
    what the admission decision expects."""

    enabled: bool = Field(False, description="Inject the preflight init container into the pool's GPU pod templates.")
    image: str | None = Field(None, description="Image with trainadmit: the webhook's own (required when enabled).")
    imagePullPolicy: Literal["Always", "IfNotPresent", "Never"] = Field("IfNotPresent",
                                                                        description="Pull policy of the image.")
    resources: PreflightResources = Field(default_factory=PreflightResources,
                                          description="CPU and memory of the preflight container.")
    timeoutSeconds: int = Field(DEFAULT_TIMEOUT_SECONDS, ge=5, le=3600,
                                description="Time budget of all checks, the gang's wait for one another included.")
    skip: list[Check] = Field(default_factory=list, description="Checks not to run on this pool.")

    @model_validator(mode="after")
    def _image(self) -> Preflight:
        if self.enabled and not self.image:
            raise ValueError("set image (the webhook's own image) when the preflight is enabled")
        return self


GKE_INTERFACES = "networking.gke.io/interfaces"


def default_fabrics() -> dict[str, Fabric]:
    """Fabrics the bundled pools do not provide (a workload asking for one gets no InfiniBand/RoCE pool):
    AWS EFA, GKE's GPUDirect TCPX/TCPXO (multi-networking plus the daemon) and GPUDirect-RDMA (multi-networking
    alone, or GKE DRANET's RDMA class), and RDMA through the host's network. Sources: docs/fabrics.md."""
    return {
        "efa": Fabric(resources=["vpc.amazonaws.com/efa"], deviceClasses=["efa.networking.k8s.aws"]),
        "gke-tcpx": Fabric(annotations=["devices.gke.io/container.tcpx-daemon"]),
        "gke-tcpxo": Fabric(annotations=["devices.gke.io/container.tcpxo-daemon"]),
        "gke-gpudirect-rdma": Fabric(annotations=[GKE_INTERFACES], deviceClasses=["mrdma.google.com"],
                                     yieldsTo=["gke-tcpx", "gke-tcpxo"]),
        "host-network": Fabric(hostNetwork=True),
    }


class PoolSpec(Strict):
    """A GPU pool. Derived values used on every request are cached on first use."""

    gpu: GpuSpec
    fabric: str | None = Field(
        None, description="The pool's network fabric: a name of Platform.spec.fabrics, or unset for one no other "
        "pool's workloads ask for; workloads asking for another fabric never get this pool.")
    default: bool = Field(False, description="Default pool for Jobs that request this GPU resource.")
    nodeSelector: dict[str, str] = Field(
        default_factory=dict, description="Node labels that select the pool; a contradicting user value is denied.")
    tolerations: list[Toleration] = Field(default_factory=list, description="Taints of the pool's nodes to tolerate.")
    healthSelector: dict[str, str] = Field(
        default_factory=dict, description="Node labels a usable node of the pool carries (kept by the GPU operator or "
        "node-problem-detector, e.g. nvidia.com/gpu.healthy: \"true\"); with a cluster view, nodes without them do not "
        "count as capacity.")
    topology: Topology = Field(description="Topology levels (smallest first) and the default level.")
    capacityNodes: int | None = Field(None, ge=1, description="Nodes in the pool when no cluster view is given.")
    rdma: Rdma | None = Field(None, description="The pool's RDMA fabric; absent means no RDMA (requests are denied).")
    nccl: Nccl = Field(default_factory=Nccl, description="NCCL settings of the pool's fabric.")
    requiredNodeLabels: list[NodeLabelRequirement] = Field(
        default_factory=list, description="Node labels (GPU feature discovery, GPU and network operators) the pool's "
        "nodes must carry: injected as required node affinity; with a cluster view, a gang that not enough matching "
        "nodes can hold is denied, naming the label.")
    preflight: Preflight = Field(default_factory=Preflight,
                                 description="Start-up check of every GPU Pod of the pool (an init container).")

    @field_validator("nodeSelector", "healthSelector")
    @classmethod
    def _selector(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            _check_label_key(key)
            _check_label_value(value)
        return v

    @model_validator(mode="after")
    def _requirements_fit_selector(self) -> PoolSpec:
        clashes = [f"requiredNodeLabels[{i}] ({r}) excludes nodeSelector {r.key}={self.nodeSelector[r.key]}"
                   for i, r in enumerate(self.requiredNodeLabels)
                   if r.key in self.nodeSelector and not r.matches(self.nodeSelector)]
        if clashes:
            raise ValueError("; ".join(clashes) + ": no node could be in the pool")
        return self

    @cached_property
    def toleration_dicts(self) -> list[dict]:
        return [t.as_k8s() for t in self.tolerations]


class Pool(Strict):
    apiVersion: Literal["trainadmit.io/v1alpha1"]
    kind: Literal["Pool"]
    metadata: Metadata
    spec: PoolSpec


# ---------------------------------------------------------------------------------------------
# Storage


class DatasetSpec(Strict):
    claimName: Annotated[str, Field(pattern=_DNS_SUBDOMAIN, max_length=253,
                                    description="PersistentVolumeClaim in the Job's namespace, mounted read-only.")]
    mountPath: Annotated[str, Field(pattern=r"^/[^:]*$", description="Where GPU containers see the dataset.")]
    subPath: str | None = Field(None, description="Mount only this directory of the claim.")


class Dataset(Strict):
    apiVersion: Literal["trainadmit.io/v1alpha1"]
    kind: Literal["Dataset"]
    metadata: Metadata
    spec: DatasetSpec


class CheckpointClassSpec(Strict):
    claimName: Annotated[str, Field(pattern=_DNS_SUBDOMAIN, max_length=253,
                                    description="PersistentVolumeClaim (ReadWriteMany) for checkpoints.")]
    mountPath: Annotated[str, Field(pattern=r"^/[^:]*$", description="Where GPU containers see it.")]
    env: dict[str, str] = Field(default_factory=dict, description="Variables set on GPU containers.")

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for name in v:
            if not ENV_NAME_RE.match(name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return v


class CheckpointClass(Strict):
    apiVersion: Literal["trainadmit.io/v1alpha1"]
    kind: Literal["CheckpointClass"]
    metadata: Metadata
    spec: CheckpointClassSpec


# ---------------------------------------------------------------------------------------------
# Priority


class PriorityTierSpec(Strict):
    className: Annotated[str, Field(pattern=_DNS_SUBDOMAIN, max_length=253,
                                    description="The PriorityClass set as priorityClassName.")]
    value: Annotated[int, Field(ge=-2147483648, le=1000000000)] = Field(
        description="The PriorityClass value; bare Pods need it because the apiserver resolved priority before us."
    )
    preemptionPolicy: Literal["PreemptLowerPriority", "Never"] = Field(
        "PreemptLowerPriority", description="The PriorityClass's preemptionPolicy (set on bare Pods).")
    kueuePriorityClass: str | None = Field(None, description="Kueue WorkloadPriorityClass for the kueue backend.")


class PriorityTier(Strict):
    apiVersion: Literal["trainadmit.io/v1alpha1"]
    kind: Literal["PriorityTier"]
    metadata: Metadata
    spec: PriorityTierSpec


# ---------------------------------------------------------------------------------------------
# Quota


class QuotaSpec(Strict):
    namespaces: list[str] = Field(min_length=1, description="Namespace names or globs (team-*).")
    maxGPUsPerJob: int | None = Field(None, ge=0, description="GPUs of all workers of one Job.")
    maxWorkersPerJob: int | None = Field(None, ge=1, description="Pods that run at once (parallelism).")
    allowedPools: list[str] | None = Field(None, description="Pools the namespaces may use; default all.")
    allowedPriorities: list[str] | None = Field(None, description="Priority tiers the namespaces may use; default all.")
    gpuQuota: int | None = Field(None, ge=0, description=(
        "GPUs the namespace's unfinished workloads may hold in total (admission counts them; serve --reconcile "
        "also writes it as a ResourceQuota)."))


class Quota(Strict):
    apiVersion: Literal["trainadmit.io/v1alpha1"]
    kind: Literal["Quota"]
    metadata: Metadata
    spec: QuotaSpec


# ---------------------------------------------------------------------------------------------
# Platform


class GangSettings(Strict):
    backend: GangBackend = Field(
        GangBackend.auto,
        description="Gang scheduler of the cluster. auto: the first the cluster serves, in this order: native "
        "(the Workload API of its version), kai, volcano, coscheduling, kueue (none served: no gang, and rule "
        "gang.unavailable says what to install); without a cluster view auto assumes native.")
    nativeMode: Literal["auto", "job-scheduling", "pod-group"] = Field(
        "auto",
        description="job-scheduling: Job.spec.scheduling (1.37; the Job controller builds the PodGroup); "
        "pod-group: pod schedulingGroup plus a PodGroup from trainadmit's reconciler; auto: job-scheduling on 1.37 "
        "or newer when featureGates lists WorkloadWithJob, else pod-group.",
    )
    schedulerName: str | None = Field(None, description="Defaults: volcano -> volcano, coscheduling -> "
                                      "scheduler-plugins-scheduler, kai -> kai-scheduler, native/kueue -> unchanged.")
    queue: str | None = Field(None, description="Kueue LocalQueue / Volcano or KAI queue when the Job names none; "
                              "unset: the backend's own default (Volcano and Kueue: default, KAI: default-queue).")
    disruptionMode: Literal["all", "single"] | None = Field(None, description="native: disruptionMode of the gang.")
    topologyMethod: Literal["auto", "native", "kueue", "kai", "podAffinity", "none"] = Field(
        "auto", description="How workers are colocated: auto picks what the backend's scheduler can hold to "
                "(native: the PodGroup's topology constraint with the TopologyAwareWorkloadScheduling gate in "
                "featureGates, else the placement gate trainadmit.io/placement, which the elected reconciler lifts "
                "once it has written one domain with room for the whole gang into its Pods; no gang backend: the "
                "placement gate; kueue: its topology annotation; kai: its placement annotations with kaiTopology, "
                "else the placement gate; coscheduling, volcano: the placement gate, their scheduler forming the "
                "gang; pod affinity where the gate cannot wait for a gang of a minimum).")
    scheduleTimeoutSeconds: int | None = Field(None, ge=1, description="coscheduling: PodGroup scheduleTimeoutSeconds.")
    kaiTopology: str | None = Field(None, description="kai: the KAI Topology (kai.scheduler/v1alpha1) whose levels "
                                    "hold the pools' level node labels; with it, workers are colocated through KAI's "
                                    "kai.scheduler/topology-required-placement (topologyMethod auto or kai).")


class ShmSettings(Strict):
    sizeLimit: str = Field("64Gi", description="Size limit of the memory-backed /dev/shm of GPU containers.")

    @field_validator("sizeLimit", mode="before")
    @classmethod
    def _size(cls, v: str | int) -> str:
        return _check_quantity(v)


class Defaults(Strict):
    priority: str | None = Field(None, description="Priority tier when the Job names none.")
    checkpoint: str = Field("none", description="Checkpoint class when the Job names none.")


class PlatformSpec(Strict):
    kubernetesVersion: Annotated[str, Field(
        pattern=r"^(auto|1\.\d{2})$",
        description="Target cluster version (1.36, 1.37…), or auto: the apiserver's own (1.37 assumed without a "
        "cluster view). An explicit version the cluster does not run is reported, and decisions follow the "
        "cluster.")] = "auto"
    featureGates: list[str] = Field(
        default_factory=list,
        description="Feature gates the cluster runs with that discovery cannot see: the scheduler's GangScheduling "
        "(1.36) and TopologyAwareWorkloadScheduling, the controller-manager's WorkloadWithJob, "
        "WorkloadAwarePreemption (a served Workload API implies GenericWorkload); `check` warns when the backend "
        "needs one that is missing.",
    )
    intentPrefix: Annotated[str, Field(pattern=_DNS_SUBDOMAIN,
                                       description="Prefix of the intent keys users write.")] = "trainadmit.io"
    exemptNamespaces: list[str] = Field(
        default_factory=lambda: ["kube-system", "kube-public", "kube-node-lease", "trainadmit-system"],
        description="Namespaces (or globs) trainadmit never touches.")
    exemptUsers: list[str] = Field(default_factory=list,
                                   description="Requests by these users (userInfo.username) pass untouched.")
    exemptGroups: list[str] = Field(default_factory=list,
                                    description="Requests by members of these groups pass untouched (break-glass).")
    controllers: dict[Annotated[str, Field(pattern=f"^{_DNS_SUBDOMAIN}$")], list[str]] = Field(
        default_factory=dict,
        description="More users (userInfo.username) that create the Pods and child objects of a kind, by "
        "`<plural>.<group>` (jobs.batch, pytorchjobs.kubeflow.org, statefulsets.apps): for operators that run "
        "under another ServiceAccount than their install manifests name. A Pod or child object is left alone "
        "as made by its controller only when one of its controller's users created it. Controller namespaces must be "
        "platform-only: whoever may create a ServiceAccount (or a Pod that mounts one) in an operator's namespace can "
        "act as that operator and create GPU Pods no webhook decides (`trainadmit policy lint` warns on an account in "
        "a namespace a Quota covers).")
    gpuResources: list[str] = Field(
        default_factory=lambda: ["nvidia.com/gpu", "amd.com/gpu"],
        description="Resources that make a workload a GPU workload (besides every pool's own).",
    )
    gpuDeviceClasses: list[Annotated[str, Field(pattern=_DNS_SUBDOMAIN, max_length=253)]] = Field(
        default_factory=lambda: ["gpu.nvidia.com", "mig.nvidia.com"],
        description="DRA DeviceClasses whose devices are GPUs (besides every pool's own): a Pod claiming devices of "
        "one is a GPU workload.")
    gang: GangSettings = Field(default_factory=GangSettings, description="Gang backend and its settings.")
    fabrics: dict[str, Fabric] = Field(
        default_factory=default_fabrics,
        description="Network fabrics by name, each with the resources, pod annotations, DRA device classes or "
        "hostNetwork that mean a workload wants it; pools name theirs in Pool.spec.fabric.")
    nics: NicSettings = Field(default_factory=NicSettings,
                              description="What counts as a NIC a pod template brings itself (resources, DRA classes).")
    noPool: Literal["deny", "ignore"] = Field(
        "deny", description="A GPU workload no pool fits (GPU type or fabric): deny it (rule intent.no-pool) or "
        "leave it untouched.")
    defaults: Defaults = Field(default_factory=Defaults, description="Intent used when a Job names none.")
    shm: ShmSettings = Field(default_factory=ShmSettings, description="/dev/shm for GPU containers.")
    enforce: list[Enforceable] = Field(default_factory=list,
                                       description="Fields the platform owns: a different user value is denied.")
    rules: dict[str, Action] = Field(default_factory=dict, description="Per-rule action overrides.")


class Platform(Strict):
    apiVersion: Literal["trainadmit.io/v1alpha1"]
    kind: Literal["Platform"]
    metadata: Metadata
    spec: PlatformSpec = Field(default_factory=PlatformSpec)


# ---------------------------------------------------------------------------------------------
# Custom rules (CEL), in the shape of a Kubernetes ValidatingAdmissionPolicy


class MatchCondition(Strict):
    name: Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)]
    expression: str = Field(description="CEL over object, oldObject, request, params; false skips the rule.")


class Variable(Strict):
    name: Annotated[str, Field(pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$", max_length=63,
                               description="Read as variables.<name> by later variables and the validations.")]
    expression: str = Field(description="CEL over object, oldObject, request, params and earlier variables.")


class CelValidation(Strict):
    expression: str = Field(description="CEL that must be true for the object to pass.")
    message: str | None = Field(None, description="Shown when the expression is false.")
    messageExpression: str | None = Field(None, description="CEL producing the message (a string).")
    path: str = Field("", description="Field path reported with the violation, e.g. metadata.labels.")
    hint: str = Field("", description="What the user should change.")

    @model_validator(mode="after")
    def _message(self) -> CelValidation:
        if not self.message and not self.messageExpression:
            raise ValueError("set message or messageExpression: a denial must say what to change")
        return self


class RuleSpec(Strict):
    action: Literal["deny", "warn"] = Field("deny", description="What a failed validation does.")
    kinds: list[Annotated[str, Field(pattern=r"^[A-Z][A-Za-z0-9]*$")]] = Field(
        default_factory=lambda: ["Job", "Pod"],
        description="Kinds the rule applies to: any kind trainadmit handles (Job, Pod, PyTorchJob, MPIJob, RayCluster, "
        "RayJob, JobSet, LeaderWorkerSet, …).")
    operations: list[Literal["CREATE", "UPDATE"]] = Field(default_factory=lambda: ["CREATE"],
                                                          description="Operations; oldObject is set on UPDATE.")
    namespaces: list[str] | None = Field(None, description="Namespace names or globs; default all.")
    matchConditions: list[MatchCondition] = Field(default_factory=list,
                                                  description="All must be true, or the rule is skipped.")
    params: dict[str, object] = Field(default_factory=dict, description="Values the expressions read as params.")
    variables: list[Variable] = Field(
        default_factory=list, description="Named sub-expressions, evaluated in order after the match conditions.")
    validations: list[CelValidation] = Field(min_length=1, description="Each false one is a violation.")


    @model_validator(mode="after")
    def _unique_names(self) -> RuleSpec:
        _unique([v.name for v in self.variables], "variable")
        _unique([m.name for m in self.matchConditions], "match condition")  # as the apiserver requires
        return self


class Rule(Strict):
    apiVersion: Literal["trainadmit.io/v1alpha1"]
    kind: Literal["Rule"]
    metadata: Metadata
    spec: RuleSpec


DOCUMENT_KINDS: dict[str, type[Strict]] = {
    "Platform": Platform,
    "Pool": Pool,
    "Dataset": Dataset,
    "CheckpointClass": CheckpointClass,
    "PriorityTier": PriorityTier,
    "Quota": Quota,
    "Rule": Rule,
}
