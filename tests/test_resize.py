"""A resize is decided by the rules a CREATE of that size would meet, for every kind, and its gang must follow.

Each case is a public manifest (an operator's example or a manifest from the Kubernetes docs, made a GPU
job), created through the engine as the apiserver would store it, then resized the way its users resize
it: through the kind's own count field (a Job's parallelism, a PyTorchJob's Worker.replicas, a RayCluster's
workerGroupSpecs[].replicas, a JobSet's replicatedJobs[].replicas, a LeaderWorkerSet's replicas, a
TrainJob's numNodes). The expected decisions are written down here from the policy (racks of 16 H100
nodes of 8 GPUs) and from each backend's documented behaviour on a resize (README, "Resizes, counts and
workers").
"""

from __future__ import annotations

import copy

import pytest
from conftest import BACKENDS, FIXTURES, load_yaml, write_policy
from helpers import job, rules_of, with_gpus

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
