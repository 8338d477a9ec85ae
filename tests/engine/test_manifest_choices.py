"""What a public manifest already brings is the user's: its own RDMA devices and networks, its fabric, its gang
scheduler, its /dev/shm; and what the decision reports is what it did. Each test is one public manifest (tests/
fixtures; sources in SOURCES.md) with what a training user adds (GPUs, a namespace), the decision written down by
hand from what the manifest says.
"""

from __future__ import annotations

import copy
import json

import pytest
from support.builders import with_gpus
from support.manifests import load_yaml
from support.paths import FIXTURES
from support.policies import write_policy

from trainadmit.engine import Request, decide, load_policy
from trainadmit.engine.clusterview import NoCluster, Presence

REAL = FIXTURES / "real-world"
SHARED_DEVICE = "rdma/rdma_shared_device_a"  # the bundled h100-ib pool's RDMA resource
IB_HCA = "NCCL_IB_HCA"
MULTUS = "k8s.v1.cni.cncf.io/networks"


def document(name: str, kind: str, folder=REAL) -> dict:
    return copy.deepcopy(next(d for d in load_yaml(folder / name) if d.get("kind") == kind))


def env_names(container: dict) -> list[str]:
    return [e["name"] for e in container.get("env") or []]


def rules(d) -> set[str]:
    return {v.rule for v in d.violations}


def applied(d) -> dict:
    return json.loads(d.mutated["metadata"]["annotations"]["trainadmit.io/applied"])


# ---- its own RDMA devices and networks ------------------------------------------------------------------------

def test_a_container_with_its_own_sriov_rdma_device_gets_no_second_one(policy):
    """Azure's SR-IOV InfiniBand scenario: 8 GPUs and ``rdma/ib: 8`` from the SR-IOV device plugin. The shared
    device plugin's resource on top would ask the node for two RDMA device plugins' devices; the pool's HCA names
    would point NCCL at the wrong ports."""
    d = decide(policy, Request(document("azure-aks-rdma-ib-sriov-gpu-eight.yaml", "Job"), namespace="team-nlp"))
    assert d.allowed, [v.text() for v in d.violations]
    spec = d.mutated["spec"]["template"]
    [runner] = spec["spec"]["containers"]
    assert runner["resources"]["limits"] == {"nvidia.com/gpu": "8", "rdma/ib": 8}
    assert runner["resources"]["requests"] == {"nvidia.com/gpu": "8", "rdma/ib": 8}
    assert env_names(runner) == ["NCCL_DEBUG"]  # the pool's transport variables stay out; its debug level does not
    assert MULTUS not in (spec.get("metadata") or {}).get("annotations", {})
    assert "IPC_LOCK" not in json.dumps(runner)
    assert "rdma" not in applied(d)["injected"]
    assert any("spec.template keeps its own network (rdma/ib (container runner))" in n for n in d.summary["notes"])


@pytest.mark.parametrize(("name", "kind", "template", "own"), [
    # CoreWeave's nccl-tests: every worker asks for rdma/ib: 1 (CoreWeave's InfiniBand device plugin)
    ("coreweave-nccl-test-distributed-h100-64-mpijob.yaml", "MPIJob", "Worker", {"rdma/ib": 1}),
    # OCI's SR-IOV virtual functions: 16 nvidia.com/rdma-vf and one Multus network per VF
    ("oci-virtual-functions-mpijob-BM.GPU.H100.8.yaml", "MPIJob", "Worker", {"nvidia.com/rdma-vf": 16}),
])
def test_operator_workers_that_bring_their_own_nics_keep_them_alone(policy, name, kind, template, own):
    obj = document(name, kind)
    original = copy.deepcopy(obj)
    d = decide(policy, Request(obj, namespace="team-nlp"))
    assert d.allowed, [v.text() for v in d.violations]
    before = original["spec"]["mpiReplicaSpecs"][template]["template"]
    after = d.mutated["spec"]["mpiReplicaSpecs"][template]["template"]
    [worker] = after["spec"]["containers"]
    assert SHARED_DEVICE not in worker["resources"]["limits"] and SHARED_DEVICE not in worker["resources"].get(
        "requests", {})
    assert {k: v for k, v in worker["resources"]["limits"].items() if k != "nvidia.com/gpu" and k != "memory"} == own
    assert IB_HCA not in env_names(worker)
    assert (after.get("metadata") or {}).get("annotations", {}).get(MULTUS) == \
        (before.get("metadata") or {}).get("annotations", {}).get(MULTUS)  # the user's networks, or none


def test_a_pod_with_its_own_multus_network_keeps_it_and_gets_no_pool_network(policy):
    """NVIDIA network operator's host-device example Pod (``nvidia.com/hostdev`` and its own Multus network) with
    a GPU: nothing of the InfiniBand pool's network is layered over what it chose."""
    obj = with_gpus(document("netop-hostdevice-network-pod1.yml", "Pod"), 1)
    d = decide(policy, Request(obj, namespace="team-nlp"))
    assert d.allowed
    [c] = d.mutated["spec"]["containers"]
    assert set(c["resources"]["limits"]) == {"nvidia.com/hostdev", "nvidia.com/gpu"}
    assert d.mutated["metadata"]["annotations"][MULTUS] == "example-hostdevice-network"
    assert IB_HCA not in env_names(c)


# ---- other fabrics ----------------------------------------------------------------------------------------------

def test_gke_gpudirect_rdma_pods_get_no_infiniband_pool(policy):
    """GKE's A3 Ultra JobSet (Cluster Toolkit) and A4 Pods (container-engine-accelerators) declare their RDMA
    NICs with GKE's multi-networking annotations: no bundled pool has that fabric, so they are refused, naming
    the annotation, and nothing of the InfiniBand pool is written into them."""
    jobset = decide(policy, Request(document("gke-ctk-a3ultra-nccl-jobset-example.yaml", "JobSet")))
    [v] = [v for v in jobset.violations if v.rule == "intent.no-pool"]
    assert v.path == ('spec.replicatedJobs[0].template.spec.template.metadata.annotations'
                      '["networking.gke.io/interfaces"]')
    assert v.message.startswith("no pool fits this JobSet: it asks for fabric gke-gpudirect-rdma (")
    assert "ask the platform team for a pool with fabric gke-gpudirect-rdma" in v.hint
    template = jobset.mutated["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert MULTUS not in template["metadata"]["annotations"]
    assert SHARED_DEVICE not in template["spec"]["containers"][0]["resources"]["limits"]
    pod = decide(policy, Request(document("gke-cea-gpudirect-rdma-nccl-test-a4.yaml", "Pod")))
    assert rules(pod) >= {"intent.no-pool"} and not pod.allowed


class ClaimTemplates(NoCluster):
    """A cluster holding the ResourceClaimTemplates the manifest's own file publishes."""

    def __init__(self, *templates: dict):
        self.templates = {t["metadata"]["name"]: t for t in templates}

    def reference(self, kind, name, namespace=None):
        if kind.kind != "ResourceClaimTemplate":
            return super().reference(kind, name, namespace)
        found = self.templates.get(name)
        return (Presence.present, found) if found is not None else (Presence.unknown, None)


def test_nics_claimed_through_dra_are_the_templates_own(policy):
    """GKE managed DRANET (``mrdma.google.com``) is a fabric no bundled pool has: refused. OCI's DRANET NICs
    (``dra.net``) on the InfiniBand pool: the template brought its NICs, so it gets no shared RDMA device."""
    path = "gke-cea-gpudirect-rdma-nccl-test-managed-rdma.yaml"
    cluster = ClaimTemplates(document(path, "ResourceClaimTemplate"))
    gke = decide(policy, Request(document(path, "Pod")), cluster)
    [v] = [v for v in gke.violations if v.rule == "intent.no-pool"]
    assert v.path == "spec.resourceClaims[0]" and "gke-gpudirect-rdma" in v.message
    path = "oci-dranet-mpijob-BM.GPU4.8.yaml"
    oci = decide(policy, Request(document(path, "MPIJob"), namespace="team-nlp"),
                 ClaimTemplates(document(path, "ResourceClaimTemplate")))
    assert oci.allowed
    [worker] = oci.mutated["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    assert SHARED_DEVICE not in worker["resources"]["limits"] and IB_HCA not in env_names(worker)


DRANET = FIXTURES / "dra" / "dranet" / "examples"


def test_one_claim_of_gpus_and_nics_is_counted_for_its_gpus_and_kept_for_its_nics(policy):
    """DRANET's own examples claim GPUs and NICs in one ResourceClaimTemplate; GPU counting and the template's
    own network read the same claim, and split its DeviceClasses the same way. By hand: the AWS MPIJob's 2
    Workers claim ``gpu-efa-aligned`` (1 device of gpu.nvidia.com, 1 of efa.networking.k8s.aws): 2 GPUs, and the
    EFA fabric, which no bundled pool provides: refused naming the claim. The 4-GPU, 4-NIC MPIJob on the
    InfiniBand pool (dranet.net NICs): its 4 GPUs per Pod counted (so whole-node refuses it), and the Workers keep
    their own NICs: no shared RDMA device, no Multus network, no HCA list."""
    from trainadmit.cluster.snapshot import SnapshotCluster

    claims = [d for d in load_yaml(DRANET / "aws-gpu-efa-resource-claim-template.yaml")]
    aws = decide(policy, Request(document("aws-gpu-efa-mpi-job.yaml", "MPIJob", DRANET), namespace="default"),
                 SnapshotCluster([{**c, "metadata": {**c["metadata"], "namespace": "default"}} for c in claims]))
    assert aws.summary["gpusPerPod"] == 1 and aws.summary["pods"] == 3
    [v] = [v for v in aws.violations if v.rule == "intent.no-pool"]
    assert v.path == "spec.mpiReplicaSpecs.Worker.template.spec.resourceClaims[0]" and "efa" in v.message

    claims = [d for d in load_yaml(DRANET / "distributed-training-resource-claim-template.yaml")]
    mpijob = document("distributed-training-mpi-job-4gpu-4nic-numa-aligned.yaml", "MPIJob", DRANET)
    d = decide(policy, Request(mpijob, namespace="team-nlp"),
               SnapshotCluster([{**c, "metadata": {**c["metadata"], "namespace": "team-nlp"}} for c in claims]))
    assert d.summary["pool"] == "h100-ib" and d.summary["gpusPerPod"] == 4 and "topology.whole-node" in rules(d)
    assert any("Worker" in n and "keeps its own network" in n and "dranet.net" in n for n in d.summary["notes"])
    worker = d.mutated["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    assert MULTUS not in (worker["metadata"].get("annotations") or {})
    for container in worker["spec"]["containers"]:
        assert SHARED_DEVICE not in (container.get("resources") or {}).get("limits", {})
        assert IB_HCA not in env_names(container)


def test_a_class_the_policy_calls_gpus_is_never_a_nic(policy, tmp_path):
    """NIC class patterns may be wide; a DeviceClass the policy lists as GPUs stays GPUs, so one claim's
    DeviceClasses are counted as GPUs or read as the template's own NICs, never both (a hand-made pattern: no
    public policy names one this wide)."""
    assert policy.is_nic_class("dranet.net") and policy.is_nic_class("mrdma.google.com")
    wide = load_policy(write_policy(tmp_path, {"nics": {"deviceClasses": ["*.com", "dranet.net"]}}))
    assert wide.is_nic_class("mrdma.google.com") and not wide.is_nic_class("gpu.nvidia.com")
    assert "gpu.nvidia.com" in wide.gpu_device_classes


HOST_POOL = {"apiVersion": "trainadmit.io/v1alpha1", "kind": "Pool", "metadata": {"name": "oci-h100"},
             "spec": {"fabric": "host-network", "gpu": {"resource": "nvidia.com/gpu", "perNode": 8},
                      "nodeSelector": {"node.kubernetes.io/instance-type": "BM.GPU.H100.8"},
                      "topology": {"default": "any", "levels": [{"name": "node", "nodeLabel": "kubernetes.io/hostname",
                                                                  "maxNodes": 1}]},
                      "nccl": {"env": {"NCCL_IB_GID_INDEX": "3", "NCCL_DEBUG": "WARN"}}}}


def test_rdma_over_the_host_network_is_its_own_fabric(policy, tmp_path):
    """OCI's host-network nccl-test MPIJob: on the bundled policies no pool runs RDMA over the host's network, so
    it is refused naming its hostNetwork; a platform with such a pool places it there, and a hostNetwork Pod
    gets no Multus annotation (which does nothing there) and none of the InfiniBand pool's devices."""
    obj = document("oci-host-network-mpijob-BM.GPU.H100.8.yaml", "MPIJob")
    d = decide(policy, Request(copy.deepcopy(obj), namespace="team-nlp"))
    [v] = [v for v in d.violations if v.rule == "intent.no-pool"]
    assert v.path == "spec.mpiReplicaSpecs.Worker.template.spec.hostNetwork"
    assert "fabric host-network" in v.message
    oci = load_policy(write_policy(tmp_path, extra=[HOST_POOL]))
    d = decide(oci, Request(copy.deepcopy(obj), namespace="oci"))
    assert d.allowed and d.summary["pool"] == "oci-h100", [v.text() for v in d.violations]
    worker = d.mutated["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    assert MULTUS not in (worker.get("metadata") or {}).get("annotations", {})
    assert worker["spec"]["nodeSelector"] == {"node.kubernetes.io/instance-type": "BM.GPU.H100.8"}
    [c] = worker["spec"]["containers"]
    assert "NCCL_IB_GID_INDEX" not in env_names(c) and "NCCL_DEBUG" in env_names(c)


# ---- its gang scheduler -----------------------------------------------------------------------------------------

def test_a_kai_scheduler_job_gets_no_second_gang_and_no_gang_shape_rules(policy):
    """KAI's own batch example (schedulerName kai-scheduler, kai.scheduler/queue, batch-min-member 2): KAI's
    podgrouper forms its gang. No native gang on top, none of the gang-shape rules (it is NonIndexed); the
    pool's rules still hold (6 Pods of 1 GPU do not take whole nodes)."""
    d = decide(policy, Request(document("kai-batch-job-min-member.yaml", "Job"), namespace="team-nlp"))
    assert "scheduling" not in d.mutated["spec"]
    assert not rules(d) & {"gang.completion-mode", "gang.parallelism-completions"}
    [v] = [v for v in d.violations if v.rule == "gang.foreign-backend"]
    assert v.path == "spec.template.spec.schedulerName" and "the object joins kai's" in v.message
    assert d.summary["gang"] == "none" and "topology.whole-node" in rules(d)


def test_a_raycluster_queued_in_kai_gets_no_native_podgroup(policy):
    """KubeRay's KAI sample RayCluster (kai.scheduler/queue on the CR, which KubeRay's kai plugin copies to its
    Pods), with GPU workers: KAI groups it; trainadmit adds no PodGroup."""
    obj = with_gpus(document("kuberay-ray-cluster.kai-scheduler.yaml", "RayCluster"), 8)
    d = decide(policy, Request(obj, namespace="team-nlp"))
    assert d.companions == []
    assert all("schedulingGroup" not in g["template"]["spec"] for g in d.mutated["spec"]["workerGroupSpecs"])
    assert "gang.foreign-backend" in rules(d)


@pytest.fixture(scope="module")
def kai(tmp_path_factory):
    return load_policy(write_policy(tmp_path_factory.mktemp("kai"), {"gang": {
        "backend": "kai", "kaiTopology": "cluster-topology", "queue": None}}))  # no queue: KAI's own default


def test_the_kai_backend_writes_what_kais_podgrouper_reads(kai):
    """gang.backend kai on the Kubernetes docs' Indexed Job (3 x 8 GPUs) and Kubeflow's MNIST PyTorchJob: the queue
    label on the object (KAI's default leaf queue when none is named), KAI's scheduler name on the Pods, a Job's
    minimum as the batch-min-member annotation (KAI gives a Job one Pod otherwise), and the colocation as KAI's
    topology annotations (KAI-Scheduler podgrouper; fixtures/operators/kai/README.md)."""
    job = with_gpus(document("k8s-website-indexed-job.yaml", "Job"), 8)
    job["spec"]["completions"] = job["spec"]["parallelism"]
    d = decide(kai, Request(job, namespace="team-nlp"))
    assert d.allowed, [v.text() for v in d.violations]
    m = d.mutated
    assert m["metadata"]["labels"]["kai.scheduler/queue"] == "default-queue"
    assert m["metadata"]["annotations"]["kai.scheduler/batch-min-member"] == "3"
    assert m["metadata"]["annotations"]["kai.scheduler/topology"] == "cluster-topology"
    assert m["metadata"]["annotations"]["kai.scheduler/topology-required-placement"] == "topology.kubernetes.io/rack"
    assert m["spec"]["template"]["spec"]["schedulerName"] == "kai-scheduler"
    assert "scheduling" not in m["spec"] and d.summary["gang"] == "kai" and d.companions == []
    torch = with_gpus(document("kftrainingop-pytorch_job_mnist_nccl.yaml", "PyTorchJob"), 8)
    torch["metadata"]["labels"] = {"trainadmit.io/queue": "team-a"}
    t = decide(kai, Request(torch, namespace="team-nlp")).mutated
    assert t["metadata"]["labels"]["kai.scheduler/queue"] == "team-a"
    assert {s["template"]["spec"]["schedulerName"] for s in t["spec"]["pytorchReplicaSpecs"].values()} == \
        {"kai-scheduler"}
    assert "runPolicy" not in t["spec"]  # KAI counts every replica of a PyTorchJob itself


# ---- mounts -----------------------------------------------------------------------------------------------------

TRAINJOB = FIXTURES / "operators" / "kubeflow-trainer-v2" / "examples"


def test_a_trainjobs_own_dev_shm_in_its_runtime_patch_is_not_replaced(policy):
    """Kubeflow Trainer's runtime-patches example (8Gi per node) with GPUs, and the platform team's patch
    mounting its own /dev/shm into the node container: Trainer merges patches by mountPath, so a /dev/shm of
    trainadmit's would replace the user's. None is added, and the decision says so."""
    obj = with_gpus(document("02-runtime-patches.yaml", "TrainJob", TRAINJOB), 8)
    pod = obj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0][
        "template"]["spec"]["template"]["spec"]
    pod["containers"] = [{"name": "node", "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}]
    pod["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}]
    d = decide(policy, Request(obj, namespace="team-nlp"))
    ours = next(p for p in d.mutated["spec"]["runtimePatches"] if p["manager"] == "trainadmit.io/admission")
    ours_pod = ours["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
        "spec"]
    assert "/dev/shm" not in json.dumps(ours_pod) and "ta-dshm" not in json.dumps(ours_pod)
    assert any("container node keeps its own /dev/shm (spec.runtimePatches[0]" in n for n in d.summary["notes"])


def test_an_injected_dev_shm_fits_the_memory_limit_and_is_never_warned_about(policy):
    """The same TrainJob without a /dev/shm of its own: 8Gi of memory per node, so trainadmit's /dev/shm is half of
    it (4Gi), not the platform's 64Gi, and storage.shm-exceeds-memory has nothing to say. scheduler-plugins'
    sakkara Job (128Mi) gets none: half of it is no more than the container runtime's 64Mi."""
    obj = with_gpus(document("02-runtime-patches.yaml", "TrainJob", TRAINJOB), 8)
    d = decide(policy, Request(obj, namespace="team-nlp"))
    ours = next(p for p in d.mutated["spec"]["runtimePatches"] if p["manager"] == "trainadmit.io/admission")
    volumes = ours["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
        "spec"]["volumes"]
    assert {"name": "ta-dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "4Gi"}} in volumes
    assert "storage.shm-exceeds-memory" not in rules(d)
    small = decide(policy, Request(document("schedplugins-sakkara-job-a.yaml", "Job"), namespace="team-nlp"))
    assert "ta-dshm" not in json.dumps(small.mutated) and "storage.shm-exceeds-memory" not in rules(small)
    assert "spec.template: no /dev/shm added: half of container main's memory limit 128Mi is not more than the " \
           "container runtime's own 64Mi" in small.summary["notes"]


# ---- provenance ---------------------------------------------------------------------------------------------------

def test_a_volcano_job_left_to_volcanos_defaulting_is_reported_as_such(tmp_path):
    """OCI's Volcano nccl-test (minAvailable 0, hostNetwork) on a platform with a host-network pool: Volcano's
    webhook sets minAvailable to the tasks' minimums and Volcano forms the gang; trainadmit writes no gang field,
    so ``gang`` is not among what it applied, and the decision says what Volcano will do."""
    oci = load_policy(write_policy(tmp_path, extra=[HOST_POOL]))
    d = decide(oci, Request(document("oci-volcano-BM.GPU.H100.8-nccl-test.yaml", "Job"), namespace="oci"))
    assert d.allowed, [v.text() for v in d.violations]
    assert d.mutated["spec"]["minAvailable"] == 0
    assert d.mutated["spec"]["priorityClassName"] == "training-normal"
    value = applied(d)
    assert "gang" not in value["injected"] and value["gang"] == "volcano" and d.summary["gang"] == "volcano"
    assert set(value["injected"]) == {i.concern for i in d.injections}
    assert "spec.minAvailable: Volcano's admission webhook sets it to the tasks' minimums (tasks[mpimaster] 1 + " \
           "tasks[mpiworker] minAvailable 0 = 1), and Volcano's job controller forms the gang from it" in value["notes"]


@pytest.mark.parametrize("name", sorted(p.name for p in REAL.iterdir() if p.suffix in (".yaml", ".yml")))
def test_the_applied_annotation_names_exactly_the_concerns_that_wrote(policy, name):
    """Over every public manifest: a concern is listed in trainadmit.io/applied when, and only when, it wrote
    something into the object; a second pass changes nothing and lists the same."""
    for doc in load_yaml(REAL / name):
        d = decide(policy, Request(copy.deepcopy(doc), namespace="team-nlp"))
        if not d.matched or d.mutated is None or "trainadmit.io/applied" not in d.mutated["metadata"].get(
                "annotations", {}):
            continue
        assert applied(d)["injected"] == list(dict.fromkeys(
            c for c in applied(d)["injected"] if c in {i.concern for i in d.injections})), name
        assert set(applied(d)["injected"]) == {i.concern for i in d.injections}, name
        again = decide(policy, Request(copy.deepcopy(d.mutated), namespace="team-nlp"))
        assert again.patch == [], f"{name}: a second pass patched {again.patch}"


# ---- the policy's words for NICs and fabrics ----------------------------------------------------------------------

def test_the_default_nic_names_are_the_device_plugins_and_clouds_ones(policy):
    """docs/fabrics.md: the resource names these public manifests and device plugins use are NICs; GPUs are not."""
    for name in ("rdma/ib", "rdma/rdma_shared_device_a", "rdma/shared_ib", "intel.com/intel_sriov_netdevice",
                 "openshift.io/sriov_net", "nvidia.com/hostdev", "nvidia.com/mlnxnics", "nvidia.com/rdma-vf",
                 "nvidia.com/sriovlegacy", "mellanox.com/mlnx_sriov_rdma", "vpc.amazonaws.com/efa"):
        assert policy.is_nic_resource(name), name
    for name in ("nvidia.com/gpu", "amd.com/gpu", "nvidia.com/mig-1g.12gb", "cpu", "hugepages-2Mi"):
        assert not policy.is_nic_resource(name), name
    for cls in ("dra.net", "dranet.net", "mrdma.google.com", "dranet-rdma-for-mpi", "efa.networking.k8s.aws"):
        assert policy.is_nic_class(cls), cls
    assert not policy.is_nic_class("gpu.nvidia.com") and not policy.is_nic_class("compute-domain-default-channel.nvidia.com")


def test_a_platforms_own_nic_names_are_respected_too(tmp_path):
    """A cluster whose device plugin calls its NICs example.com/nic lists them: the network operator's RDMA GPU
    Pod asking for one keeps it alone."""
    own = load_policy(write_policy(tmp_path, {"nics": {"resources": ["example.com/nic"]}}))
    obj = document("netop-rdma-gpu-test-pod1.yml", "Pod")
    del obj["metadata"]["annotations"]
    obj["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 1, "example.com/nic": 1}}
    [c] = decide(own, Request(obj, namespace="team-nlp")).mutated["spec"]["containers"]
    assert set(c["resources"]["limits"]) == {"nvidia.com/gpu", "example.com/nic"}


def test_a_fabric_yielding_to_one_that_does_not_exist_is_a_policy_error(tmp_path):
    from trainadmit.policy import PolicyError

    with pytest.raises(PolicyError, match=r"spec\.fabrics\.gke-gpudirect-rdma\.yieldsTo\[0\].*no fabric 'gke-tcpz'"):
        load_policy(write_policy(tmp_path, {"fabrics": {"gke-gpudirect-rdma": {
            "annotations": ["networking.gke.io/interfaces"], "yieldsTo": ["gke-tcpz"]}}}))
