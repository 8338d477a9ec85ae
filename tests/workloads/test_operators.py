"""Operator workloads: one decision per training job at its custom resource, whatever submitted it.

Every example of the operators' own repositories (tests/fixtures/operators/, real-world/) is
recognised with the Pods and gang size its operator would create: the expected numbers were computed
by an independent model of each operator's documented behaviour (fixtures/operators/README.md), not
by this code. Made into GPU jobs (8 GPUs per Pod), each is mutated within its CRD's structural
schema (a field the apiserver would prune is a failure), exactly by its patch, and idempotently.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path

import jsonschema
import pytest
from support.builders import rules_of
from support.crd_prune import crd_schema, pruned
from support.manifests import deep
from support.operators import CRDS, CUSTOM_RESOURCES, EXPECTED, OPS, document, gpu_job, pytorchjob
from support.patches import apply_patch
from support.policies import BACKENDS, write_policy
from support.schemas import schema_errors

from trainadmit.engine import Request, decide, load_policy
from trainadmit.engine.workloads import workload_of
from trainadmit.policy import PolicyError


@pytest.mark.parametrize(("file", "index", "pods", "gang"), EXPECTED, ids=lambda v: str(v))
def test_every_operator_example_is_recognised_with_its_pods_and_gang(file, index, pods, gang):
    workload = workload_of(document(file, index))
    assert workload is not None, f"{file}: kind not handled"
    assert workload.templates, "no pod template found"
    assert (workload.pods, workload.gang_size) == (pods, gang)


@functools.cache
def backend_policy_of(name: str, tmp_root: str):
    return load_policy(write_policy(Path(tmp_root) / name, BACKENDS[name]))


@pytest.fixture(scope="module")
def policies(tmp_path_factory):
    root = tmp_path_factory.mktemp("operator-policies")
    return {name: backend_policy_of(name, str(root)) for name in BACKENDS}


def _schema_check(obj: dict) -> list[str]:
    key = (obj["apiVersion"], obj["kind"])
    if key not in CRDS:
        return schema_errors(obj)
    file, version = CRDS[key]
    schema = crd_schema(OPS / file, version)
    lost = pruned(obj, schema)
    typed = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
             for e in jsonschema.Draft7Validator(schema).iter_errors(obj)]
    return [f"pruned: {p}" for p in lost] + typed


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_gpu_examples_mutate_within_their_crd_schema_exactly_and_idempotently(policies, backend):
    policy = policies[backend]
    checked = 0
    for label, original in CUSTOM_RESOURCES:
        obj = gpu_job(original)
        before = _schema_check(obj)
        d = decide(policy, Request(deep(obj)))
        assert d.matched, (label, d.reason)
        assert d.mutated is not None
        assert _schema_check(d.mutated) == before, (label, backend)  # nothing injected is pruned or mistyped
        assert apply_patch(obj, d.patch) == d.mutated, label
        again = decide(policy, Request(deep(d.mutated)))
        assert again.patch == [], (label, again.patch[:3])
        final = decide(policy, Request(deep(d.mutated), phase="validate"))
        assert {v.rule for v in final.denials} <= {v.rule for v in d.denials}, (label, final.denials)
        checked += 1
    assert checked == len(CUSTOM_RESOURCES) > 20


def test_cpu_roles_get_no_gpu_side_injections(policy):
    """A launcher, a Ray head, a RayJob submitter: placement, RDMA, NCCL and storage go to GPU Pods only."""
    rayjob = gpu_job(document("operators/kuberay/examples/ray-job.pytorch-image-classifier.yaml", 0))
    head = rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["resources"]["limits"].pop("nvidia.com/gpu")
    d = decide(policy, Request(rayjob))
    head_spec = d.mutated["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    worker_spec = d.mutated["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert "nodeSelector" not in head_spec and "tolerations" not in head_spec
    assert worker_spec["nodeSelector"]["trainadmit.io/pool"] == "h100-ib"
    assert "rdma/rdma_shared_device_a" in worker_spec["containers"][0]["resources"]["limits"]
    assert "rdma/rdma_shared_device_a" not in head_spec["containers"][0]["resources"].get("limits", {})
    assert head_spec["priorityClassName"] == worker_spec["priorityClassName"]  # one priority for the whole job


def test_over_quota_pytorchjob_is_denied_with_advice(policy):
    """65 workers x 6 GPUs in a namespace allowed 32 GPUs per job (quota `teams`, team-vision)."""
    d = decide(policy, Request(pytorchjob(65, 6, "team-vision")))
    assert not d.allowed
    assert {"quota.gpus-per-job", "topology.whole-node"} <= rules_of(d)
    quota_msg = next(v for v in d.denials if v.rule == "quota.gpus-per-job")
    assert "396 GPUs" in quota_msg.message and "32 per job" in quota_msg.message and quota_msg.hint


def test_multi_node_worker_must_take_whole_nodes(policy):
    d = decide(policy, Request(pytorchjob(3, 6)))
    whole = [v for v in d.denials if v.rule == "topology.whole-node"]
    assert {v.path.split(".template")[0] for v in whole} == {"spec.pytorchReplicaSpecs.Master",
                                                             "spec.pytorchReplicaSpecs.Worker"}
    # Master 1 + Worker 3 Pods of 6 GPUs are 24 GPUs: 3 whole nodes, the Master's and 2 Workers'
    assert whole[0].hint == ('set spec.pytorchReplicaSpecs.Master.template.spec.containers[0].resources.limits'
                             '["nvidia.com/gpu"]: 8 and spec.pytorchReplicaSpecs.Worker.template.spec.containers[0]'
                             '.resources.limits["nvidia.com/gpu"]: 8 and spec.pytorchReplicaSpecs.Worker.replicas: 2')
    assert decide(policy, Request(pytorchjob(3, 8))).allowed


TRAINING_OPERATOR = {"username": "system:serviceaccount:kubeflow:training-operator"}
JOBSET_CONTROLLER = {"username": "system:serviceaccount:jobset-system:jobset-controller-manager"}
STATEFULSET_CONTROLLER = {"username": "system:serviceaccount:kube-system:statefulset-controller"}


def test_pods_and_child_jobs_of_handled_kinds_are_decided_at_their_parent(policy):
    """An operator copies the job's priorityClassName (or anything else) into its Pods: when the operator's
    own ServiceAccount (its install manifests') creates them, never a second decision, never a conflict."""
    decided = decide(policy, Request(pytorchjob(2, 8))).mutated
    template = decided["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": decided["metadata"]["name"],
             "uid": "u1", "controller": True}
    pod = {"apiVersion": "v1", "kind": "Pod", "spec": {**deep(template["spec"]), "priorityClassName": "other"},
           "metadata": {"name": "w-0", "namespace": "team-nlp", "ownerReferences": [owner],
                        "labels": {"training.kubeflow.org/job-name": decided["metadata"]["name"]}}}
    d = decide(policy, Request(deep(pod), user=TRAINING_OPERATOR))
    assert not d.matched and d.allowed and "PyTorchJob" in d.reason and TRAINING_OPERATOR["username"] in d.reason
    # a JobSet's child Job and an LWS worker Pod (owned by a StatefulSet, from a decided template)
    child_job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "js-w-0", "ownerReferences": [
        {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "js", "uid": "u2", "controller": True}]},
        "spec": {"parallelism": 4, "template": {"spec": {"containers": [
            {"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}
    assert not decide(policy, Request(deep(child_job), user=JOBSET_CONTROLLER)).matched
    lws_pod = deep(pod)
    lws_pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "vllm-0",
                                               "uid": "u3", "controller": True}]
    lws_pod["metadata"]["annotations"] = dict(template["metadata"]["annotations"])
    assert not decide(policy, Request(deep(lws_pod), user=STATEFULSET_CONTROLLER)).matched
    # the same Pod without trainadmit's provenance and with no handled owner is a Pod of its own
    lws_pod["metadata"].pop("annotations")
    assert decide(policy, Request(deep(lws_pod), user=STATEFULSET_CONTROLLER)).matched


def test_an_ownerreference_from_anyone_but_the_controller_is_decided(policy, tmp_path):
    """Anyone who may create Pods may write an ownerReference to their own Job: the reference alone proves
    nothing. The same children are decided as what they are when another user (or `check`, which knows no
    user) sends them, and a forged 8-GPU Pod is held to its own rules; a policy can name the account an
    operator really runs as."""
    decided = decide(policy, Request(pytorchjob(2, 8))).mutated
    template = decided["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": decided["metadata"]["name"],
             "uid": "u1", "controller": True}
    pod = {"apiVersion": "v1", "kind": "Pod", "spec": deep(template["spec"]),
           "metadata": {"name": "w-0", "namespace": "team-nlp", "ownerReferences": [owner],
                        "annotations": dict(template["metadata"]["annotations"])}}
    for user in ({}, {"username": "alice"}, JOBSET_CONTROLLER):
        assert decide(policy, Request(deep(pod), user=user)).matched, user
    job = document("real-world/k8s-website-indexed-job.yaml", 0)
    forged = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "extra", "namespace": "team-vision", "ownerReferences": [
            {"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"], "uid": "u", "controller": True}]},
        "spec": {**deep(job["spec"]["template"]["spec"]), "containers": [
            {"name": "c", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": 16}}}]}}
    d = decide(policy, Request(deep(forged), user={"username": "alice"}))
    assert d.matched and "topology.single-node-fit" in rules_of(d)  # 16 GPUs in one Pod: no node has them
    assert not decide(policy, Request(deep(forged), user={"username": "system:serviceaccount:kube-system:job-controller"})).matched
    renamed = load_policy(write_policy(tmp_path / "p", {"controllers": {
        "pytorchjobs.kubeflow.org": ["system:serviceaccount:ml-platform:my-training-operator"]}}))
    mine = {"username": "system:serviceaccount:ml-platform:my-training-operator"}
    assert not decide(renamed, Request(deep(pod), user=mine)).matched
    assert decide(policy, Request(deep(pod), user=mine)).matched  # not without the setting


def test_efa_worker_gets_no_infiniband(policy, tmp_path):
    mpijob = document("real-world/awsome-nccl-tests.yaml", 0)
    d = decide(policy, Request(deep(mpijob)))
    assert "intent.no-pool" in {v.rule for v in d.denials}
    assert "efa" in next(v.message for v in d.denials if v.rule == "intent.no-pool")
    text = str(d.mutated)
    assert "rdma/rdma_shared_device_a" not in text and "mlx5" not in text and "h100-ib" not in text
    ignore = load_policy(write_policy(tmp_path / "ignore", {"noPool": "ignore"}))
    left = decide(ignore, Request(deep(mpijob)))
    assert not left.matched and left.patch == [] and "efa" in left.reason


def test_gke_tcpxo_pods_and_a_cpu_job_with_zero_gpus_get_no_pool(policy):
    tcpxo = document("real-world/gke-cea-tcpxo-nccl-test-latest.yaml", 2)
    d = decide(policy, Request(deep(tcpxo)))
    assert "intent.no-pool" in {v.rule for v in d.denials} and "gke-tcpxo" in d.denial_message()
    cpu = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "tok", "namespace": "team-nlp"},
           "spec": {"template": {"spec": {"containers": [
               {"name": "c", "resources": {"limits": {"nvidia.com/gpu": 0, "cpu": "4"}}}]}}}}
    zero = decide(policy, Request(cpu))
    assert not zero.matched and zero.patch == []


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_a_jobset_of_4_by_4_is_one_gang_of_16(policies, backend):
    jobset = gpu_job(document("operators/jobset/examples/pytorch-cnn-mnist.yaml", 0))
    rjob = jobset["spec"]["replicatedJobs"][0]
    rjob["replicas"], rjob["template"]["spec"]["parallelism"], rjob["template"]["spec"]["completions"] = 4, 4, 4
    jobset["metadata"]["namespace"] = "research"  # no Quota: 128 GPUs is more than team-nlp may hold
    d = decide(policies[backend], Request(jobset))
    assert d.allowed, d.denial_message()
    assert d.summary["pods"] == 16
    template = d.mutated["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    if backend == "kueue":
        assert d.mutated["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] and d.mutated["spec"]["suspend"] is True
        assert "schedulingGroup" not in template["spec"]
        return
    [pg] = d.companions
    size = pg["spec"].get("minMember") or pg["spec"]["schedulingPolicy"]["gang"]["minCount"]
    assert size == 16
    if backend.startswith("native"):
        assert template["spec"]["schedulingGroup"] == {"podGroupName": f"{jobset['metadata']['name']}-gang"}
    elif backend == "coscheduling":
        assert template["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == jobset["metadata"]["name"]
    else:
        assert template["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == jobset["metadata"]["name"]


def test_operator_keys_per_backend(policies):
    """Where the operator reads gang, queue and priority: written there, nowhere else."""
    job = pytorchjob(2, 8)
    volcano = decide(policies["volcano"], Request(deep(job))).mutated
    assert volcano["spec"]["runPolicy"]["schedulingPolicy"] == {"minAvailable": 3, "queue": "training",
                                                                "priorityClass": "training-normal"}
    kueue = decide(policies["kueue"], Request(deep(job))).mutated
    assert kueue["spec"]["runPolicy"]["suspend"] is True and kueue["metadata"]["labels"][
        "kueue.x-k8s.io/queue-name"] == "team-queue"
    ray = gpu_job(document("operators/kuberay/examples/ray-cluster.volcano-scheduler-queue.yaml", 1))
    labels = decide(policies["volcano"], Request(ray)).mutated["metadata"]["labels"]
    assert labels["volcano.sh/queue-name"] == "kuberay-test-queue"  # the user's queue label is kept
    assert labels["ray.io/priority-class-name"] == "training-normal"
    vjob = gpu_job(document("operators/volcano/examples/mindspore-gpu.yaml", 0))
    d = decide(policies["native-job"], Request(vjob))
    spec = d.mutated["spec"]
    assert spec["minAvailable"] == 3 and spec["priorityClassName"] == "training-normal"
    # spec.queue: Volcano's CRD defaults it to "default" (crds/batch.volcano.sh_jobs.yaml), the queue wanted
    assert "queue" not in spec and "spec.queue: the Job CRD defaults it to default, the queue wanted" in d.summary["notes"]


def test_native_gang_where_the_crd_cannot_carry_it_is_a_note(policies):
    mpi = gpu_job(document("operators/kubeflow-mpi-operator/examples/tensorflow-benchmarks.yaml", 0))
    d = decide(policies["native-podgroup"], Request(mpi))
    assert "gang.unsupported" in {v.rule for v in d.notes} and d.companions == []
    assert "schedulingGroup" not in str(d.mutated)


def test_foreign_gang_backends_get_no_second_gang_and_no_gang_shape_rules(policy):
    sakkara = document("real-world/schedplugins-sakkara-job-a.yaml", 0)
    sakkara["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 8
    d = decide(policy, Request(deep(sakkara)))
    assert "gang.foreign-backend" in {v.rule for v in d.warnings}
    assert not {"gang.completion-mode", "gang.parallelism-completions"} & rules_of(d)
    assert "scheduling" not in d.mutated["spec"]


def test_custom_rules_can_target_operator_kinds(tmp_path):
    rule = {"apiVersion": "trainadmit.io/v1alpha1", "kind": "Rule", "metadata": {"name": "pytorch-owner"},
            "spec": {"kinds": ["PyTorchJob"], "validations": [
                {"expression": "has(object.metadata.labels) && 'owner' in object.metadata.labels",
                 "message": "PyTorchJobs need an owner label"}]}}
    policy = load_policy(write_policy(tmp_path / "ok", extra=[rule]))
    assert "custom.pytorch-owner" in rules_of(decide(policy, Request(pytorchjob(2, 8))))
    bad = copy.deepcopy(rule)
    bad["spec"]["kinds"] = ["PyTorchJobs"]
    with pytest.raises(PolicyError, match="not a kind trainadmit handles"):
        load_policy(write_policy(tmp_path / "bad", extra=[bad]))


def test_the_readme_operator_table_is_generated_from_the_adapters():
    from support.paths import ROOT

    from trainadmit.authoring.operators import BEGIN, END, operator_table_markdown

    text = (ROOT / "docs" / "workloads.md").read_text()
    assert text[text.index(BEGIN):text.index(END) + len(END)] + "\n" == operator_table_markdown()


def test_the_readme_resize_table_is_generated_from_the_adapters():
    from support.paths import ROOT

    from trainadmit.authoring.operators import RESIZE_BEGIN, RESIZE_END, resize_table_markdown

    text = (ROOT / "docs" / "workloads.md").read_text()
    assert text[text.index(RESIZE_BEGIN):text.index(RESIZE_END) + len(RESIZE_END)] + "\n" == resize_table_markdown()


def test_every_template_found_is_an_instance_of_a_declared_pattern():
    """The webhook's matchConditions are generated from the patterns; templates() must not find more."""
    def instance(path, pattern):
        return len(path) == len(pattern) and all(q in ("*", "[]") or p == q for p, q in zip(path, pattern, strict=True))

    for file, index, _, _ in EXPECTED:
        workload = workload_of(document(file, index))
        for template in workload.templates:
            assert any(instance(template.root, p) for p in workload.adapter.template_patterns), (file, template.root)


def test_trainjob_changes_go_where_trainer_reads_them(policies):
    """No pod template of its own: NCCL env and RDMA resources go to spec.trainer (patches may not
    carry them for the node container), everything else to trainadmit's own runtime patch; a user's
    patch is left as it was; Kueue gets its label and spec.suspend; nothing sets a PriorityClass."""
    original = gpu_job(document("operators/kubeflow-trainer-v2/examples/02-runtime-patches.yaml", 0))
    user_patch = deep(original["spec"]["runtimePatches"][0])
    d = decide(policies["kueue"], Request(deep(original)))
    spec = d.mutated["spec"]
    assert spec["runtimePatches"][0] == user_patch
    ours = spec["runtimePatches"][1]
    assert ours["manager"] == "trainadmit.io/admission"
    [node] = ours["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pod = node["template"]["spec"]["template"]
    assert node["name"] == "node" and pod["spec"]["nodeSelector"]["trainadmit.io/pool"] == "h100-ib"
    assert [c["name"] for c in pod["spec"]["containers"]] == ["node"]
    assert "env" not in pod["spec"]["containers"][0] and "resources" not in pod["spec"]["containers"][0]
    assert {e["name"] for e in spec["trainer"]["env"]} >= {"CUSTOM_VAR", "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME"}
    assert spec["trainer"]["resourcesPerNode"]["limits"]["rdma/rdma_shared_device_a"] == 1
    assert spec["suspend"] is True and d.mutated["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-queue"
    assert "priorityClassName" not in str(d.mutated)
    assert apply_patch(original, d.patch) == d.mutated
    assert decide(policies["kueue"], Request(deep(d.mutated))).patch == []


def test_volcano_jobs_crd_default_queue_counts_as_no_queue(policies):
    """Volcano's CRD defaults spec.queue to "default" before admission runs (the real-apiserver tier saw
    it): that value is the apiserver's, not a choice, so the policy's queue goes in; any other queue the
    user wrote is kept."""
    vjob = gpu_job(document("operators/volcano/examples/mindspore-gpu.yaml", 0))
    assert "queue" not in vjob["spec"]
    as_admitted = deep(vjob)
    as_admitted["spec"]["queue"] = "default"
    for obj in (vjob, as_admitted):
        assert decide(policies["volcano"], Request(deep(obj))).mutated["spec"]["queue"] == "training"
    chosen = deep(vjob)
    chosen["spec"]["queue"] = "research"
    assert decide(policies["volcano"], Request(chosen)).mutated["spec"]["queue"] == "research"
