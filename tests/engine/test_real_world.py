"""Every public manifest in tests/fixtures/real-world (sources in SOURCES.md), decided with the bundled policies
exactly as published, against a decision written down by hand; and for each admitted GPU workload, what it already
brought stays the only one of its kind: no template gets a second RDMA device (a NIC resource or DRA NIC claim of
its own plus the pool's), a second network (its Multus, GKE interfaces or host network plus the pool's Multus
network), or a second /dev/shm.

The decisions, by what the bundled policies say (h100-ib: 8 x H100 per node, InfiniBand, shared RDMA device,
rack topology; l40s-eth; namespace default's quota ``teams``: 32 GPUs and 8 Pods per job; the native gang):
- GPU Pods of fewer GPUs than a node, several to a job: ``topology.whole-node``;
- a fabric no bundled pool has (AWS EFA, GKE TCPXO or GPUDirect-RDMA, RDMA over the host's network):
  ``intent.no-pool``;
- a kind the native gang cannot hold (an MPIJob v2beta1, a LeaderWorkerSet): admitted with ``gang.unsupported``;
- its own gang mechanism (KAI, sakkara, Kueue): no gang of trainadmit's, no colocation, no gang-shape rules;
- no GPU asked for, or not a workload kind: untouched.

The DRA claims the manifests make are told apart by the ResourceClaimTemplates the same set publishes, as a
cluster holding those templates answers (``ClaimsPublished``).
"""

from __future__ import annotations

import copy

import pytest
from support.manifests import load_yaml
from support.paths import FIXTURES

from trainadmit.engine import Request, decide
from trainadmit.engine.clusterview import NoCluster, Presence
from trainadmit.engine.network import MULTUS_NETWORKS, NETWORK_ANNOTATIONS, claim_device_classes
from trainadmit.engine.workloads import workload_of

REAL = FIXTURES / "real-world"
U, A = "untouched", "admitted"


def denied(*rules: str) -> tuple[str, ...]:
    return ("denied", *sorted(rules))


EXPECTED: dict[str, object] = {
    "aks-rdma-ib-mpi-job.yaml#0": U,  # a kustomize base: its GPUs come from overlays
    "awsome-nccl-tests-gb200.yaml#0": U,  # ComputeDomain
    # 18 x 4 GPUs with EFA: no pool has EFA; 72 GPUs and 19 Pods are over team quota
    "awsome-nccl-tests-gb200.yaml#1": denied("intent.no-pool", "quota.gpus-per-job", "quota.workers-per-job"),
    "awsome-nccl-tests.yaml#0": denied("intent.no-pool"),  # EFA
    "azure-aks-rdma-ib-sriov-gpu-eight.yaml#0": A,  # 1 x 8 GPUs with its own SR-IOV rdma/ib: kept, nothing added
    # 8 Workers x 8 GPUs and a GPU-less Launcher, quota teams (32 GPUs, 8 workers per job): 64 GPUs are too many,
    # the 8 workers are not (the Launcher is no worker)
    "coreweave-nccl-test-distributed-h100-64-mpijob.yaml#0": denied("quota.gpus-per-job"),
    "dranet-mpi-operator-dra-resources.yaml#0": U,
    "dranet-mpi-operator-dra-resources.yaml#1": U,
    "dranet-mpi-operator-nccl-test-job.yaml#0": denied("topology.whole-node"),  # 2 workers x 1 GPU
    "gke-cea-gpudirect-rdma-nccl-test-a4.yaml#0": U,
    "gke-cea-gpudirect-rdma-nccl-test-a4.yaml#1": U,
    "gke-cea-gpudirect-rdma-nccl-test-a4.yaml#2": denied("intent.no-pool"),  # GKE interfaces: GPUDirect-RDMA
    "gke-cea-gpudirect-rdma-nccl-test-a4.yaml#3": denied("intent.no-pool"),
    "gke-cea-gpudirect-rdma-nccl-test-managed-rdma.yaml#0": U,
    "gke-cea-gpudirect-rdma-nccl-test-managed-rdma.yaml#1": U,
    "gke-cea-gpudirect-rdma-nccl-test-managed-rdma.yaml#2": U,  # ResourceClaimTemplate
    "gke-cea-gpudirect-rdma-nccl-test-managed-rdma.yaml#3": denied("intent.no-pool"),  # mrdma.google.com claim
    "gke-cea-gpudirect-rdma-nccl-test-managed-rdma.yaml#4": denied("intent.no-pool"),
    "gke-cea-tcpxo-nccl-test-latest.yaml#0": U,
    "gke-cea-tcpxo-nccl-test-latest.yaml#1": U,
    "gke-cea-tcpxo-nccl-test-latest.yaml#2": denied("intent.no-pool"),  # TCPXO
    "gke-cea-tcpxo-nccl-test-latest.yaml#3": denied("intent.no-pool"),
    "gke-ctk-a3ultra-nccl-jobset-example.yaml#0": denied("intent.no-pool"),  # GPUDirect-RDMA interfaces
    "jobset-exclusive-placement.yaml#0": U,
    "jobset-host-maintenance-event-model.yaml#0": U,
    "jobset-jobset-with-network.yaml#0": U,
    "jobset-resnet.yaml#0": U,
    "k8s-website-indexed-job-vol.yaml#0": U,
    "k8s-website-indexed-job.yaml#0": U,
    "kai-batch-job-min-member.yaml#0": denied("topology.whole-node"),  # KAI's gang; 6 x 1 GPU
    "kai-default-queues.yaml#0": U,
    "kai-default-queues.yaml#1": U,
    "kai-external-podgroup-job.yaml#0": U,  # PodGroup
    "kai-external-podgroup-job.yaml#1": denied("topology.whole-node"),  # 2 x 1 GPU in KAI's PodGroup
    "kai-gpu-memory-pod.yaml#0": U,  # a GPU share by annotation, no GPU resource
    "kai-multi-topology-jobs.yaml#0": U,
    "kai-multi-topology-jobs.yaml#1": U,
    "kai-multi-topology-jobs.yaml#2": U,
    "kai-multi-topology-jobs.yaml#3": denied("topology.whole-node"),  # 3 x 4 GPUs
    "kai-multi-topology-jobs.yaml#4": denied("topology.whole-node"),
    "kai-pytorchjob-segments-zoned.from-docs.yaml#0": U,  # the docs' snippet asks for no GPU
    "kai-topology-aliases.yaml#0": U,
    "kai-topology-aliases.yaml#1": U,
    "kai-topology-aliases.yaml#2": denied("topology.whole-node"),  # 3 x 1 GPU
    "kai-train-priority-pod.yaml#0": A,  # one Pod, one GPU: a single Pod may share a node
    "kftrainer-01-podspec-overrides.yaml#0": U,
    "kftrainer-02-multi-node.yaml#0": U,
    "kftrainer-03-volcano-integration.yaml#0": U,
    "kftrainingop-imagenet.yaml#0": U,
    "kftrainingop-pytorch_deepspeed_demo.yaml#0": denied("topology.whole-node"),  # Master + Worker x 1 GPU
    "kftrainingop-pytorch_job_mnist_nccl.yaml#0": denied("topology.whole-node"),
    "kuberay-ray-cluster.kai-scheduler.yaml#0": U,
    "kuberay-ray-cluster.kai-scheduler.yaml#1": U,
    "kuberay-ray-cluster.kai-scheduler.yaml#2": U,  # no GPU
    # generateName (the decision names it; the native PodGroup is named after it); 4 workers x 1 GPU
    "kuberay-ray-job.pytorch-image-classifier.yaml#0": denied("topology.whole-node"),
    "kueue-kueue-pod-group.yaml#0": U,
    "kueue-kueue-pod-group.yaml#1": U,
    "kueue-ray-cluster-sample.yaml#0": U,
    "kueue-sample-job.yaml#0": U,
    "kueue-sample-jobset-tas-required.yaml#0": U,
    "kueue-tas-sample-gpu-queues.yaml#0": U,
    "kueue-tas-sample-gpu-queues.yaml#1": U,
    "kueue-tas-sample-gpu-queues.yaml#2": U,
    "kueue-tas-sample-gpu-queues.yaml#3": U,
    "lws-sglang-lws.yaml#0": denied("topology.whole-node"),  # 2 groups of 2 x 1 GPU
    "lws-sglang-lws.yaml#1": U,
    "lws-vllm-gpu-lws.yaml#0": A,  # 2 groups of 2 x 8 GPUs; the native gang cannot hold LWS groups (warning)
    "lws-vllm-gpu-lws.yaml#1": U,
    "mpiop-tensorflow-benchmarks.yaml#0": denied("topology.whole-node"),  # 2 workers x 1 GPU
    "netop-hostdevice-network-pod1.yml#0": U,  # NICs without GPUs
    "netop-ib-sriov-network-pod1.yaml#0": U,
    "netop-ipoib-rdma-test-pod1.yml#0": U,
    "netop-rdma-gpu-test-pod1.yml#0": A,  # 1 GPU with its own Multus network: kept
    "netop-sriov-network-pod1.yaml#0": U,
    "nvdra-extended-resources-mig-1g-12gb.yaml#0": U,  # Namespace
    "nvdra-extended-resources-mig-1g-12gb.yaml#1": U,  # DeviceClass
    "nvdra-extended-resources-mig-1g-12gb.yaml#2": denied("intent.no-pool"),  # a MIG slice: no pool has MIG
    "nvdra-imex-nvbandwidth-test-job-1.yaml#0": U,  # ComputeDomain
    "nvdra-imex-nvbandwidth-test-job-1.yaml#1": denied("topology.whole-node"),  # 2 workers x 2 GPUs
    "oci-dranet-mpijob-BM.GPU4.8.yaml#0": U,  # ResourceClaimTemplate (dra.net NICs)
    "oci-dranet-mpijob-BM.GPU4.8.yaml#1": A,  # 2 x 8 GPUs with 16 DRANET NICs of its own: kept
    "oci-host-network-mpijob-BM.GPU.H100.8.yaml#0": denied("intent.no-pool"),  # RDMA over the host's network
    "oci-virtual-functions-mpijob-BM.GPU.H100.8.yaml#0": A,  # its own VFs and Multus networks: kept
    "oci-volcano-BM.GPU.H100.8-nccl-test.yaml#0": denied("intent.no-pool"),  # host network
    "schedplugins-co-sched.yaml#0": U,
    "schedplugins-co-sched.yaml#1": U,
    "schedplugins-sakkara-job-a.yaml#0": denied("topology.whole-node"),  # sakkara's gang; 8 x 1 GPU
    "volcano-mindspore-gpu.yaml#0": denied("topology.whole-node"),  # Volcano's gang; 2 workers x 1 GPU
    "volcano-mpi-example.yaml#0": U,
}


def _documents() -> list[tuple[str, dict]]:
    out = []
    for path in sorted(REAL.iterdir()):
        if path.suffix in (".yaml", ".yml"):
            out.extend((f"{path.name}#{i}", doc) for i, doc in enumerate(load_yaml(path)))
    return out


DOCUMENTS = _documents()


class ClaimsPublished(NoCluster):
    """A cluster holding the ResourceClaimTemplates and ResourceClaims this set publishes; of other claims (a
    ComputeDomain's, made by its controller) it knows nothing."""

    def __init__(self, documents):
        self.claims = {(doc.get("kind"), doc["metadata"]["name"]): doc for _, doc in documents
                       if doc.get("kind") in ("ResourceClaimTemplate", "ResourceClaim")}

    def reference(self, kind, name, namespace=None):
        if kind.kind not in ("ResourceClaimTemplate", "ResourceClaim"):
            return super().reference(kind, name, namespace)
        found = self.claims.get((kind.kind, name))
        return (Presence.present, found) if found is not None else (Presence.unknown, None)


CLUSTER = ClaimsPublished(DOCUMENTS)


def test_the_set_is_large_and_varied():
    """At least 80 documents of every kind trainadmit handles, from at least 10 public repositories."""
    assert len(DOCUMENTS) >= 80
    kinds = {(d.get("apiVersion"), d.get("kind")) for _, d in DOCUMENTS}
    assert {("batch/v1", "Job"), ("v1", "Pod"), ("kubeflow.org/v1", "PyTorchJob"), ("kubeflow.org/v2beta1", "MPIJob"),
            ("ray.io/v1", "RayCluster"), ("ray.io/v1", "RayJob"), ("batch.volcano.sh/v1alpha1", "Job"),
            ("jobset.x-k8s.io/v1alpha2", "JobSet"), ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"),
            ("trainer.kubeflow.org/v1alpha1", "TrainJob")} <= kinds
    sources = (FIXTURES / "SOURCES.md").read_text()
    rows = [line.split("|") for line in sources.splitlines() if line.startswith("| real-world/")]
    assert {row[1].strip().removeprefix("real-world/") for row in rows} >= {p.name for p in REAL.iterdir()}
    assert len({row[2].strip() for row in rows}) >= 10  # source repositories
    assert set(EXPECTED) == {label for label, _ in DOCUMENTS}


def _outcome(d) -> object:
    if not d.matched:
        return U
    return A if d.allowed else denied(*{v.rule for v in d.denials})


@pytest.mark.parametrize(("label", "doc"), DOCUMENTS, ids=[label for label, _ in DOCUMENTS])
def test_each_public_manifest_gets_the_decision_written_down_for_it(policy, label, doc):
    d = decide(policy, Request(copy.deepcopy(doc)), CLUSTER)
    assert _outcome(d) == EXPECTED[label], [v.text() for v in d.violations]
    if d.matched and d.allowed and d.summary.get("gpuResource"):
        _nothing_doubled(policy, doc, d.mutated)


def _nic_sources(policy, container: dict, nic_claims: set[str]) -> set[str]:
    resources = container.get("resources") or {}
    names = {n for section in ("limits", "requests") for n in resources.get(section) or {} if policy.is_nic_resource(n)}
    claims = {f"claim:{c.get('name')}" for c in resources.get("claims") or [] if c.get("name") in nic_claims}
    return names | claims


def _nothing_doubled(policy, original: dict, mutated: dict) -> None:
    before, after = workload_of(original), workload_of(mutated)
    for old, new in zip(before.templates, after.templates, strict=True):
        nic_claims = {c["name"] for c in new.pod_spec.get("resourceClaims") or []
                      if any(policy.is_nic_class(k) for k in claim_device_classes(CLUSTER, "default", c) or ())}
        for ref in new.main_containers:
            sources = _nic_sources(policy, ref.body, nic_claims)
            if not sources and nic_claims:
                sources = {f"claim:{c}" for c in nic_claims}  # a Pod-level NIC claim no container names
            assert len(sources) <= 1, f"{new.label}: container {ref.name} has two RDMA devices: {sources}"
            shm = [m for m in ref.body.get("volumeMounts") or [] if m.get("mountPath") == "/dev/shm"]
            assert len(shm) <= 1, f"{new.label}: container {ref.name} mounts /dev/shm {len(shm)} times"
        old_ann, new_ann = old.pod_meta.get("annotations") or {}, new.pod_meta.get("annotations") or {}
        networks = [k for k in NETWORK_ANNOTATIONS if k in new_ann and k != "networking.gke.io/default-interface"]
        if new.pod_spec.get("hostNetwork") is True:
            networks.append("hostNetwork")
        assert len(networks) <= 1, f"{new.label}: two networks: {networks}"
        if MULTUS_NETWORKS in old_ann:
            assert new_ann[MULTUS_NETWORKS] == old_ann[MULTUS_NETWORKS], f"{new.label}: its Multus networks replaced"
