"""Rules made to fire on manifests written by others, with the decision written down by hand.

Each case is a public manifest from ``tests/fixtures/real-world`` (sources in SOURCES.md) with what a
training user adds (GPUs, intent keys) and, where the bundled policy has no such corner, a policy that
has it: a dataset mounted where the manifest already mounts a volume, a namespace limited to one pool, gang
intent on a bare Pod, colocation that cannot be expressed.
"""

from __future__ import annotations

import copy
import json

from support.builders import with_gpus
from support.manifests import load_yaml, review
from support.paths import FIXTURES, POLICIES
from support.policies import write_policy

from trainadmit.engine import Request, decide, load_policy

REAL = FIXTURES / "real-world"


def manifest(name: str) -> dict:
    return copy.deepcopy(load_yaml(REAL / name)[0])


def violation(decision, rule: str):
    [found] = [v for v in decision.violations if v.rule == rule]
    return found


def test_a_dataset_where_the_manifest_already_mounts_a_volume_is_refused(tmp_path):
    """kubernetes/website's indexed-job-vol mounts its downwardAPI volume at /input; a dataset the policy
    mounts at /input would take that path away from it."""
    dataset = {"apiVersion": "trainadmit.io/v1alpha1", "kind": "Dataset", "metadata": {"name": "inputs"},
               "spec": {"claimName": "dataset-inputs", "mountPath": "/input"}}
    policy = load_policy(write_policy(tmp_path, extra=[dataset]))
    obj = with_gpus(manifest("k8s-website-indexed-job-vol.yaml"))
    obj["metadata"]["annotations"] = {"trainadmit.io/datasets": "inputs"}
    d = decide(policy, Request(obj, namespace="team-nlp"))
    v = violation(d, "storage.mount-conflict")
    assert not d.allowed and v.action.value == "deny"
    assert v.path == "spec.template.spec.containers[0].volumeMounts"
    assert v.message == "container worker already mounts something at /input, where dataset inputs goes"
    assert v.hint == "remove that mount or inputs from trainadmit.io/datasets"
    mounts = d.mutated["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert [m["mountPath"] for m in mounts if m["mountPath"] == "/input"] == ["/input"]  # the user's, alone


def test_a_pool_the_namespaces_quota_does_not_allow_is_refused(tmp_path):
    """kubernetes/website's indexed-job as 3 x 8-GPU workers: the default pool for nvidia.com/gpu is
    h100-ib, which the research namespace's quota does not allow."""
    quota = {"apiVersion": "trainadmit.io/v1alpha1", "kind": "Quota", "metadata": {"name": "research"},
             "spec": {"namespaces": ["research"], "allowedPools": ["l40s-eth"]}}
    policy = load_policy(write_policy(tmp_path, extra=[quota]))
    obj = with_gpus(manifest("k8s-website-indexed-job.yaml"))
    d = decide(policy, Request(obj, namespace="research"))
    v = violation(d, "quota.pool-not-allowed")
    assert v.action.value == "deny" and not d.allowed
    assert v.path == 'metadata.labels["trainadmit.io/pool"]'
    assert v.message == "namespace research may not use pool h100-ib"
    assert v.hint == "use one of: l40s-eth"
    obj["metadata"]["labels"] = {"trainadmit.io/pool": "l40s-eth"}  # the pool the quota allows
    assert "quota.pool-not-allowed" not in {x.rule for x in decide(policy, Request(obj, namespace="research"))
                                            .violations}


def test_gang_intent_on_a_bare_pod_is_a_warning_and_no_gang(policy):
    """NVIDIA network operator's RDMA GPU test Pod with gang: "true": a Pod's siblings are unknown here."""
    obj = manifest("netop-rdma-gpu-test-pod1.yml")
    obj["metadata"]["annotations"]["trainadmit.io/gang"] = "true"
    d = decide(policy, Request(obj, namespace="team-nlp"))
    v = violation(d, "gang.pod-level")
    assert v.action.value == "warn" and v.path == "metadata"
    assert v.message == "trainadmit gangs Jobs; a Pod's gang size is not known here"
    assert v.hint == "let the operator that creates these pods form the gang, or submit a batch/v1 Job"
    assert d.summary["gang"] == "none"
    assert "schedulingGroup" not in d.mutated["spec"] and all(i.concern != "gang" for i in d.injections)


def test_a_generate_name_job_colocated_by_pod_affinity_is_named_and_its_pods_selected_by_that_name(tmp_path):
    """A generateName Job as a real kube-apiserver sent it (admission-reviews/job-07: 4 x 8 GPUs, rack) under the
    Volcano backend with ``topologyMethod: podAffinity`` (auto gives it the placement gate:
    tests/engine/test_gate_under_gang_schedulers.py): its workers are colocated by pod affinity to the Job's own
    Pods, selected by the Job's name, so the decision names the Job first (``sweep-xxxxx`` without a name drawn by
    the server) and selects by it."""
    policy = load_policy(write_policy(tmp_path, {"gang": {"backend": "volcano", "topologyMethod": "podAffinity"}}))
    obj = review("job-07-mutate-Job-CREATE.json")["request"]["object"]
    d = decide(policy, Request(obj, namespace="team-nlp"))
    assert "topology.colocation-unavailable" not in {v.rule for v in d.violations}
    assert d.mutated["metadata"]["name"] == "sweep-xxxxx" and d.summary["gang"] == "volcano"
    affinity = d.mutated["spec"]["template"]["spec"]["affinity"]["podAffinity"]
    terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms == [{"labelSelector": {"matchLabels": {"batch.kubernetes.io/job-name": "sweep-xxxxx"}},
                      "topologyKey": "topology.kubernetes.io/rack"}]
    drawn = decide(policy, Request(obj, namespace="team-nlp", generated_name="sweep-b2z9q"))
    assert drawn.mutated["metadata"]["name"] == "sweep-b2z9q"
    assert "sweep-xxxxx" not in json.dumps(drawn.patch) and json.dumps(drawn.patch).count("sweep-b2z9q") >= 2


def test_a_workload_another_gang_mechanism_places_is_not_colocated_and_the_decision_says_so(tmp_path):
    """Kueue's sample Job (generateName, 3 workers, queue-name label) with GPUs under the coscheduling backend:
    Kueue forms and places its gang, so trainadmit adds neither a gang nor pod affinity, and says so."""
    policy = load_policy(write_policy(tmp_path, {"gang": {"backend": "coscheduling"}}))
    obj = with_gpus(manifest("kueue-sample-job.yaml"))
    d = decide(policy, Request(obj, namespace="team-nlp"))
    assert "topology.colocation-unavailable" not in {v.rule for v in d.violations}
    assert "podAffinity" not in d.mutated["spec"]["template"]["spec"]["affinity"]  # the pool's node affinity only
    assert d.summary["topology"] is None
    assert "workers are not colocated at level rack by trainadmit: left to kueue, which forms and places its gang" in \
        d.summary["notes"]


def test_the_native_topology_constraint_without_the_native_gang_is_a_warning(tmp_path):
    """The same 3 x 8-GPU indexed Job, a policy that asks for the native topology constraint with Kueue as
    the gang backend: only a native gang carries that constraint."""
    policy = load_policy(write_policy(tmp_path, {"gang": {"backend": "kueue", "topologyMethod": "native"}}))
    obj = with_gpus(manifest("k8s-website-indexed-job.yaml"))
    d = decide(policy, Request(obj, namespace="team-nlp"))
    v = violation(d, "topology.colocation-unavailable")
    assert v.action.value == "warn" and v.path == 'metadata.annotations["trainadmit.io/topology"]'
    assert v.message == ("workers are not colocated at level rack: the native topology constraint is part of a "
                         "native gang, and the policy's gang backend is kueue")
    assert "scheduling" not in d.mutated["spec"]


def test_an_elastic_pytorchjob_is_told_its_elastic_minimum_keeps_the_topology_out(tmp_path):
    """Kubeflow's elastic ImageNet PyTorchJob (Worker replicas 2, elasticPolicy minReplicas 1) with GPUs, on the
    native backend: the operator gangs only its minimum, so no native gang carries the topology constraint. The
    cause named is that minimum (not "needs the native gang backend", which the policy already is); under auto
    no colocation is added and the summary says why, with topologyMethod native it is a warning."""
    obj = with_gpus(manifest("kftrainingop-imagenet.yaml"))
    why = ("the native topology constraint is part of a native gang, and this PyTorchJob has none: its operator "
           "counts 1 of its 2 Pods in a gang (an elastic job counts its minimum)")
    auto = decide(load_policy(POLICIES), Request(copy.deepcopy(obj), namespace="team-nlp"))
    assert auto.allowed and auto.summary["topology"] is None
    assert f"workers are not colocated at level rack by trainadmit: {why}" in auto.summary["notes"]
    worker = auto.mutated["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert "podAffinity" not in (worker.get("affinity") or {})
    native = load_policy(write_policy(tmp_path, {"gang": {"topologyMethod": "native"}}))
    v = violation(decide(native, Request(obj, namespace="team-nlp")), "topology.colocation-unavailable")
    assert v.message == f"workers are not colocated at level rack: {why}"


def test_advice_on_the_number_of_workers_names_the_kinds_own_count_fields(tmp_path):
    """The Kubeflow training operator's MNIST PyTorchJob (Master 1, Worker 1) grown to 6 GPU workers, in a
    namespace allowing 4 workers: the advice points at Worker.replicas and names both of the kind's count
    fields, not a Job's spec.parallelism; the summary shows them."""
    quota = {"apiVersion": "trainadmit.io/v1alpha1", "kind": "Quota", "metadata": {"name": "research"},
             "spec": {"namespaces": ["research"], "maxWorkersPerJob": 4}}
    policy = load_policy(write_policy(tmp_path, extra=[quota]))
    obj = with_gpus(manifest("kftrainingop-pytorch_job_mnist_nccl.yaml"))
    obj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 6
    d = decide(policy, Request(obj, namespace="research"))
    v = violation(d, "quota.workers-per-job")
    assert v.path == "spec.pytorchReplicaSpecs.Worker.replicas"
    assert v.message == "runs 7 workers; quota research allows 4 per job"
    assert v.hint == "set spec.pytorchReplicaSpecs.Worker.replicas: 3"  # Master 1 + Worker 3 = 4 Pods
    assert d.summary["scale"] == {"spec.pytorchReplicaSpecs.Master.replicas": 1,
                                  "spec.pytorchReplicaSpecs.Worker.replicas": 6}
    job = with_gpus(manifest("k8s-website-indexed-job.yaml"))  # a batch/v1 Job: its parallelism and completions
    job["spec"].update(parallelism=6, completions=6)
    v = violation(decide(policy, Request(job, namespace="research")), "quota.workers-per-job")
    assert (v.path, v.hint) == ("spec.parallelism", "set spec.parallelism: 4 and spec.completions: 4")
