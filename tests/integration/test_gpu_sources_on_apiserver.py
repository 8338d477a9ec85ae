"""GPUs asked for through DRA and through a TrainJob's runtime, on a real kube-apiserver (1.36 serves
resource.k8s.io/v1) with the server's live view and deploy/'s webhook configurations.

A Job whose Pods take 8 GPUs each from a ResourceClaimTemplate (created first, as ``kubectl apply`` of one
file would) is refused over the namespace's ResourceQuota on the DeviceClass's devices, naming that quota;
one within it is stored exactly as ``check --cluster`` on a snapshot predicts, and a Pod of it is accepted.
A ClusterTrainingRuntime asking for 8 GPUs per node is stored (it passes the rules that do not depend on a
job's size; one that splits nodes is refused), and a TrainJob of it whose numNodes is over the namespace's
quota is refused.
"""

from __future__ import annotations

import copy

import pytest
from support.builders import with_gpus
from support.controlplane import KubeError, job_pod, wait_until
from support.gpu_sources import dra_job, eight_gpus, trainjob
from support.kube_compare import check_records, save_snapshot, submit
from support.kube_fixtures import APISERVER, RENDER_NS
from support.manifests import load_yaml
from support.paths import FIXTURES

pytestmark = APISERVER
NAMESPACE = "dra-team"  # no policy Quota: the namespace's ResourceQuota is what limits it
DEVICES = "gpu.nvidia.com.deviceclass.resource.k8s.io/devices"
TRAINER = FIXTURES / "operators" / "kubeflow-trainer-v2" / "examples"


def gpu_device_class() -> dict:
    """NVIDIA's DRA driver's GPU class as its Helm chart renders it for resource.k8s.io/v1 (the chart's template
    is not YAML; its selector and extendedResourceName: tests/fixtures/dra/README.md)."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"},
            "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com' && "
                                                          "device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]}}


def _refusal(http, obj) -> str:
    try:
        created = http.create(obj)
    except KubeError as exc:
        assert exc.status == 403, exc.message
        return exc.message
    http.delete(created, propagation="Background")
    return ""


@pytest.fixture(scope="module")
def dra(cluster):
    """The namespace, its quota of 16 GPU devices, NVIDIA's DeviceClass and a template of 8 GPUs per claim."""
    http, cp = cluster.http, cluster.cp
    cp.ensure_namespace(NAMESPACE)
    objs = [gpu_device_class(), eight_gpus(NAMESPACE),
            {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpus", "namespace": NAMESPACE},
             "spec": {"hard": {DEVICES: "16"}}}]
    created = [http.create(o) for o in objs]
    yield cluster
    for obj in reversed(created):
        http.delete(obj)


def test_a_dra_job_over_the_device_quota_is_refused_and_one_within_it_is_stored_as_check_predicts(
        webhook, dra, tmp_path):
    http = dra.http
    policy = webhook.use("coscheduling")
    # the live view sees the template (and the quota) once its watch delivers them: until then the claim's
    # template is unknown to it, and the Job is refused for that
    message = wait_until(lambda: (m := _refusal(http, dra_job("eight-gpus", workers=4, namespace=NAMESPACE,
                                                              name="over")))
                         and "quota.namespace-hard" in m and m, timeout=30, what="the quota refusal")
    assert f"needs 32 gpu.nvidia.com devices, and namespace {NAMESPACE} may hold at most 16" in message
    assert f"ResourceQuota on {DEVICES}" in message
    within = dra_job("eight-gpus", workers=2, namespace=NAMESPACE, name="within")
    snapshot = save_snapshot(http, tmp_path / "snapshot")
    [record] = check_records([copy.deepcopy(within)], webhook.policy_dir, snapshot, tmp_path)
    assert record["allowed"] and record["summary"]["gpusPerPod"] == 8, record
    out = submit(http, within, record, RENDER_NS)
    try:
        assert out.problems == [] and out.stored is not None
        pod = http.create(job_pod(out.stored, 0))  # the Job controller's Pod: its claim, accepted
        assert pod["spec"]["resourceClaims"] == within["spec"]["template"]["spec"]["resourceClaims"]
        http.delete(pod)
    finally:
        if out.stored is not None:
            http.delete(out.stored, propagation="Background")
    assert policy.generation


def test_a_runtime_is_checked_and_a_trainjob_of_it_over_quota_is_refused(webhook, cluster):
    http = cluster.http
    webhook.use("coscheduling")
    runtime = with_gpus(load_yaml(TRAINER / "runtime-torch_distributed.yaml")[0], 8)
    runtime["metadata"]["name"] = "torch-distributed-gpu"
    split = copy.deepcopy(runtime)
    split["metadata"]["name"] = "torch-distributed-split"
    split["spec"]["mlPolicy"]["numNodes"] = 2
    node = split["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    node["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 6
    assert "[topology.whole-node]" in _refusal(http, split)  # 2 nodes of 6 GPUs on 8-GPU nodes
    stored = http.create(runtime)
    try:
        # team-nlp may run 128 GPUs and 16 workers per job: 32 nodes of the runtime's 8 GPUs are neither
        message = wait_until(lambda: (m := _refusal(http, trainjob("torch-distributed-gpu", 32, name="big")))
                             and "quota.gpus-per-job" in m and m, timeout=30, what="the TrainJob's quota refusal")
        assert "requests 256 GPUs (32 × 8)" in message and "[quota.workers-per-job]" in message
        small = http.create(trainjob("torch-distributed-gpu", 2, name="small"))
        try:  # the runtime's GPUs were kept beside trainadmit's RDMA device, where Trainer reads them
            assert small["spec"]["trainer"]["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == 8
        finally:
            http.delete(small)
    finally:
        http.delete(stored)
