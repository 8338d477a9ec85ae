"""The operator corpus (tests/fixtures/operators/, real-world/) and its builders, shared by the workload, engine,
cluster and integration tests: the CRD of each served kind, the examples with the Pods and gang size their
operator would create (hand-computed from each operator's documented behaviour, fixtures/operators/README.md),
and each example made into a GPU job."""

from __future__ import annotations

from pathlib import Path

from support.builders import with_gpus
from support.manifests import load_yaml
from support.paths import FIXTURES

OPS = FIXTURES / "operators"
CRDS = {
    ("kubeflow.org/v1", "PyTorchJob"): ("kubeflow-training-operator-v1/crds/kubeflow.org_pytorchjobs.yaml", "v1"),
    ("kubeflow.org/v1", "MPIJob"): ("kubeflow-training-operator-v1/crds/kubeflow.org_mpijobs.yaml", "v1"),
    ("kubeflow.org/v1", "TFJob"): ("kubeflow-training-operator-v1/crds/kubeflow.org_tfjobs.yaml", "v1"),
    ("kubeflow.org/v1", "PaddleJob"): ("kubeflow-training-operator-v1/crds/kubeflow.org_paddlejobs.yaml", "v1"),
    ("kubeflow.org/v2beta1", "MPIJob"): ("kubeflow-mpi-operator/crds/kubeflow.org_mpijobs.yaml", "v2beta1"),
    ("ray.io/v1", "RayCluster"): ("kuberay/crds/ray.io_rayclusters.yaml", "v1"),
    ("ray.io/v1", "RayJob"): ("kuberay/crds/ray.io_rayjobs.yaml", "v1"),
    ("batch.volcano.sh/v1alpha1", "Job"): ("volcano/crds/batch.volcano.sh_jobs.yaml", "v1alpha1"),
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): ("jobset/crds/jobset.x-k8s.io_jobsets.yaml", "v1alpha2"),
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): ("lws/crds/leaderworkerset.x-k8s.io_leaderworkersets.yaml",
                                                          "v1"),
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): ("kubeflow-trainer-v2/crds/trainer.kubeflow.org_trainjobs.yaml",
                                                    "v1alpha1"),
}

# (file under tests/fixtures, document index, Pods at once, Pods in one gang): from the operators'
# documented behaviour (defaults, replica formulas, the operator's own minMember rule)
EXPECTED = [
    ("operators/jobset/examples/exclusive-placement.yaml", 0, 9, 9),
    ("operators/jobset/examples/jobset-with-network.yaml", 0, 3, 3),
    ("operators/jobset/examples/pytorch-cnn-mnist.yaml", 0, 4, 4),
    ("operators/jobset/examples/tpu-multislice-v6e-jax-workload.yaml", 0, 8, 8),
    ("operators/kubeflow-mpi-operator/examples/horovod-tensorflow-mnist.yaml", 0, 3, 3),
    ("operators/kubeflow-mpi-operator/examples/pi.yaml", 0, 3, 3),
    ("operators/kubeflow-mpi-operator/examples/tensorflow-benchmarks.yaml", 0, 3, 3),
    # TrainJob: spec.trainer.numNodes Pods of the runtime's trainer job (its initializers are not counted here)
    ("operators/kubeflow-trainer-v2/examples/01-multi-node.yaml", 0, 3, 3),
    ("operators/kubeflow-trainer-v2/examples/02-runtime-patches.yaml", 0, 2, 2),
    ("operators/kubeflow-trainer-v2/examples/03-kueue-integration.yaml", 0, 3, 3),
    ("operators/kubeflow-trainer-v2/examples/04-volcano-integration.yaml", 1, 4, 4),
    ("operators/kubeflow-training-operator-v1/examples/mpijob_v1_tensorflow-mnist.yaml", 0, 3, 3),
    ("operators/kubeflow-training-operator-v1/examples/pytorch_deepspeed_demo.yaml", 0, 2, 2),
    # elastic (minReplicas 1): the operator would gang all 2 current replicas and pin the job to its size;
    # trainadmit gangs the minimum, so the job can start (and shrink) with fewer workers
    ("operators/kubeflow-training-operator-v1/examples/pytorch_elastic_imagenet.yaml", 0, 2, 1),
    ("operators/kubeflow-training-operator-v1/examples/pytorch_job_mnist_nccl.yaml", 0, 2, 2),
    # TFJob and PaddleJob: one Pod per replica of each type, replicas defaulting to 1, all in the gang
    ("operators/kubeflow-training-operator-v1/examples/tfjob_simple.yaml", 0, 2, 2),
    ("operators/kubeflow-training-operator-v1/examples/tfjob_multi_worker_strategy.yaml", 0, 2, 2),
    ("operators/kubeflow-training-operator-v1/examples/tfjob_mnist_with_summaries.yaml", 0, 1, 1),
    ("operators/kubeflow-training-operator-v1/examples/paddlejob_simple-cpu.yaml", 0, 2, 2),
    ("operators/kueue/examples/sample-tfjob.yaml", 0, 3, 3),  # PS 1 + Worker 2
    ("operators/kueue/examples/sample-paddlejob.yaml", 0, 2, 2),
    ("operators/kuberay/examples/ray-cluster.scheduler-plugins.yaml", 0, 3, 3),
    ("operators/kuberay/examples/ray-cluster.volcano-scheduler-queue.yaml", 1, 3, 3),
    ("operators/kuberay/examples/ray-job.pytorch-image-classifier.yaml", 0, 6, 5),  # the submitter is outside
    ("operators/kuberay/examples/ray-job.volcano-scheduler-queue.yaml", 1, 4, 3),
    ("operators/kueue/examples/sample-jobset-tas-combined.yaml", 0, 8, 8),
    ("operators/kueue/examples/sample-pytorchjob.yaml", 0, 2, 2),
    ("operators/lws/examples/lws-exclusive-placement.yaml", 0, 12, 4),  # one gang per group
    ("operators/lws/examples/lws-multi-template.yaml", 0, 12, 4),
    ("operators/lws/examples/lws-sample-volcano.yaml", 0, 8, 4),
    ("operators/lws/examples/vllm-gpu-lws.yaml", 0, 4, 2),
    ("operators/volcano/examples/mindspore-gpu.yaml", 0, 3, 3),
    ("operators/volcano/examples/mpi-example.yaml", 0, 3, 3),
    ("operators/volcano/examples/pytorch-plugin-job.from-docs.yaml", 0, 3, 1),  # its own minAvailable: 1
    ("real-world/aks-rdma-ib-mpi-job.yaml", 0, 3, 3),
    ("real-world/awsome-nccl-tests.yaml", 0, 3, 3),
    ("real-world/gke-ctk-a3ultra-nccl-jobset-example.yaml", 0, 4, 4),
    ("real-world/jobset-exclusive-placement.yaml", 0, 9, 9),
    ("real-world/jobset-host-maintenance-event-model.yaml", 0, 4, 4),
    ("real-world/jobset-jobset-with-network.yaml", 0, 3, 3),
    ("real-world/jobset-resnet.yaml", 0, 4, 4),
    ("real-world/kftrainingop-imagenet.yaml", 0, 2, 1),  # elastic, as above
    ("real-world/kftrainingop-pytorch_job_mnist_nccl.yaml", 0, 2, 2),
    ("real-world/kueue-ray-cluster-sample.yaml", 0, 2, 2),
    ("real-world/volcano-mpi-example.yaml", 0, 3, 3),
]


def document(file: str, index: int) -> dict:
    return load_yaml(FIXTURES / file)[index]


def gpu_job(obj: dict, gpus: int = 8) -> dict:
    """The example as a named GPU training job in team-nlp: every regular container asks for ``gpus`` GPUs."""
    obj = with_gpus(obj, gpus)
    meta = obj.setdefault("metadata", {})
    meta.setdefault("name", "example")
    meta.pop("generateName", None)
    meta["namespace"] = "team-nlp"
    return obj


def _custom_resources() -> list[tuple[str, dict]]:
    out = []
    for file, index, _, _ in EXPECTED:
        obj = document(file, index)
        if (obj["apiVersion"], obj["kind"]) in CRDS:
            out.append((f"{Path(file).name}#{index}", obj))
    return out


CUSTOM_RESOURCES = _custom_resources()


def pytorchjob(workers: int, gpus: int, namespace: str = "team-nlp") -> dict:
    """Kubeflow's NCCL MNIST PyTorchJob with ``workers`` Workers of ``gpus`` GPUs each, in ``namespace``."""
    base = document("operators/kubeflow-training-operator-v1/examples/pytorch_job_mnist_nccl.yaml", 0)
    job = gpu_job(base, gpus)
    job["metadata"]["namespace"] = namespace
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = workers
    return job
