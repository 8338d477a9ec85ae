"""A resize is decided by the rules a CREATE of that size would meet, for every kind, and its gang must follow.

Each case is a public manifest (an operator's example or a manifest from the Kubernetes docs, made a GPU
job), created through the engine as the apiserver would store it, then resized the way its users resize
it: through the kind's own count field (a Job's parallelism, a PyTorchJob's Worker.replicas, a RayCluster's
workerGroupSpecs[].replicas, a JobSet's replicatedJobs[].replicas, a LeaderWorkerSet's replicas, a
TrainJob's numNodes). The expected decisions are written down here from the policy (racks of 16 H100
nodes of 8 GPUs) and from each backend's documented behaviour on a resize (docs/workloads.md, "Resizes, counts and
workers").
"""

from __future__ import annotations

import copy

import pytest
from support.builders import job, rules_of, with_gpus
from support.manifests import load_yaml
from support.paths import FIXTURES
from support.policies import BACKENDS, write_policy

from trainadmit.cluster.snapshot import SnapshotCluster
from trainadmit.engine import Request, decide, load_policy

NAMESPACE = "research"  # no Quota: only the topology and gang rules speak


def example(file: str, index: int = 0) -> dict:
    obj = with_gpus(copy.deepcopy(load_yaml(FIXTURES / file)[index]))
    obj["metadata"]["namespace"] = NAMESPACE
    obj["metadata"].setdefault("name", "example")
    obj["metadata"].pop("generateName", None)
    if obj["kind"] == "Job" and obj["apiVersion"] == "batch/v1":  # the docs' Job runs 3 of 5 at once: a gang runs all
        obj["spec"]["completions"] = obj["spec"]["parallelism"]
    return obj


def stored(policy, obj: dict) -> dict:
    """The object as admission stores it (the CREATE's patch applied)."""
    d = decide(policy, Request(copy.deepcopy(obj)))
    assert d.allowed, d.denial_message()
    return d.mutated


def update(policy, old: dict, new: dict):
    return decide(policy, Request(copy.deepcopy(new), operation="UPDATE", old=copy.deepcopy(old), phase="validate"))


@pytest.fixture(scope="module")
def policies(tmp_path_factory):
    root = tmp_path_factory.mktemp("resize-policies")
    out = {name: load_policy(write_policy(root / name, BACKENDS[name])) for name in BACKENDS}
    out["native-podgroup-1.36"] = load_policy(write_policy(root / "v136", {
        "kubernetesVersion": "1.36", "featureGates": ["GenericWorkload"], **BACKENDS["native-podgroup"]}))
    return out


def _set(obj: dict, path: tuple, value) -> None:
    cur = obj
    for part in path[:-1]:
        cur = cur[part]
    cur[path[-1]] = value


# kind, public example, the resize to 20 GPU Pods in the kind's own count fields (racks have 16 nodes)
PAST_A_RACK = [
    ("Job", "real-world/k8s-website-indexed-job.yaml", [(("spec", "parallelism"), 20), (("spec", "completions"), 20)]),
    ("PyTorchJob", "operators/kubeflow-training-operator-v1/examples/pytorch_job_mnist_nccl.yaml",
     [(("spec", "pytorchReplicaSpecs", "Worker", "replicas"), 19)]),  # + its Master
    ("TFJob", "operators/kubeflow-training-operator-v1/examples/tfjob_multi_worker_strategy.yaml",
     [(("spec", "tfReplicaSpecs", "Worker", "replicas"), 20)]),
    ("PaddleJob", "operators/kubeflow-training-operator-v1/examples/paddlejob_simple-cpu.yaml",
     [(("spec", "paddleReplicaSpecs", "Worker", "replicas"), 20)]),
    ("MPIJob", "operators/kubeflow-mpi-operator/examples/tensorflow-benchmarks.yaml",
     [(("spec", "mpiReplicaSpecs", "Worker", "replicas"), 19)]),  # + its launcher, GPUs everywhere here
    ("RayCluster", "real-world/kueue-ray-cluster-sample.yaml",
     [(("spec", "workerGroupSpecs", 0, "replicas"), 19), (("spec", "workerGroupSpecs", 0, "maxReplicas"), 19)]),
    ("JobSet", "operators/jobset/examples/pytorch-cnn-mnist.yaml", [(("spec", "replicatedJobs", 0, "replicas"), 5)]),
    ("LeaderWorkerSet", "operators/lws/examples/vllm-gpu-lws.yaml", [(("spec", "replicas"), 10)]),
    ("TrainJob", "operators/kubeflow-trainer-v2/examples/01-multi-node.yaml", [(("spec", "trainer", "numNodes"), 20)]),
    ("Volcano Job", "operators/volcano/examples/mindspore-gpu.yaml", [(("spec", "tasks", 1, "replicas"), 19)]),
]


@pytest.mark.parametrize(("kind", "file", "changes"), PAST_A_RACK, ids=[c[0] for c in PAST_A_RACK])
def test_a_resize_past_a_rack_is_refused_with_the_rule_of_the_create(policies, kind, file, changes):
    """Created within a rack, resized to 20 GPU Pods: refused by topology.domain-fit with the very message a
    CREATE of 20 Pods gets (before, every resize but a quota breach was accepted)."""
    policy = policies["coscheduling"]
    original = example(file)
    old = stored(policy, original)
    new, created = copy.deepcopy(old), copy.deepcopy(original)
    for path, value in changes:
        _set(new, path, value)
        _set(created, path, value)
    d = update(policy, old, new)
    fresh = decide(policy, Request(created))
    domain = [v.text() for v in d.violations if v.rule == "topology.domain-fit"]
    assert domain and domain == [v.text() for v in fresh.violations if v.rule == "topology.domain-fit"], kind
    assert "20 workers need 20 nodes in one rack" in domain[0]
    assert not d.allowed and d.patch == []  # an UPDATE is never mutated


def test_a_shrink_is_never_refused_for_a_limit_a_growth_would_break(tmp_path):
    """Created at 8 GPU workers where the namespace had no per-job limit, then limited to 4: shrinking to 6
    is accepted (a shrink only helps), growing to 9 is refused by the limit."""
    job8 = example("real-world/k8s-website-indexed-job.yaml")
    job8["spec"].update(parallelism=8, completions=8)
    job8["metadata"]["annotations"] = {"trainadmit.io/gang": "false"}  # only the quota speaks here
    old = stored(load_policy(write_policy(tmp_path / "free")), job8)
    quota = {"apiVersion": "trainadmit.io/v1alpha1", "kind": "Quota", "metadata": {"name": "small"},
             "spec": {"namespaces": [NAMESPACE], "maxWorkersPerJob": 4}}
    limited = load_policy(write_policy(tmp_path / "limited", extra=[quota]))
    for size, allowed in ((6, True), (9, False)):
        new = copy.deepcopy(old)
        new["spec"].update(parallelism=size, completions=size)
        d = update(limited, old, new)
        assert d.allowed is allowed, (size, d.violations)
        assert allowed or rules_of(d) == {"quota.workers-per-job"}


def test_a_resize_that_breaks_the_gang_shape_is_refused(policies):
    """A gang Job resized 4 -> 8 with completions left at 4, or 2 -> 3: gang.parallelism-completions, as
    at CREATE; 4 -> 8 with both fields is accepted."""
    policy = policies["coscheduling"]
    for before, after, ok in ((4, {"parallelism": 8}, False), (2, {"parallelism": 3}, False),
                              (4, {"parallelism": 8, "completions": 8}, True)):
        old = stored(policy, job(name=f"shape-{before}", namespace=NAMESPACE, workers=before))
        new = copy.deepcopy(old)
        new["spec"].update(after)
        d = update(policy, old, new)
        assert d.allowed is ok, (before, after, d.violations)
        if not ok:
            assert rules_of(d) == {"gang.parallelism-completions"}


def _resized(policy, obj: dict, changes: list[tuple[tuple, object]]):
    old = stored(policy, obj)
    new = copy.deepcopy(old)
    for path, value in changes:
        _set(new, path, value)
    return update(policy, old, new)


def _only_follow(d) -> str:
    """The one gang.resize-not-followed violation's text (the resize breaks no other rule)."""
    assert rules_of(d) == {"gang.resize-not-followed"}, d.violations
    return d.violations[0].text()


def test_each_backend_follows_a_resize_or_says_what_to_do(policies):
    """Within the rules (4 -> 8 GPU Pods in a rack), per backend as documented: the reconciler resizes its own
    PodGroup (coscheduling, native v1beta1), Kueue requeues, the 1.37 Job's own minCount and an operator's
    minAvailable must change in the same UPDATE, and Volcano's batch-Job PodGroup and a 1.36 native PodGroup
    cannot change at all."""
    def job4():
        obj = example("real-world/k8s-website-indexed-job.yaml")
        obj["spec"].update(parallelism=4, completions=4)
        return obj
    grow = [(("spec", "parallelism"), 8), (("spec", "completions"), 8)]
    for name in ("coscheduling", "native-podgroup", "kueue"):
        assert _resized(policies[name], job4(), grow).allowed, name
    text = _only_follow(_resized(policies["native-job"], job4(), grow))
    assert "spec.scheduling.schedulingPolicy.gang.minCount: 8 in the same change" in text
    assert _resized(policies["native-job"], job4(), [*grow, (("spec", "scheduling", "schedulingPolicy", "gang",
                                                              "minCount"), 8)]).allowed
    assert "never updates it" in _only_follow(_resized(policies["volcano"], job4(), grow))
    text = _only_follow(_resized(policies["native-podgroup-1.36"], job4(), grow))
    assert "scheduling.k8s.io/v1alpha2" in text and "delete the Job and create it with the new size" in text

    pytorch = example("operators/kubeflow-training-operator-v1/examples/pytorch_job_mnist_nccl.yaml")
    workers = ("spec", "pytorchReplicaSpecs", "Worker", "replicas")
    minimum = ("spec", "runPolicy", "schedulingPolicy", "minAvailable")
    for name in ("coscheduling", "volcano"):
        text = _only_follow(_resized(policies[name], pytorch, [(workers, 3)]))
        assert "spec.runPolicy.schedulingPolicy.minAvailable: 4 in the same change" in text, name
        assert _resized(policies[name], pytorch, [(workers, 3), (minimum, 4)]).allowed, name
    assert _resized(policies["native-podgroup"], pytorch, [(workers, 3)]).allowed

    vjob = example("operators/volcano/examples/mindspore-gpu.yaml")
    text = _only_follow(_resized(policies["volcano"], vjob, [(("spec", "tasks", 1, "replicas"), 4)]))
    assert "spec.minAvailable: 5 in the same change" in text
    assert _resized(policies["volcano"], vjob, [(("spec", "tasks", 1, "replicas"), 4), (("spec", "minAvailable"), 5)
                                                ]).allowed

    ray = example("operators/kuberay/examples/ray-cluster.scheduler-plugins.yaml")
    ray_grow = [(("spec", "workerGroupSpecs", 0, "replicas"), 3), (("spec", "workerGroupSpecs", 0, "maxReplicas"), 3)]
    assert "KubeRay creates the scheduler-plugins PodGroup once" in _only_follow(
        _resized(policies["coscheduling"], ray, ray_grow))
    assert _resized(policies["volcano"], ray, ray_grow).allowed  # KubeRay updates its Volcano PodGroup


def test_a_job_admitted_without_a_gang_cannot_become_a_gang_by_update(policies):
    """One Pod needs no gang, so none was added; 4 Pods need one, which an UPDATE cannot add."""
    policy = policies["coscheduling"]
    old = stored(policy, job(name="single", namespace=NAMESPACE, workers=1))
    new = copy.deepcopy(old)
    new["spec"].update(parallelism=4, completions=4)
    text = _only_follow(update(policy, old, new))
    assert "admitted without a gang (1 Pods)" in text and "delete the Job and create it with the new size" in text


def test_an_update_that_changes_no_count_runs_no_size_rule(policies):
    """A label change on a Job that no longer fits its rack (the policy shrank the rack) passes: only a resize
    runs the rules that depend on the size again."""
    policy = policies["coscheduling"]
    old = stored(policy, job(name="labelled", namespace=NAMESPACE, workers=4))
    old["spec"].update(parallelism=30, completions=30)  # as if it had been admitted under another policy
    new = copy.deepcopy(old)
    new["metadata"].setdefault("labels", {})["team"] = "nlp"
    d = update(policy, old, new)
    assert d.allowed and d.violations == []


def test_an_elastic_job_resized_within_its_bounds_keeps_its_gang(policies):
    """The training operator's elastic ImageNet PyTorchJob (minReplicas 1, maxReplicas 3) gangs its minimum:
    its workers going 2 -> 3 leave the gang (and its minAvailable) as they were, whatever the backend."""
    elastic = example("operators/kubeflow-training-operator-v1/examples/pytorch_elastic_imagenet.yaml")
    for name in ("coscheduling", "volcano", "native-podgroup", "kueue"):
        d = _resized(policies[name], elastic, [(("spec", "pytorchReplicaSpecs", "Worker", "replicas"), 3)])
        assert d.allowed and "resized from 2 to 3 Pods" in d.reason, (name, d.violations)


def test_a_gang_minimum_of_the_users_own_stays_theirs(policies):
    """Volcano's MindSpore example with a gang minimum of its own (spec.minAvailable 2 of its 3 Pods): growing
    a task keeps the user's minimum, for Volcano's job controller to follow; a minimum above the new size
    could never start and is refused."""
    vjob = example("operators/volcano/examples/mindspore-gpu.yaml")
    vjob["spec"]["minAvailable"] = 2
    replicas = ("spec", "tasks", 1, "replicas")
    assert _resized(policies["volcano"], vjob, [(replicas, 3)]).allowed
    text = _only_follow(_resized(policies["volcano"], vjob, [(replicas, 3), (("spec", "minAvailable"), 5)]))
    assert "the gang needs 5 Pods (spec.minAvailable) and the Job now runs 4: it could never start" in text


# ---- a resize counts GPUs where a CREATE counts them: DRA claims, a TrainJob's runtime ---------------

NVIDIA = FIXTURES / "dra" / "nvidia-dra-driver-gpu" / "examples"
TRAINER = FIXTURES / "operators" / "kubeflow-trainer-v2" / "examples"
DEVICES = "gpu.nvidia.com.deviceclass.resource.k8s.io/devices"


def _eight_gpus() -> dict:
    """NVIDIA's single-gpu ResourceClaimTemplate (gpu-test1) asking for a node's 8 GPUs, in the namespace."""
    [rct] = [d for d in load_yaml(NVIDIA / "gpu-test1.yaml") if d["kind"] == "ResourceClaimTemplate"]
    rct = copy.deepcopy(rct)
    rct["metadata"] = {"name": "eight-gpus", "namespace": NAMESPACE}
    rct["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 8
    return rct


def _dra_job(workers: int) -> dict:
    """A gang Job whose Pods take their GPUs from the claim template only (no nvidia.com/gpu anywhere)."""
    obj = job(name="dra-train", namespace=NAMESPACE, workers=workers)
    spec = obj["spec"]["template"]["spec"]
    spec["containers"][0]["resources"] = {"claims": [{"name": "gpus"}]}
    spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "eight-gpus"}]
    return obj


def _device_quota(hard: int, used: int) -> dict:
    """A ResourceQuota on the DeviceClass's devices, as the quota controller reports it (``used`` counts the
    stored Job's own Pods' claims)."""
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpus", "namespace": NAMESPACE},
            "spec": {"hard": {DEVICES: str(hard)}}, "status": {"hard": {DEVICES: str(hard)}, "used": {DEVICES: str(used)}}}


def _job_size(obj: dict, workers: int) -> dict:
    """``obj`` resized as its user does: parallelism, completions and the native gang's minCount together."""
    obj = copy.deepcopy(obj)
    obj["spec"].update(parallelism=workers, completions=workers)
    gang = obj["spec"].get("scheduling", {}).get("schedulingPolicy", {}).get("gang")
    if gang is not None:
        gang["minCount"] = workers
    return obj


def _denied(d) -> set[str]:
    """The rules that refuse (a CREATE also warns, e.g. topology.colocation-risk, which no resize re-runs)."""
    return {v.rule for v in d.denials}


def test_a_dra_job_resized_over_its_device_quota_is_refused_with_the_rule_of_the_create(policy):
    """A Job of 2 Pods x 8 gpu.nvidia.com devices (its claim template, no extended resource) is stored under a
    ResourceQuota of 32 devices, 16 used by its own Pods. By hand: 5 Pods need 40 devices, more than the 32 the
    namespace may ever hold: refused by quota.namespace-hard, the very message a CREATE of 5 Pods gets; 4 Pods
    add 16 devices to the 16 used, exactly the 32: accepted; with 24 used (another workload holds 8), the same
    resize adds 16 where 8 are free: quota.namespace-remaining, as a CREATE of 4 Pods is refused there; and 20
    Pods do not fit a rack of 16 nodes (topology.domain-fit, as at CREATE)."""
    cluster = SnapshotCluster([_device_quota(32, 16), _eight_gpus()])
    created = decide(policy, Request(_dra_job(2)), cluster)
    assert created.allowed and created.summary["gpuResource"] == "gpu.nvidia.com devices", created.violations
    old = created.mutated

    def resize(workers: int, view: SnapshotCluster):
        new = _job_size(old, workers)
        return (decide(policy, Request(copy.deepcopy(new), operation="UPDATE", old=copy.deepcopy(old),
                                       phase="validate"), view),
                decide(policy, Request(_job_size(_dra_job(2), workers)), view))

    over, fresh = resize(5, cluster)
    assert _denied(over) == _denied(fresh) == {"quota.namespace-hard"}, over.violations
    assert over.denials[0].message == fresh.denials[0].message
    # the fix passes every size rule at once, what is free now included: the resize may reach the 32 devices (its
    # own 16 are counted as used), the same 5 Pods created beside another workload's 16 only the 16 free
    assert over.denials[0].hint == "set spec.parallelism: 4 and spec.completions: 4"
    assert fresh.denials[0].hint == "set spec.parallelism: 2 and spec.completions: 2"
    assert "needs 40 gpu.nvidia.com devices, and namespace research may hold at most 32" in over.denials[0].message
    within, _ = resize(4, cluster)
    assert within.allowed and "(16 to 32 GPUs)" in within.reason, within.violations
    crowded = SnapshotCluster([_device_quota(32, 24), _eight_gpus()])
    short, fresh = resize(4, crowded)
    assert _denied(short) == _denied(fresh) == {"quota.namespace-remaining"}, short.violations
    assert "needs 16 gpu.nvidia.com devices; namespace research has 8 of 32 free" in short.denials[0].message
    wide, fresh = resize(20, SnapshotCluster([_eight_gpus()]))
    assert "topology.domain-fit" in rules_of(wide)
    assert [v.text() for v in wide.denials] == [v.text() for v in fresh.denials]


def _runtime_of_8_gpus() -> dict:
    """Trainer's torch-distributed-with-cache ClusterTrainingRuntime (a dataset initializer, then the trainer
    job's node Pods), its node container asking for 8 GPUs as a platform team's runtime does."""
    runtime = copy.deepcopy(load_yaml(TRAINER / "runtime-torch_distributed_with_cache.yaml")[0])
    [node] = [j for j in runtime["spec"]["template"]["spec"]["replicatedJobs"] if j["name"] == "node"]
    node["template"]["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 8}}
    return runtime


def _denials(decision) -> set[str]:
    """The rules that refuse it (a CREATE also warns of what an UPDATE does not check again)."""
    return {v.rule for v in decision.violations if v.action == "deny"}


def _trainjob(num_nodes: int, namespace: str = "team-nlp") -> dict:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "cached", "namespace": namespace},
            "spec": {"runtimeRef": {"name": "torch-distributed-with-cache"}, "trainer": {"numNodes": num_nodes}}}


def test_a_trainjob_resized_on_its_runtime_counts_the_runtimes_pods(policy, tmp_path):
    """A TrainJob of 2 nodes on the runtime above: by hand it runs 1 initializer + 2 node Pods of 8 GPUs, the
    GPUs only its runtime asks for. Quota team-nlp may hold 64 GPUs: numNodes 2 -> 8 (64 GPUs) is accepted,
    2 -> 9 (72) refused by the same rule as a CREATE of 9 nodes. Under a limit of 4 workers per job, 2 -> 4 is
    4 workers in 5 Pods (the initializer is no worker): accepted; 2 -> 5 is refused as a CREATE of 5 is."""
    cluster = SnapshotCluster([_runtime_of_8_gpus()])

    def resize(policy, namespace: str, num_nodes: int):
        created = decide(policy, Request(_trainjob(2, namespace)), cluster)
        assert created.allowed, created.violations
        assert created.summary["roles"] == [{"role": "dataset-initializer", "pods": 1, "gpus": 0},
                                            {"role": "node", "pods": 2, "gpus": 8}]
        old = created.mutated
        new = copy.deepcopy(old)
        new["spec"]["trainer"]["numNodes"] = num_nodes
        return (decide(policy, Request(new, operation="UPDATE", old=copy.deepcopy(old), phase="validate"), cluster),
                decide(policy, Request(_trainjob(num_nodes, namespace)), cluster))

    within, _ = resize(policy, "team-nlp", 8)
    assert within.allowed, within.violations
    assert "resized from 3 to 9 Pods (16 to 64 GPUs)" in within.reason
    over, fresh = resize(policy, "team-nlp", 9)
    assert rules_of(over) == _denials(fresh) == {"quota.namespace-hard"}, (over.violations, fresh.violations)
    assert "needs 72 nvidia.com/gpu" in over.violations[0].message

    quota = {"apiVersion": "trainadmit.io/v1alpha1", "kind": "Quota", "metadata": {"name": "four"},
             "spec": {"namespaces": ["ml"], "maxWorkersPerJob": 4}}
    four = load_policy(write_policy(tmp_path / "four", extra=[quota]))
    within, _ = resize(four, "ml", 4)
    assert within.allowed, within.violations
    over, fresh = resize(four, "ml", 5)
    assert rules_of(over) == _denials(fresh) == {"quota.workers-per-job"}, (over.violations, fresh.violations)
    assert "runs 5 workers; quota four allows 4 per job" in over.violations[0].message
