"""The placement gate where a gang scheduler forms the gang but cannot choose its domain (issue 29, item 1).

Under ``topologyMethod: auto`` a cluster whose gang backend is scheduler-plugins coscheduling, Volcano, or KAI
without ``Platform.spec.gang.kaiTopology`` gets the placement gate on the gang's GPU templates: the gang backend's
own keys stay (it still forms the gang from the gated Pods), the ungater (``cluster.placement``) chooses the one
rack with room for the whole gang. Until now auto gave these backends required pod affinity and
``topology.colocation-risk``. Where the gate cannot wait for the gang (a gang of a minimum, an elastic job) they
keep pod affinity, and the decision says why. Public manifests (tests/fixtures/operators, tests/fixtures/real-world),
each asking for 8 GPUs per Pod and a rack; the expected decisions are written by hand. Why each scheduler tolerates
the gate: docs/scheduling.md ("The placement gate under a gang scheduler").
"""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from support.builders import rules_of, with_gpus
from support.manifests import deep, load_yaml
from support.paths import FIXTURES
from support.policies import BACKENDS, write_policy

from trainadmit.engine import Request, decide, load_policy

GATE = [{"name": "trainadmit.io/placement"}]
H100_IB = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "trainadmit.io/pool": "h100-ib"}
KAI = {"gang": {"backend": "kai"}}


def placement(gang: str, size: int) -> dict:
    """The template annotation the ungater reads, as docs/scheduling.md describes it."""
    return {"gang": gang, "size": size, "key": "topology.kubernetes.io/rack", "level": "rack", "pool": H100_IB}


def _policy(tmp_path, platform: dict):
    return load_policy(write_policy(tmp_path / "policies", platform))


def _manifest(path: str, kind: str) -> dict:
    """The first ``kind`` of the public manifest, with 8 GPUs in every main container and a rack asked for."""
    [obj, *_] = [d for d in load_yaml(FIXTURES / path) if d.get("kind") == kind]
    obj = with_gpus(obj, 8)
    obj["metadata"].setdefault("annotations", {})["trainadmit.io/topology"] = "rack"
    return obj


def _indexed_job() -> dict:
    """The Kubernetes docs' Indexed Job as 4 x 8 GPUs in one rack (as tests/engine/test_colocation_choice.py)."""
    job = copy.deepcopy(yaml.safe_load((FIXTURES / "real-world" / "k8s-website-indexed-job.yaml").read_text()))
    job["metadata"] = {"name": "indexed-job", "namespace": "team-nlp", "labels": {"owner": "nlp"},
                       "annotations": {"trainadmit.io/topology": "rack"}}
    job["spec"].update(parallelism=4, completions=4)
    job["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 8}}
    return job


def _decide(policy, obj: dict):
    d = decide(policy, Request(obj, namespace="team-nlp"))
    assert d.allowed, [v.text() for v in d.violations]
    return d


def _gated(template: dict, gang: str, size: int) -> None:
    """The template carries the gate and the annotation, and no pod affinity."""
    assert template["spec"]["schedulingGates"] == GATE
    assert json.loads(template["metadata"]["annotations"]["trainadmit.io/placement"]) == placement(gang, size)
    assert "podAffinity" not in (template["spec"].get("affinity") or {})


def _no_risk_and_idempotent(policy, d) -> None:
    assert "topology.colocation-risk" not in rules_of(d)
    again = decide(policy, Request(d.mutated, namespace="team-nlp"))
    assert again.patch == [] and again.mutated == d.mutated


@pytest.mark.parametrize("backend", ["coscheduling", "volcano", "kai"])
def test_a_plain_indexed_job_gets_the_gate_and_its_backends_gang_keys(tmp_path, backend):
    policy = _policy(tmp_path, BACKENDS.get(backend, KAI))
    d = _decide(policy, _indexed_job())
    m, template = d.mutated, d.mutated["spec"]["template"]
    _gated(template, "team-nlp/indexed-job", 4)
    if backend == "coscheduling":  # the label and the PodGroup of minMember 4: coscheduling forms the gang
        assert template["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "indexed-job"
        assert template["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
        [pg] = d.companions
        assert pg["kind"] == "PodGroup" and pg["spec"]["minMember"] == 4
    elif backend == "volcano":  # Volcano's pg-controller builds the PodGroup from the owner annotation
        assert m["metadata"]["annotations"]["scheduling.volcano.sh/group-min-member"] == "4"
        assert template["spec"]["schedulerName"] == "volcano" and d.companions == []
    else:  # KAI's podgrouper: queue label, minimum, its scheduler; no KAI topology without gang.kaiTopology
        assert m["metadata"]["annotations"]["kai.scheduler/batch-min-member"] == "4"
        assert template["spec"]["schedulerName"] == "kai-scheduler"
        assert "kai.scheduler/topology-required-placement" not in m["metadata"]["annotations"]
    assert d.summary["gang"] == backend
    _no_risk_and_idempotent(policy, d)


def test_a_volcano_job_gets_the_gate_on_every_gpu_task_and_keeps_its_min_available(tmp_path):
    """Volcano's examples/mpi-example.yaml (minAvailable 3: 1 master + 2 workers). Volcano's job controller copies
    each task template's annotations and spec into its Pods (createJobPod), so all three carry gate and gang."""
    policy = _policy(tmp_path, BACKENDS["volcano"])
    d = _decide(policy, _manifest("operators/volcano/examples/mpi-example.yaml", "Job"))
    tasks = d.mutated["spec"]["tasks"]
    for task in tasks:
        _gated(task["template"], "team-nlp/lm-mpi-job", 3)
    assert d.mutated["spec"]["minAvailable"] == 3 and d.mutated["spec"]["schedulerName"] == "volcano"
    _no_risk_and_idempotent(policy, d)


def test_a_pytorchjob_under_coscheduling_gets_the_gate_on_master_and_worker(tmp_path):
    """Kubeflow's pytorch_job_mnist_nccl.yaml (Master 1 + Worker 1): the training operator, run with
    --gang-scheduler-name=scheduler-plugins, builds the PodGroup from runPolicy.schedulingPolicy (minAvailable 2)."""
    policy = _policy(tmp_path, BACKENDS["coscheduling"])
    d = _decide(policy, _manifest("operators/kubeflow-training-operator-v1/examples/pytorch_job_mnist_nccl.yaml",
                                  "PyTorchJob"))
    specs = d.mutated["spec"]["pytorchReplicaSpecs"]
    for role in ("Master", "Worker"):
        _gated(specs[role]["template"], "team-nlp/pytorch-dist-mnist-nccl", 2)
    assert d.mutated["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == 2
    _no_risk_and_idempotent(policy, d)


def test_an_mpijob_gates_its_gpu_workers_and_leaves_the_launcher_alone(tmp_path):
    """mpi-operator's tensorflow-benchmarks.yaml with GPUs on the workers only (as the original): the launcher runs
    no GPU, so it is not gated and its room is not counted; the 2 workers wait for one rack."""
    policy = _policy(tmp_path, BACKENDS["coscheduling"])
    [obj] = [o for o in load_yaml(FIXTURES / "operators/kubeflow-mpi-operator/examples/tensorflow-benchmarks.yaml")
             if o.get("kind") == "MPIJob"]
    worker = obj["spec"]["mpiReplicaSpecs"]["Worker"]
    worker["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 8}}
    obj["metadata"].setdefault("annotations", {})["trainadmit.io/topology"] = "rack"
    d = _decide(policy, obj)
    specs = d.mutated["spec"]["mpiReplicaSpecs"]
    _gated(specs["Worker"]["template"], "team-nlp/tensorflow-benchmarks", worker["replicas"])
    assert "schedulingGates" not in specs["Launcher"]["template"]["spec"]
    _no_risk_and_idempotent(policy, d)


def test_a_jobset_under_coscheduling_gets_the_gate_in_its_replicated_job(tmp_path):
    """JobSet's pytorch-cnn-mnist.yaml (1 replicated job of 4 Pods): its child Jobs copy the template, so every Pod
    names the JobSet's gang; the PodGroup of minMember 4 is coscheduling's."""
    policy = _policy(tmp_path, BACKENDS["coscheduling"])
    d = _decide(policy, _manifest("operators/jobset/examples/pytorch-cnn-mnist.yaml", "JobSet"))
    template = d.mutated["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    _gated(template, "team-nlp/pytorch", 4)
    assert template["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "pytorch"
    assert [pg["spec"]["minMember"] for pg in d.companions] == [4]
    _no_risk_and_idempotent(policy, d)


def test_a_trainjob_gets_the_gate_in_its_runtime_patch(tmp_path):
    """Trainer's 04-volcano-integration.yaml (numNodes 4; its runtime's podGroupPolicy forms the gang): the gate and
    the annotation go into trainadmit's runtime patch (runtimePatches may set schedulingGates: the TrainJob CRD)."""
    policy = _policy(tmp_path, BACKENDS["volcano"])
    d = _decide(policy, _manifest("operators/kubeflow-trainer-v2/examples/04-volcano-integration.yaml", "TrainJob"))
    [patch] = [p for p in d.mutated["spec"]["runtimePatches"] if p["manager"] == "trainadmit.io/admission"]
    [node] = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    _gated(node["template"]["spec"]["template"], "team-nlp/volcano-example", 4)
    _no_risk_and_idempotent(policy, d)


def test_a_gang_of_a_minimum_keeps_pod_affinity_and_says_why(tmp_path):
    """KAI's examples/batch/batch-job-min-member.yaml: 6 Pods, KAI gangs 2 (the user's batch-min-member, kept). The
    ungater would wait for a rack with room for all 6 while KAI starts with 2: pod affinity as before, the risk
    note, and a note naming the reason."""
    policy = _policy(tmp_path, KAI)
    obj = _manifest("real-world/kai-batch-job-min-member.yaml", "Job")
    obj["spec"]["completionMode"] = "Indexed"
    d = _decide(policy, obj)
    template = d.mutated["spec"]["template"]
    assert "schedulingGates" not in template["spec"]
    [term] = template["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "topology.kubernetes.io/rack"
    assert d.mutated["metadata"]["annotations"]["kai.scheduler/batch-min-member"] == "2"
    assert "topology.colocation-risk" in rules_of(d)
    assert ("workers are colocated at level rack by required pod affinity, not the placement gate: the placement "
            "gate releases a gang once one domain has room for all of its Pods, and this Job's gang holds 2 of its 6 "
            "Pods: it would wait for room the gang does not need") in d.summary["notes"]


def test_a_volcano_job_whose_min_available_is_below_its_replicas_keeps_pod_affinity(tmp_path):
    policy = _policy(tmp_path, BACKENDS["volcano"])
    obj = _manifest("operators/volcano/examples/mpi-example.yaml", "Job")
    obj["spec"]["minAvailable"] = 2  # of 3
    d = _decide(policy, obj)
    for task in d.mutated["spec"]["tasks"]:
        assert "schedulingGates" not in task["template"]["spec"]
        assert task["template"]["spec"]["affinity"]["podAffinity"]
    assert any("this Job's gang holds 2 of its 3 Pods" in n for n in d.summary["notes"])


def test_kai_with_a_topology_keeps_kais_placement_and_an_explicit_pod_affinity_is_kept(tmp_path):
    policy = _policy(tmp_path, {"gang": {"backend": "kai", "kaiTopology": "cluster-topology"}})
    d = _decide(policy, _indexed_job())
    assert d.mutated["metadata"]["annotations"]["kai.scheduler/topology-required-placement"] == \
        "topology.kubernetes.io/rack"
    assert "schedulingGates" not in d.mutated["spec"]["template"]["spec"]
    (tmp_path / "explicit").mkdir()
    policy = _policy(tmp_path / "explicit", {"gang": {"backend": "volcano", "topologyMethod": "podAffinity"}})
    d = _decide(policy, deep(_indexed_job()))
    assert "schedulingGates" not in d.mutated["spec"]["template"]["spec"]
    assert d.mutated["spec"]["template"]["spec"]["affinity"]["podAffinity"]
