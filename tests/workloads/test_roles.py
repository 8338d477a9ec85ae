"""Workers are the Pods that request GPUs; a launcher, head or submitter is counted as what it is.

Public manifests with the roles their projects give them: the MPI operator's tensorflow-benchmarks MPIJob (a
CPU launcher and GPU workers), the training operator's MNIST PyTorchJob with a CPU master, KubeRay's
PyTorch image-classifier RayJob with a GPU head and KubeRay's default submitter Pod. The expected summaries
and quota decisions are written down from the Pods each operator creates (fixtures/operators/README.md).
"""

from __future__ import annotations

import copy

from support.builders import rules_of, with_gpus
from support.manifests import load_yaml
from support.paths import FIXTURES
from support.policies import write_policy

from trainadmit.cli.render import pods_text
from trainadmit.engine import Request, decide, load_policy

QUOTA = {"apiVersion": "trainadmit.io/v1alpha1", "kind": "Quota", "metadata": {"name": "eight"},
         "spec": {"namespaces": ["research"], "maxWorkersPerJob": 8}}


def _mpijob(workers: int) -> dict:
    obj = copy.deepcopy(load_yaml(FIXTURES / "operators/kubeflow-mpi-operator/examples/tensorflow-benchmarks.yaml")[0])
    worker = obj["spec"]["mpiReplicaSpecs"]["Worker"]
    worker["replicas"] = workers
    worker["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 8}}
    obj["metadata"]["namespace"] = "research"
    return obj


def test_an_mpijob_of_8_gpu_workers_and_a_cpu_launcher_runs_8_workers(tmp_path):
    """Its launcher requests no GPU: 8 workers under a limit of 8 are admitted (before: "runs 9 workers"), 9
    are refused as 9 workers."""
    policy = load_policy(write_policy(tmp_path, extra=[QUOTA]))
    d = decide(policy, Request(_mpijob(8)))
    assert "quota.workers-per-job" not in rules_of(d), d.violations
    assert d.summary["workers"] == 8 and d.summary["pods"] == 9
    assert pods_text(d.summary) == "8 × 8 nvidia.com/gpu + 1 CPU launcher"
    over = decide(policy, Request(_mpijob(9)))
    [v] = [v for v in over.violations if v.rule == "quota.workers-per-job"]
    assert v.message == "runs 9 workers; quota eight allows 8 per job"


def test_a_cpu_master_and_a_submitter_are_shown_as_what_they_are(policy):
    pytorch = with_gpus(load_yaml(FIXTURES / "operators/kubeflow-training-operator-v1/examples/"
                                  "pytorch_job_mnist_nccl.yaml")[0])
    pytorch["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 2
    master = pytorch["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    master["resources"] = {"limits": {"cpu": "4"}}
    d = decide(policy, Request(pytorch, namespace="research"))
    assert pods_text(d.summary) == "2 × 8 nvidia.com/gpu + 1 CPU master"  # before: "3 x 8"

    rayjob = copy.deepcopy(load_yaml(FIXTURES / "operators/kuberay/examples/ray-job.pytorch-image-classifier.yaml")[0])
    cluster = rayjob["spec"]["rayClusterSpec"]
    cluster["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 4}}
    cluster["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "2"}}
    rayjob.setdefault("metadata", {})["name"] = "classifier"
    d = decide(policy, Request(rayjob, namespace="research"))
    text = pods_text(d.summary)
    assert text.startswith("1 × 4 nvidia.com/gpu + ") and "1 CPU submitter" in text, text  # before: "6 x 4"
    assert d.summary["workers"] == 1
