"""A count trainadmit reads that is not a non-negative whole number is `object.malformed`, naming the field.

Templated manifests are common: `parallelism: ${NUM_NODES}` in a shell heredoc, `replicas: __NUM_NODES__`
for sed, `$NUM_NODES` for envsubst. Rendered without the substitution, such a manifest reaches `check` with a
string where the count goes; before, every rule then ran on the kind's default count (a JobSet of
``__NUM_NODES__`` Pods was admitted as 1 Pod). Each case is a public manifest with one count replaced the way
a template leaves it (the field named here by hand, from the kind's documentation), decided as a CREATE and
as an UPDATE of the stored object. A negative count, which the apiserver itself refuses, is malformed too.
"""

from __future__ import annotations

import copy

import pytest
from support.builders import with_gpus
from support.manifests import load_yaml
from support.paths import FIXTURES

from trainadmit.engine import Request, decide

# kind, public example, a count field it has (as docs/workloads.md's resize table names them), its printed path
COUNTS = [
    ("Job", "real-world/k8s-website-indexed-job.yaml", ("spec", "parallelism"), "spec.parallelism"),
    ("Job", "real-world/k8s-website-indexed-job.yaml", ("spec", "completions"), "spec.completions"),
    ("JobSet", "operators/jobset/examples/pytorch-cnn-mnist.yaml",
     ("spec", "replicatedJobs", 0, "template", "spec", "parallelism"), "spec.replicatedJobs[0].template.spec.parallelism"),
    ("JobSet", "operators/jobset/examples/pytorch-cnn-mnist.yaml", ("spec", "replicatedJobs", 0, "replicas"),
     "spec.replicatedJobs[0].replicas"),
    ("PyTorchJob", "operators/kubeflow-training-operator-v1/examples/pytorch_job_mnist_nccl.yaml",
     ("spec", "pytorchReplicaSpecs", "Worker", "replicas"), "spec.pytorchReplicaSpecs.Worker.replicas"),
    ("PyTorchJob", "operators/kubeflow-training-operator-v1/examples/pytorch_elastic_imagenet.yaml",
     ("spec", "elasticPolicy", "minReplicas"), "spec.elasticPolicy.minReplicas"),
    ("TFJob", "operators/kubeflow-training-operator-v1/examples/tfjob_simple.yaml",
     ("spec", "tfReplicaSpecs", "Worker", "replicas"), "spec.tfReplicaSpecs.Worker.replicas"),
    ("PaddleJob", "operators/kubeflow-training-operator-v1/examples/paddlejob_simple-cpu.yaml",
     ("spec", "paddleReplicaSpecs", "Worker", "replicas"), "spec.paddleReplicaSpecs.Worker.replicas"),
    ("MPIJob", "operators/kubeflow-mpi-operator/examples/tensorflow-benchmarks.yaml",
     ("spec", "mpiReplicaSpecs", "Worker", "replicas"), "spec.mpiReplicaSpecs.Worker.replicas"),
    ("RayCluster", "real-world/kueue-ray-cluster-sample.yaml", ("spec", "workerGroupSpecs", 0, "replicas"),
     "spec.workerGroupSpecs[0].replicas"),
    ("RayCluster", "real-world/kueue-ray-cluster-sample.yaml", ("spec", "workerGroupSpecs", 0, "maxReplicas"),
     "spec.workerGroupSpecs[0].maxReplicas"),
    ("LeaderWorkerSet", "operators/lws/examples/vllm-gpu-lws.yaml", ("spec", "leaderWorkerTemplate", "size"),
     "spec.leaderWorkerTemplate.size"),
    ("LeaderWorkerSet", "operators/lws/examples/vllm-gpu-lws.yaml", ("spec", "replicas"), "spec.replicas"),
    ("TrainJob", "operators/kubeflow-trainer-v2/examples/01-multi-node.yaml", ("spec", "trainer", "numNodes"),
     "spec.trainer.numNodes"),
    ("Volcano Job", "operators/volcano/examples/mindspore-gpu.yaml", ("spec", "tasks", 1, "replicas"),
     "spec.tasks[1].replicas"),
    ("Volcano Job", "operators/volcano/examples/pytorch-plugin-job.from-docs.yaml", ("spec", "minAvailable"),
     "spec.minAvailable"),
    ("ClusterTrainingRuntime", "operators/kubeflow-trainer-v2/examples/runtime-torchtune-llama3_2_1B.yaml",
     ("spec", "mlPolicy", "numNodes"), "spec.mlPolicy.numNodes"),
    ("ClusterTrainingRuntime", "operators/kubeflow-trainer-v2/examples/runtime-torch_distributed_with_cache.yaml",
     ("spec", "template", "spec", "replicatedJobs", 0, "replicas"), "spec.template.spec.replicatedJobs[0].replicas"),
]
PLACEHOLDERS = ["__NUM_NODES__", "$NUM_NODES", "${NUM_NODES}", "4", -2, 2.5, True]


def _with(obj: dict, path: tuple, value) -> dict:
    out = copy.deepcopy(obj)
    cur = out
    for part in path[:-1]:
        cur = cur[part]
    cur[path[-1]] = value
    return out


@pytest.mark.parametrize(("kind", "file", "path", "shown"), COUNTS, ids=[f"{c[0]}:{c[3]}" for c in COUNTS])
def test_a_count_that_is_not_a_whole_number_is_malformed_on_create_and_update(policy, kind, file, path, shown):
    obj = with_gpus(load_yaml(FIXTURES / file)[0])
    obj["metadata"]["namespace"] = "research"
    obj["metadata"].setdefault("name", "templated")
    stored = decide(policy, Request(copy.deepcopy(obj))).mutated or obj
    for value in PLACEHOLDERS:
        for request in (Request(_with(obj, path, value)),
                        Request(_with(stored, path, value), operation="UPDATE", old=copy.deepcopy(stored),
                                phase="validate")):
            d = decide(policy, request)
            assert not d.allowed, (kind, value, request.operation)
            [v] = d.denials
            assert (v.rule, v.path) == ("object.malformed", shown), (kind, value, v.text())
            assert "non-negative whole number" in v.message
            assert (f'"{value}"' if isinstance(value, str) else str(value).lower()) in v.message


def test_every_count_and_quantity_left_unfilled_is_reported_in_one_run(policy):
    """awsome-distributed-training's nccl-tests MPIJob as its generator script writes it before envsubst runs: the
    workers' count, the slots per worker and each worker's GPUs and EFA devices (limits and requests) are
    placeholders. Every one of them is named at once (by hand, six fields), not one per CI run; an unfilled memory
    limit, a quantity too, with them."""
    obj = load_yaml(FIXTURES / "real-world" / "awsome-nccl-tests.yaml")[0]
    obj["spec"]["slotsPerWorker"] = "$GPU_PER_WORKER"
    worker = obj["spec"]["mpiReplicaSpecs"]["Worker"]
    worker["replicas"] = "$NUM_WORKERS"
    resources = worker["template"]["spec"]["containers"][0]["resources"]
    for section in ("limits", "requests"):
        resources[section].update({"nvidia.com/gpu": "$GPU_PER_WORKER", "vpc.amazonaws.com/efa": "${EFA_PER_WORKER}"})
    resources["limits"]["memory"] = "${MEMORY}"
    d = decide(policy, Request(obj, namespace="default"))
    at = "spec.mpiReplicaSpecs.Worker.template.spec.containers[0].resources"
    assert {(v.rule, v.path, v.message) for v in d.denials} == {
        ("object.malformed", "spec.mpiReplicaSpecs.Worker.replicas",
         'must be a non-negative whole number (a count), got "$NUM_WORKERS"'),
        ("object.malformed", "spec.slotsPerWorker", 'must be a non-negative whole number (a count), got "$GPU_PER_WORKER"'),
        ("object.malformed", f'{at}.limits["nvidia.com/gpu"]', 'must be a quantity, got "$GPU_PER_WORKER"'),
        ("object.malformed", f'{at}.requests["nvidia.com/gpu"]', 'must be a quantity, got "$GPU_PER_WORKER"'),
        ("object.malformed", f'{at}.limits["vpc.amazonaws.com/efa"]', 'must be a quantity, got "${EFA_PER_WORKER}"'),
        ("object.malformed", f'{at}.requests["vpc.amazonaws.com/efa"]', 'must be a quantity, got "${EFA_PER_WORKER}"'),
        ("object.malformed", f'{at}.limits["memory"]', 'must be a quantity, got "${MEMORY}"'),
    }


def test_a_trainjobs_gpus_left_unfilled_are_named_where_the_trainjob_has_them(policy):
    """Trainer's multi-node TrainJob with its node count and its GPUs per node left as placeholders: both are named,
    the GPUs at spec.trainer.resourcesPerNode (the TrainJob's own field, not the runtime patch trainadmit writes)."""
    obj = load_yaml(FIXTURES / "operators" / "kubeflow-trainer-v2" / "examples" / "01-multi-node.yaml")[0]
    obj["spec"]["trainer"]["numNodes"] = "${NUM_NODES}"
    obj["spec"]["trainer"]["resourcesPerNode"] = {"limits": {"nvidia.com/gpu": "${GPUS}"}}
    d = decide(policy, Request(obj, namespace="default"))
    assert {v.path for v in d.denials} == {"spec.trainer.numNodes", 'spec.trainer.resourcesPerNode.limits["nvidia.com/gpu"]'}
