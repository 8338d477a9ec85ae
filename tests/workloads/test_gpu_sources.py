"""GPUs asked for through DRA claims and through a TrainJob's runtime are counted, and every rule runs on them.

The manifests are public (tests/fixtures/dra/: NVIDIA's GPU DRA driver, DRANET, the Kubernetes website;
tests/fixtures/operators/kubeflow-trainer-v2/: Trainer's runtimes); the expected counts and decisions are
worked out by hand from the DRA API (``resource/v1/types.go``: a template's claim per Pod, a ResourceClaim
shared, ``count`` default 1, ``All``) and from Trainer's code (``numNodes``, ``resourcesPerNode``), as each test
says. Objects are made by hand only for corners no public file shows (a claim of 8 GPUs, a quota on a
DeviceClass's devices, two pools sharing a class).
"""

from __future__ import annotations

import copy

import pytest
from support.builders import job, rules_of, with_gpus
from support.cli import run_cli
from support.gpu_sources import docs, dra_job, eight_gpus, one, trainjob
from support.manifests import load_yaml
from support.patches import apply_patch
from support.paths import FIXTURES, POLICIES
from support.policies import write_policy

from trainadmit.cluster.snapshot import SnapshotCluster
from trainadmit.engine import Request, decide, load_policy, match

DRA = FIXTURES / "dra"
NVIDIA = DRA / "nvidia-dra-driver-gpu" / "examples"
DRANET = DRA / "dranet" / "examples"
TRAINER = FIXTURES / "operators" / "kubeflow-trainer-v2" / "examples"


def in_namespace(objs: list[dict], namespace: str) -> list[dict]:
    """As ``kubectl apply -n NAMESPACE`` creates them (the files name no namespace)."""
    out = []
    for obj in objs:
        obj = copy.deepcopy(obj)
        if obj["kind"] not in ("DeviceClass", "ClusterTrainingRuntime", "Namespace"):
            obj["metadata"]["namespace"] = namespace
        out.append(obj)
    return out


def decided(policy, obj, cluster=None, namespace=None):
    return decide(policy, Request(obj, namespace=namespace), cluster)


def messages(decision) -> str:
    return "\n".join(f"[{v.rule}] {v.path}: {v.message}" for v in decision.violations)


# ---- DRA: what a claim asks for ---------------------------------------------------------------------

def test_dranet_mpijob_takes_its_gpus_from_its_claim_template_and_must_take_whole_nodes(policy):
    """DRANET's MPIJob: 2 Workers, each with a claim made from h100-4gpu-4nic-numa-aligned (4 devices of
    gpu.nvidia.com and 4 NICs of dranet.net), no nvidia.com/gpu anywhere. By hand: 2 GPU Pods x 4 GPUs on the
    bundled h100-ib pool (8 GPUs per node, gpu.nvidia.com is its DeviceClass): multi-node workers that do not
    take whole nodes (topology.whole-node), the advice in the claim's own terms; the launcher asks for none. Its
    slotsPerWorker (4: a rank per GPU) follows the GPUs per worker."""
    mpijob = one(DRANET / "distributed-training-mpi-job-4gpu-4nic-numa-aligned.yaml", "MPIJob")
    companions = in_namespace(docs(DRANET / "distributed-training-resource-claim-template.yaml")
                              + docs(DRANET / "distributed-training-device-class.yaml"), "team-nlp")
    d = decided(policy, mpijob, SnapshotCluster(companions), "team-nlp")
    assert d.matched and d.summary["pool"] == "h100-ib" and d.summary["gpusPerPod"] == 4
    assert d.summary["gpuResource"] == "gpu.nvidia.com devices"
    [whole] = [v for v in d.violations if v.rule == "topology.whole-node"]
    assert whole.path == "spec.mpiReplicaSpecs.Worker.template.spec.resourceClaims[0]"
    assert "requests 4 GPUs per worker across 2 workers; pool h100-ib has 8 GPUs per node" in whole.message
    assert whole.hint == ("set count: 8 in the gpu.nvidia.com request of the claim named at "
                          "spec.mpiReplicaSpecs.Worker.template.spec.resourceClaims[0] and "
                          "spec.mpiReplicaSpecs.Worker.replicas: 1 and spec.slotsPerWorker: 8")


def test_a_claim_per_pod_and_a_shared_claim_are_counted_as_the_scheduler_allocates_them(policy):
    """NVIDIA's quickstart: gpu-test1's two Pods each get a claim of their own from single-gpu (1 GPU: a
    request without count asks for one); gpu-test3's two Pods share one ResourceClaim (1 GPU for both);
    gpu-test5's Pod has one claim with two requests (2 GPUs, however many containers list them);
    gpu-test8 is v1beta1's flat request (count: 2)."""
    cases = {"gpu-test1.yaml": 1, "gpu-test3.yaml": 1, "gpu-test5.yaml": 2, "gpu-test8.v1beta1.yaml": 2}
    for name, gpus in cases.items():
        objs = docs(NVIDIA / name)
        cluster = SnapshotCluster([o for o in objs if o["kind"] in ("ResourceClaimTemplate", "ResourceClaim")])
        for pod in (o for o in objs if o["kind"] == "Pod"):
            d = decided(policy, copy.deepcopy(pod), cluster)
            assert d.matched and d.allowed, (name, messages(d))
            assert (d.summary["pods"], d.summary["gpusPerPod"], d.summary["pool"]) == (1, gpus, "h100-ib"), name


def test_the_website_job_counts_its_own_claim_per_pod_and_the_shared_all_claim_once(tmp_path):
    """The Kubernetes website's Job: parallelism 2, each Pod with a claim of its own from
    example-resource-claim-template (1 device) and the shared ResourceClaim example-resource-claim, which asks
    for All devices of example-device-class. With a pool whose GPUs are that class, 4 per node: by hand, each
    Pod sees 1 + 4 = 5 GPUs, and the Job holds 2 x 1 + 4 = 6 (the shared claim once)."""
    pool = {"apiVersion": "trainadmit.io/v1alpha1", "kind": "Pool", "metadata": {"name": "example"},
            "spec": {"gpu": {"resource": "example.com/gpu", "perNode": 4,
                             "deviceClasses": [{"name": "example-device-class"}]},
                     "topology": {"default": "any", "levels": [
                         {"name": "node", "nodeLabel": "kubernetes.io/hostname", "maxNodes": 1}]}}}
    quota = {"apiVersion": "trainadmit.io/v1alpha1", "kind": "Quota", "metadata": {"name": "ml"},
             "spec": {"namespaces": ["ml"], "maxGPUsPerJob": 5}}
    policy = load_policy(write_policy(tmp_path / "p", extra=[pool, quota]))
    web = DRA / "kubernetes-website"
    cluster = SnapshotCluster(in_namespace(docs(web / "resourceclaimtemplate.yaml") + docs(web / "resourceclaim.yaml"),
                                           "ml"))
    d = decided(policy, one(web / "dra-example-job.yaml", "Job"), cluster, "ml")
    assert d.summary["pool"] == "example" and d.summary["gpusPerPod"] == 5
    assert "requests 6 GPUs" in next(v for v in d.violations if v.rule == "quota.gpus-per-job").message
    assert {"topology.whole-node", "gang.parallelism-completions"} <= rules_of(d)  # 5 ≠ 4; parallelism 2 ≠ 10


def test_device_counts_follow_the_api_exactly_all_first_available_and_an_allocation():
    """resource/v1/types.go: ExactCount with count (default 1); All (the number is the node's, None here);
    firstAvailable's alternatives in order; an allocated claim's results, one per device, by request."""
    from trainadmit.engine.dra import DeviceAsk, requests

    spec = {"devices": {"requests": [
        {"name": "a", "exactly": {"deviceClassName": "gpu.nvidia.com"}},
        {"name": "b", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}},
        {"name": "c", "firstAvailable": [{"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 8},
                                         {"name": "small", "deviceClassName": "gpu.nvidia.com", "count": 4}]}]}}
    found = requests(spec)
    assert [(r.name, r.asks) for r in found] == [
        ("a", (DeviceAsk("gpu.nvidia.com", 1),)), ("b", (DeviceAsk("gpu.nvidia.com", None),)),
        ("c", (DeviceAsk("gpu.nvidia.com", 8), DeviceAsk("gpu.nvidia.com", 4)))]
    claim = one(DRANET / "aws-gpu-efa-resource-claim.yaml", "ResourceClaim")  # as stored, allocated
    assert {r.name: r.allocated for r in requests(claim["spec"], claim["status"])} == {"gpu": 1, "efa": 1}
    # every field of the API's round-trip fixture reads (it sets both exactly and firstAvailable)
    testdata = load_yaml(DRA / "k8s-api-testdata" / "resource.k8s.io.v1.ResourceClaimTemplate.yaml")[0]
    assert requests(testdata["spec"]["spec"])


def test_a_first_available_claim_counts_its_largest_alternative(policy):
    """A Pod may get the first alternative it can: 8 GPUs or, failing that, 4; quota must hold the 8."""
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
             "metadata": {"name": "eight-or-four", "namespace": "team-nlp"},
             "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "firstAvailable": [
                 {"name": "eight", "deviceClassName": "gpu.nvidia.com", "count": 8},
                 {"name": "four", "deviceClassName": "gpu.nvidia.com", "count": 4}]}]}}}}
    d = decided(policy, dra_job("eight-or-four", workers=20), SnapshotCluster([claim]))
    assert d.summary["gpusPerPod"] == 8
    assert "requests 160 GPUs" in messages(d)  # quota team-nlp allows 128 per job


def test_extended_gpus_and_a_claim_nobody_can_look_up_are_each_reported_as_what_they_are(policy):
    """NVIDIA's IMEX MPIJob: 2 Workers x nvidia.com/gpu: 2 (the device plugin's way) and a claim on the
    ComputeDomain's channel template, which its controller creates (not in the file). Without a view the 4 GPUs
    are still counted, and the channel template is named as not verified."""
    mpijob = one(NVIDIA / "imex-nvbandwidth-test-job-1.yaml", "MPIJob")
    d = decided(policy, mpijob, None, "team-nlp")
    assert d.summary["gpusPerPod"] == 2 and d.summary["gpuResource"] == "nvidia.com/gpu"
    assert "ResourceClaimTemplate team-nlp/nvbandwidth-test-compute-domain-1-channel" in d.unverified


def test_every_rule_runs_on_the_counted_gpus(policy):
    """64 workers x 8 GPUs from a claim template in team-nlp (Quota team-nlp: 128 GPUs and 16 workers per job,
    racks of 16 nodes): the same rules a 64 x nvidia.com/gpu: 8 Job breaks, a native gang, the pool's placement."""
    d = decided(policy, dra_job("eight-gpus", workers=64), SnapshotCluster([eight_gpus()]))
    assert {"quota.gpus-per-job", "quota.workers-per-job", "topology.domain-fit"} <= rules_of(d)
    assert "requests 512 GPUs (64 × 8)" in messages(d)
    small = decided(policy, dra_job("eight-gpus", workers=4), SnapshotCluster([eight_gpus()]))
    assert small.allowed, messages(small)
    # the bundled auto, without the cluster's discovery: 1.37's native gang, a PodGroup from the reconciler
    assert small.summary["gang"] == "native/pod-group" and small.summary["pods"] == 4
    placed = apply_patch(small_job := dra_job("eight-gpus", workers=4), small.patch)
    assert placed["spec"]["template"]["spec"]["schedulingGroup"] == {"podGroupName": "dra-train-gang"}
    [podgroup] = small.companions
    assert podgroup["spec"]["schedulingPolicy"]["gang"]["minCount"] == 4
    assert placed["spec"]["template"]["spec"]["nodeSelector"]["trainadmit.io/pool"] == "h100-ib"
    assert small_job["spec"]["template"]["spec"]["resourceClaims"] == placed["spec"]["template"]["spec"][
        "resourceClaims"]  # the user's claim, untouched


def test_a_namespace_quota_on_the_device_classs_devices_binds_dra_gpus(policy):
    """ResourceQuota counts DRA devices per class (<class>.deviceclass.resource.k8s.io/devices), not in
    requests.nvidia.com/gpu: 4 x 8 devices against a hard limit of 16 is refused naming that quota."""
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpus", "namespace": "research"},
             "spec": {"hard": {"gpu.nvidia.com.deviceclass.resource.k8s.io/devices": "16"}},
             "status": {"hard": {"gpu.nvidia.com.deviceclass.resource.k8s.io/devices": "16"},
                        "used": {"gpu.nvidia.com.deviceclass.resource.k8s.io/devices": "0"}}}
    cluster = SnapshotCluster([quota, eight_gpus("research")])
    d = decided(policy, dra_job("eight-gpus", workers=4, namespace="research"), cluster)
    [hard] = [v for v in d.violations if v.rule == "quota.namespace-hard"]
    assert "needs 32 gpu.nvidia.com devices, and namespace research may hold at most 16" in hard.message
    assert "gpu.nvidia.com.deviceclass.resource.k8s.io/devices" in hard.message
    assert decided(policy, dra_job("eight-gpus", workers=2, namespace="research"), cluster).allowed


def test_a_missing_claim_template_is_refused_by_name_and_without_a_view_nothing_is_guessed(policy):
    """With a view that lists ResourceClaimTemplates, one that does not exist keeps the Pods Pending forever:
    refused naming it. Without a view, the GPUs cannot be counted: the decision says what it could not count."""
    mpijob = one(DRANET / "distributed-training-mpi-job-4gpu-4nic-numa-aligned.yaml", "MPIJob")
    listed = SnapshotCluster([{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplateList", "items": []}])
    d = decided(policy, copy.deepcopy(mpijob), listed, "team-nlp")
    [missing] = [v for v in d.violations if v.rule == "references.device-claim-missing"]
    assert missing.path == "spec.mpiReplicaSpecs.Worker.template.spec.resourceClaims[0]"
    assert "ResourceClaimTemplate team-nlp/h100-4gpu-4nic-numa-aligned" in missing.message and "does not exist" \
        in missing.message
    workload, reason = match(policy, mpijob, "team-nlp")
    assert workload is None and reason.startswith("GPUs not counted: ResourceClaimTemplate team-nlp/"
                                                  "h100-4gpu-4nic-numa-aligned (claim gpu-nic of mpiReplicaSpecs"
                                                  ".Worker)")


def test_a_missing_device_class_is_refused_and_an_unknown_one_is_not_verified(policy):
    classes = SnapshotCluster([eight_gpus(), {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClassList",
                                              "items": []}])
    d = decided(policy, dra_job("eight-gpus"), classes)
    assert "references.device-class-missing" in rules_of(d)
    assert "DeviceClass gpu.nvidia.com (named by ResourceClaimTemplate team-nlp/eight-gpus) does not exist" \
        in messages(d)
    assert "DeviceClass gpu.nvidia.com" in decided(policy, dra_job("eight-gpus"), SnapshotCluster([eight_gpus()])
                                                   ).unverified


def test_a_device_class_serving_a_gpu_resource_is_a_gpu_class(policy):
    """NVIDIA's mig-1g-12gb.gpu.nvidia.com class serves nvidia.com/mig-1g.12gb (extendedResourceName), a MIG
    slice: a claim of it asks for a GPU type no bundled pool has (intent.no-pool), not for nothing."""
    mig_class = one(NVIDIA / "extended-resources-mig-1g-12gb.yaml", "DeviceClass")
    claim = eight_gpus()
    claim["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = mig_class["metadata"]["name"]
    d = decided(policy, dra_job("eight-gpus"), SnapshotCluster([claim, mig_class]))
    assert "intent.no-pool" in rules_of(d)
    assert "no pool provides DeviceClass mig-1g-12gb.gpu.nvidia.com" in messages(d)


def test_a_request_carrying_a_pools_selector_gets_that_pool(tmp_path):
    """Two pools share NVIDIA's class; each names the selector users add to get its GPU type (and the bundled
    h100-ib, which takes any device of the class, gets the requests that carry neither)."""
    extra = []
    for name, product, per in (("h100", "NVIDIA H100 80GB HBM3", 8), ("l40s", "NVIDIA L40S", 4)):
        selector = f"device.attributes['gpu.nvidia.com'].productName == '{product}'"
        extra.append({"apiVersion": "trainadmit.io/v1alpha1", "kind": "Pool", "metadata": {"name": name},
                      "spec": {"gpu": {"perNode": per, "deviceClasses": [{"name": "gpu.nvidia.com",
                                                                          "selectors": [selector]}]},
                               "nodeSelector": {"pool": name}, "topology": {"default": "any", "levels": [
                                   {"name": "node", "nodeLabel": "kubernetes.io/hostname", "maxNodes": 1}]}}})
    policy = load_policy(write_policy(tmp_path / "p", extra=extra))
    claim = eight_gpus(name="l40s")
    claim["spec"]["spec"]["devices"]["requests"][0]["exactly"].update(
        count=4, selectors=[{"cel": {"expression": "device.attributes['gpu.nvidia.com'].productName  ==  "
                                                   "'NVIDIA L40S'"}}])
    d = decided(policy, dra_job("l40s", workers=2), SnapshotCluster([claim]))
    assert d.summary["pool"] == "l40s" and d.summary["gpusPerPod"] == 4  # l40s' 4 per node: whole nodes
    assert not {"topology.whole-node", "intent.no-pool", "gpu.single-type"} & rules_of(d), messages(d)
    plain = eight_gpus(name="plain")
    assert decided(policy, dra_job("plain"), SnapshotCluster([plain])).summary["pool"] == "h100-ib"


# ---- a pool whose NICs are DRA devices ------------------------------------------------------------

def test_a_pool_whose_nics_are_dra_devices_gets_them_as_a_claim(tmp_path):
    """DRANET's RDMA NIC template (mpi_operator/dra_resources.yaml) as the pool's NICs: every GPU Pod claims it and
    its GPU containers list the claim (no rdma/ extended resource), once; a namespace without the template is
    refused naming it."""
    pools = [d for d in load_yaml(POLICIES / "pools.yaml")]
    h100 = copy.deepcopy(next(p for p in pools if p["metadata"]["name"] == "h100-ib"))
    h100["metadata"]["name"] = "h100-dranet"
    h100["spec"]["default"] = False
    h100["spec"]["rdma"] = {"claimTemplate": "mpi-worker-rdma-nic-template", "networks": []}
    h100["spec"]["preflight"] = {"enabled": False}
    policy = load_policy(write_policy(tmp_path / "p", extra=[h100]))
    obj = job(name="nics", labels={"trainadmit.io/pool": "h100-dranet"})
    d = decided(policy, copy.deepcopy(obj))
    mutated = apply_patch(obj, d.patch)
    spec = mutated["spec"]["template"]["spec"]
    assert spec["resourceClaims"] == [{"name": "trainadmit-rdma",
                                       "resourceClaimTemplateName": "mpi-worker-rdma-nic-template"}]
    assert spec["containers"][0]["resources"]["claims"] == [{"name": "trainadmit-rdma"}]
    assert not any(k.startswith("rdma/") for k in spec["containers"][0]["resources"]["limits"])
    assert decided(policy, mutated).patch == []  # idempotent
    nic_template = in_namespace(docs(DRANET / "mpi-operator-dra-resources.yaml", "ResourceClaimTemplate"), "team-nlp")
    assert "references.device-claim-missing" not in rules_of(decided(policy, copy.deepcopy(obj),
                                                                       SnapshotCluster(nic_template)))
    elsewhere = decided(policy, job(name="nics", namespace="research", labels={"trainadmit.io/pool": "h100-dranet"}),
                        SnapshotCluster(nic_template))
    assert "ResourceClaimTemplate research/mpi-worker-rdma-nic-template" in messages(elsewhere)


# ---- TrainJob: the Pods its runtime yields ----------------------------------------------------------

def test_trainer_sizes_each_replicated_job_of_the_runtime():
    """kubeflow/trainer newRuntimeInfo, torch and MPI plugins, by hand: torchtune's two initializers run one Pod
    each and its trainer job numNodes (the TrainJob's 3, else mlPolicy's 1); mlx (MPI, runLauncherAsNode) runs
    one launcher and numNodes - 1 node Pods, whose containers named node get resourcesPerNode; a runtime's
    Job parallelism sizes a job no policy sizes."""
    from trainadmit.engine.workloads.runtime import pod_sets

    tune = load_yaml(TRAINER / "runtime-torchtune-llama3_2_1B.yaml")[0]
    assert [(s.name, s.pods, s.role) for s in pod_sets(tune, {"numNodes": 3})] == [
        ("dataset-initializer", 1, "dataset-initializer"), ("model-initializer", 1, "model-initializer"),
        ("node", 3, "node")]
    assert [s.pods for s in pod_sets(tune)] == [1, 1, 1]
    mlx = load_yaml(TRAINER / "runtime-mlx_distributed.yaml")[0]
    sets = pod_sets(mlx, {"numNodes": 4})
    assert [(s.name, s.pods, sorted(s.trainer_containers)) for s in sets] == [("node", 3, ["node"]),
                                                                              ("launcher", 1, ["node"])]
    cache = load_yaml(TRAINER / "runtime-torch_distributed_with_cache.yaml")[0]
    assert [(s.name, s.pods) for s in pod_sets(cache, {"numNodes": 2})] == [("dataset-initializer", 1), ("node", 2)]


def test_a_trainjob_that_takes_its_gpus_from_its_runtime_is_counted(policy):
    """Trainer's torchtune runtime asks for nvidia.com/gpu: 2 in its node container; a TrainJob of 3 nodes with
    no resourcesPerNode: 3 x 2 GPUs, multi-node workers not taking whole nodes, the advice at the TrainJob's
    own resourcesPerNode."""
    runtime = load_yaml(TRAINER / "runtime-torchtune-llama3_2_1B.yaml")[0]
    d = decided(policy, trainjob("torchtune-llama3.2-1b", 3), SnapshotCluster([runtime]))
    assert d.summary["gpusPerPod"] == 2 and d.summary["pool"] == "h100-ib"
    [whole] = [v for v in d.violations if v.rule == "topology.whole-node"]
    assert whole.path == 'spec.trainer.resourcesPerNode.limits["nvidia.com/gpu"]'
    assert "requests 2 GPUs per worker across 3 workers" in whole.message


def test_a_trainjob_on_a_runtime_of_8_gpus_per_node_over_quota_is_refused(policy):
    """The public torch-distributed runtime with 8 GPUs per node (as a platform team writes one): 32 nodes are
    256 GPUs and 32 workers, over team-nlp's 128 and 16; 2 nodes are admitted, and the runtime's GPUs are kept
    in resourcesPerNode (which replaces the runtime's) beside the pool's RDMA device."""
    runtime = with_gpus(load_yaml(TRAINER / "runtime-torch_distributed.yaml")[0], 8)
    cluster = SnapshotCluster([runtime])
    d = decided(policy, trainjob("torch-distributed", 32), cluster)
    assert {"quota.gpus-per-job", "quota.workers-per-job"} <= rules_of(d), messages(d)
    assert "requests 256 GPUs (32 × 8)" in messages(d)
    ok = decided(policy, trainjob("torch-distributed", 2), cluster)
    assert ok.allowed, messages(ok)
    mutated = apply_patch(trainjob("torch-distributed", 2), ok.patch)
    assert mutated["spec"]["trainer"]["resourcesPerNode"]["limits"] == {"nvidia.com/gpu": 8,
                                                                        "rdma/rdma_shared_device_a": 1}
    assert decided(policy, mutated, cluster).patch == []  # idempotent


def test_a_trainjob_whose_runtime_nobody_holds_says_so_and_a_missing_one_is_refused(policy):
    """Trainer's 01-multi-node TrainJob names the torch-distributed ClusterTrainingRuntime: without a view its
    GPUs cannot be counted (said, not guessed); with a view that lists runtimes and not this one, Trainer would
    never make its Pods (refused naming it)."""
    example = one(TRAINER / "01-multi-node.yaml", "TrainJob")
    workload, reason = match(policy, copy.deepcopy(example), "team-nlp")
    assert workload is None and reason.startswith("GPUs not counted: ClusterTrainingRuntime torch-distributed")
    listed = SnapshotCluster([{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntimeList",
                               "items": []}])
    d = decided(policy, example, listed, "team-nlp")
    [missing] = [v for v in d.violations if v.rule == "references.runtime-missing"]
    assert missing.path == "spec.runtimeRef" and "ClusterTrainingRuntime torch-distributed" in missing.message
    # the runtime as Trainer publishes it asks for no GPU: then the TrainJob is no GPU workload
    cpu = decided(policy, one(TRAINER / "01-multi-node.yaml", "TrainJob"),
                  SnapshotCluster(docs(TRAINER / "runtime-torch_distributed.yaml")), "team-nlp")
    assert not cpu.matched and cpu.reason.startswith("not a GPU workload")


# ---- runtimes decided as templates --------------------------------------------------------------

def test_a_runtime_is_checked_by_the_rules_that_do_not_depend_on_a_jobs_size_and_never_mutated(policy):
    """Trainer's torchtune runtime (2 GPUs, mlPolicy.numNodes 1) fits one h100 node: admitted, unchanged. The
    torch-distributed runtime made to ask for 6 GPUs on 2 nodes breaks whole nodes; one that pins the L40S pool
    while asking for the h100 pool's RDMA device, or sets an NCCL value outside NCCL's grammar, is refused
    too."""
    tune = load_yaml(TRAINER / "runtime-torchtune-llama3_2_1B.yaml")[0]
    d = decided(policy, copy.deepcopy(tune))
    assert d.matched and d.allowed and d.patch == [], messages(d)
    six = with_gpus(load_yaml(TRAINER / "runtime-torch_distributed.yaml")[0], 6)
    six["spec"]["mlPolicy"]["numNodes"] = 2
    assert "topology.whole-node" in rules_of(decided(policy, six))
    node = lambda r: r["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]  # noqa: E731
    rdma = with_gpus(load_yaml(TRAINER / "runtime-torch_distributed.yaml")[0], 4)
    rdma["metadata"]["labels"]["trainadmit.io/pool"] = "l40s-eth"
    node(rdma)["spec"]["containers"][0]["resources"]["limits"]["rdma/rdma_shared_device_a"] = 1
    assert "rdma.pool-without-rdma" in rules_of(decided(policy, rdma))
    nccl = with_gpus(load_yaml(TRAINER / "runtime-torch_distributed.yaml")[0], 8)
    node(nccl)["spec"]["containers"][0]["env"] = [{"name": "NCCL_IB_TIMEOUT", "value": "forever"}]
    assert "nccl.syntax" in rules_of(decided(policy, nccl))
    pinned = with_gpus(load_yaml(TRAINER / "runtime-torch_distributed.yaml")[0], 8)
    node(pinned)["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-L40S"}
    assert "placement.contradiction" in rules_of(decided(policy, pinned))
    updated = decide(policy, Request(six, operation="UPDATE", old=tune, phase="validate"))
    assert "topology.whole-node" in rules_of(updated)  # a runtime's update is a new template for every TrainJob


def test_the_webhooks_send_dra_workloads_trainjobs_and_runtimes(policy):
    """The matchConditions the apiserver evaluates: a Job whose GPUs are only in a claim, a TrainJob whose GPUs are
    only in its runtime, and a runtime, reach the webhook (validating) that decides them."""
    import yaml
    from cel_expr_python import cel

    from trainadmit.authoring.webhooks import webhook_configurations

    mutating, validating = [w["webhooks"][0] for w in yaml.safe_load_all(webhook_configurations(policy)) if w]
    env = cel.NewEnv(variables={"object": cel.Type.DYN, "oldObject": cel.Type.DYN, "request": cel.Type.DYN})
    cases = [("batch", "jobs", dra_job("eight-gpus"), True),
             ("trainer.kubeflow.org", "trainjobs", trainjob("torch-distributed", 4), True),
             ("trainer.kubeflow.org", "clustertrainingruntimes",
              with_gpus(load_yaml(TRAINER / "runtime-torch_distributed.yaml")[0]), False)]
    for group, resource, obj, mutated in cases:
        data = {"object": obj, "oldObject": None, "request": {"resource": {"group": group, "resource": resource},
                                                             "operation": "CREATE", "subResource": ""}}
        for hook, expected in ((validating, True), (mutating, mutated)):
            sent = any(group in r["apiGroups"] and resource in r["resources"] for r in hook["rules"])
            passes = all(env.compile(mc["expression"]).eval(data=data).plain_value() is True
                         for mc in hook["matchConditions"])
            assert (sent and passes) == expected, (resource, hook["name"])


# ---- check: what the submission carries --------------------------------------------------------

@pytest.fixture
def dranet_files(tmp_path):
    job_file = tmp_path / "a-mpijob.yaml"
    job_file.write_text((DRANET / "distributed-training-mpi-job-4gpu-4nic-numa-aligned.yaml").read_text())
    templates = tmp_path / "b-templates.yaml"
    templates.write_text((DRANET / "distributed-training-resource-claim-template.yaml").read_text())
    return job_file, templates


def test_check_counts_from_the_claim_templates_given_with_the_job(dranet_files):
    """`trainadmit check` reads the templates from the input (a later file, or later on standard input) and
    decides the MPIJob with them, as the cluster will once both are applied; without them it says what it
    could not count, and the MPIJob is not taken for a CPU job."""
    job_file, templates = dranet_files
    with_templates = run_cli("check", str(job_file), str(templates), "-n", "team-nlp")
    assert with_templates.returncode == 1
    assert "[topology.whole-node] spec.mpiReplicaSpecs.Worker.template.spec.resourceClaims[0]" in with_templates.stdout
    stdin = run_cli("check", "-", "-n", "team-nlp",
                    stdin=job_file.read_text() + "\n---\n" + templates.read_text())
    assert stdin.returncode == 1 and "[topology.whole-node]" in stdin.stdout
    lines = stdin.stdout.splitlines()
    assert lines[0].startswith("<stdin>#2: ResourceClaimTemplate") and "MPIJob" in \
        next(x for x in lines if "DENIED" in x)  # the MPIJob, decided once its template had come
    alone = run_cli("check", str(job_file), "-n", "team-nlp")
    assert alone.returncode == 0
    assert "not matched (GPUs not counted: ResourceClaimTemplate team-nlp/h100-4gpu-4nic-numa-aligned" in alone.stdout


def test_check_counts_a_trainjob_from_its_runtime_given_with_it(tmp_path):
    """Trainer's 04-volcano-integration file holds a ClusterTrainingRuntime and a TrainJob of it; with 8 GPUs in
    the runtime's node container the TrainJob's 4 nodes are counted (32 GPUs, over team-vision's... policy:
    teams quota 32 GPUs and 8 workers per job allows it) and the runtime itself is checked as a template."""
    objs = load_yaml(TRAINER / "04-volcano-integration.yaml")
    runtime = with_gpus(objs[0], 8)
    trainjob_ = copy.deepcopy(objs[1])
    trainjob_["spec"]["trainer"].pop("resourcesPerNode")
    trainjob_["spec"]["trainer"]["numNodes"] = 5  # 40 GPUs: over the teams quota's 32
    import yaml

    src = tmp_path / "volcano.yaml"
    src.write_text(yaml.safe_dump_all([trainjob_, runtime]))
    r = run_cli("check", str(src), "-n", "team-vision", "-o", "json")
    import json

    records = json.loads(r.stdout)
    assert [x["object"].split()[0] for x in records] == ["TrainJob", "ClusterTrainingRuntime"]
    assert "quota.gpus-per-job" in {v["rule"] for v in records[0]["violations"]}
    assert records[1]["allowed"] and records[1]["matched"]


# ---- the cluster view: what it keeps, and the server's remembered decisions -------------------------

def test_the_live_view_lists_claims_classes_and_runtimes_and_keeps_no_per_pod_claim(policy):
    """The live view's paginated lists of the DRA kinds and Trainer's runtimes, as the apiserver answers them:
    a template and a user's ResourceClaim are kept (what the engine reads of them), the claims the apiserver made
    for each Pod from a template (owned by their Pod: DRANET's stored claim) are not; the engine counts from it."""
    from support.fake_apiserver_lists import ListWatchServer

    from trainadmit.cluster.live import LiveCluster
    from trainadmit.engine.clusterview import CLUSTER_TRAINING_RUNTIME, RESOURCE_CLAIM, Presence

    templates = in_namespace(docs(DRANET / "distributed-training-resource-claim-template.yaml"), "team-nlp")
    per_pod = one(DRANET / "aws-gpu-efa-resource-claim.yaml", "ResourceClaim")
    shared = one(NVIDIA / "gpu-test3.yaml", "ResourceClaim")
    server = ListWatchServer({"resourceclaimtemplates": templates, "resourceclaims": [per_pod, shared],
                              "deviceclasses": docs(DRANET / "distributed-training-device-class.yaml"),
                              "clustertrainingruntimes": docs(TRAINER / "runtime-torchtune-llama3_2_1B.yaml")},
                             {}, "100")
    try:
        view = LiveCluster(server.core(), page_size=1, log=lambda m: None)
        for kind in ("resourceclaimtemplates", "resourceclaims", "deviceclasses", "clustertrainingruntimes"):
            view.list_all(kind)
        assert view.reference(RESOURCE_CLAIM, "nccl-test-dra-worker-0-gpu-efa-example", "default")[0] \
            is Presence.missing  # made for one Pod: not kept
        assert view.reference(RESOURCE_CLAIM, "single-gpu", "gpu-test3")[0] is Presence.present
        presence, runtime = view.reference(CLUSTER_TRAINING_RUNTIME, "torchtune-llama3.2-1b")
        assert presence is Presence.present and runtime["spec"]["mlPolicy"]["numNodes"] == 1
        mpijob = one(DRANET / "distributed-training-mpi-job-4gpu-4nic-numa-aligned.yaml", "MPIJob")
        d = decided(policy, mpijob, view, "team-nlp")
        assert d.summary["gpusPerPod"] == 4 and "topology.whole-node" in rules_of(d)
    finally:
        server.close()


def test_a_remembered_decision_is_not_reused_once_the_claim_template_changed(policy):
    """The server's decision cache keys a decision by the object and replays what it asked the view: a Job of
    the same shape after its template went from 8 GPUs to 4 is decided anew (whole nodes broken), as decide
    answers."""
    from trainadmit.cluster.index import ClusterIndex
    from trainadmit.engine.clusterview import RESOURCE_CLAIM_TEMPLATE
    from trainadmit.server.decisions import DecisionCache

    class Claims(ClusterIndex):  # a view of the claims alone (no nodes, no quotas)
        def knows_nodes(self) -> bool:
            return False

        def knows_quotas(self) -> bool:
            return False

    view = Claims()
    view.replace_refs(RESOURCE_CLAIM_TEMPLATE, [eight_gpus()])
    cache = DecisionCache(policy)
    first = cache.decide(Request(dra_job("eight-gpus", name="run-1")), view)
    assert first.allowed and cache.misses == 1, messages(first)
    assert cache.decide(Request(dra_job("eight-gpus", name="run-2")), view).allowed and cache.hits == 1
    four = eight_gpus()
    four["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 4
    view.replace_refs(RESOURCE_CLAIM_TEMPLATE, [four])
    later = cache.decide(Request(dra_job("eight-gpus", name="run-3")), view)
    fresh = decide(policy, Request(dra_job("eight-gpus", name="run-3")), view)
    assert "topology.whole-node" in rules_of(later) and rules_of(later) == rules_of(fresh)
