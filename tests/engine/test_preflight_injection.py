"""Admission side of the preflight: a pool's required node labels become required node affinity (and,
with a cluster view, too few matching nodes a denial naming the label), and a pool with the preflight
on gets the init container, its arguments derived from the policy and the decision."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
import yaml
from support.builders import job, rules_of
from support.cli import run_cli
from support.fake_node import build_node
from support.manifests import deep, load_yaml
from support.operators import document, gpu_job, pytorchjob
from support.paths import EXAMPLES, FIXTURES, POLICIES
from support.policies import write_policy
from support.schemas import schema_errors

from trainadmit.cluster.snapshot import SnapshotCluster
from trainadmit.engine import Request, decide, load_policy
from trainadmit.grammars.preflight import CONTAINER_NAME, parse_args
from trainadmit.policy import PolicyError
from trainadmit.preflight import Host, run

POOLS = {d["metadata"]["name"]: d["spec"] for d in load_yaml(POLICIES / "pools.yaml")}
STORAGE = {(d["kind"], d["metadata"]["name"]): d["spec"] for d in load_yaml(POLICIES / "storage.yaml")}
PLATFORM = load_yaml(POLICIES / "platform.yaml")[0]["spec"]


def _check_yaml(path) -> tuple[int, dict]:
    r = run_cli("check", str(path), "-o", "yaml", "-p", str(POLICIES))
    return r.returncode, next(d for d in yaml.safe_load_all(r.stdout) if d and d.get("kind") == "Job")


def _preflight(pod_spec: dict) -> dict | None:
    return next((c for c in pod_spec.get("initContainers") or [] if c["name"] == CONTAINER_NAME), None)


def test_check_yaml_of_a_bundled_rdma_job_shows_the_preflight_and_the_required_labels():
    source = load_yaml(EXAMPLES / "llama-pretrain.yaml")[0]
    code, mutated = _check_yaml(EXAMPLES / "llama-pretrain.yaml")
    assert code == 0 and schema_errors(mutated) == []
    pool = POOLS[source["metadata"]["labels"]["trainadmit.io/pool"]]
    spec = mutated["spec"]["template"]["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": pool["requiredNodeLabels"]}]

    container = _preflight(spec)
    assert container is not None and container["image"] == pool["preflight"]["image"]
    assert container["args"][0] == "preflight"
    gpus = source["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    workers = source["spec"]["parallelism"]
    dataset = STORAGE[("Dataset", source["metadata"]["annotations"]["trainadmit.io/datasets"])]
    checkpoint = STORAGE[("CheckpointClass", source["metadata"]["annotations"]["trainadmit.io/checkpoint"])]
    expected = {f"--timeout={pool['preflight']['timeoutSeconds']}", f"--gpus={gpus}", "--gpu-vendor=nvidia",
                "--rdma-link-layer=InfiniBand", "--active-ports",
                f"--nccl-ib-hca={pool['nccl']['env']['NCCL_IB_HCA']}",
                f"--nccl-socket-ifname={pool['nccl']['env']['NCCL_SOCKET_IFNAME']}",
                f"--shm-size={PLATFORM['shm']['sizeLimit']}", f"--dataset={dataset['mountPath']}",
                f"--checkpoint={checkpoint['mountPath']}", f"--gang-size={workers}",
                f"--gang-id={source['metadata']['namespace']}/{source['metadata']['name']}"}
    assert set(container["args"][1:]) == expected
    limits = container["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == gpus and all(limits[r] == n for r, n in pool["rdma"]["resources"].items())
    assert container["resources"]["requests"]["nvidia.com/gpu"] == gpus  # the kubelet hands them on: no extra GPUs
    trainer_mounts = {m["mountPath"]: m for m in spec["containers"][0]["volumeMounts"]}
    assert {m["mountPath"]: m for m in container["volumeMounts"]} == {
        p: trainer_mounts[p] for p in (dataset["mountPath"], checkpoint["mountPath"], "/dev/shm")}
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env == {"NODE_NAME": "spec.nodeName", "POD_NAME": "metadata.name",
                   "TRAINADMIT_GANG_RUN": "metadata.labels['batch.kubernetes.io/controller-uid']"}
    assert mutated["spec"]["template"]["metadata"]["labels"]["trainadmit.io/preflight"] == "true"


def test_a_job_on_a_pool_without_preflight_gets_neither():
    source = load_yaml(EXAMPLES / "bert-finetune-ethernet.yaml")[0]
    pool = POOLS[source["metadata"]["labels"]["trainadmit.io/pool"]]
    assert not pool.get("preflight", {}).get("enabled") and not pool.get("requiredNodeLabels")
    code, mutated = _check_yaml(EXAMPLES / "bert-finetune-ethernet.yaml")
    assert code == 0
    spec = mutated["spec"]["template"]["spec"]
    assert "initContainers" not in spec and "nodeAffinity" not in spec.get("affinity", {})
    assert "trainadmit.io/preflight" not in (mutated["spec"]["template"].get("metadata", {}).get("labels") or {})


def test_the_injected_arguments_are_what_the_preflight_runs_on_a_matching_node(policy, tmp_path):
    d = decide(policy, Request(load_yaml(EXAMPLES / "llama-pretrain.yaml")[0]))
    container = _preflight(d.mutated["spec"]["template"]["spec"])
    expect = parse_args(container["args"][1:])
    node = build_node(tmp_path, datasets={"/datasets/c4": {"part-0": b"PAR1"}})
    small = dataclasses.replace(expect, shm_size="1Mi", gang_size=1)  # this machine's /dev/shm; one worker here
    result, _ = run(small, Host(root=node, node="n"))
    assert result.ok, result  # every argument the engine writes, the preflight reads and checks
    assert list(result.passed) == ["gpus", "rdma", "ports", "nccl", "shm", "datasets", "checkpoint", "gang"]


def test_operator_templates_get_it_with_the_gang_of_all_their_gpu_pods(policy):
    d = decide(policy, Request(pytorchjob(3, 8)))
    assert d.allowed, d.denials
    specs = d.mutated["spec"]["pytorchReplicaSpecs"]
    for role in ("Master", "Worker"):
        container = _preflight(specs[role]["template"]["spec"])
        assert container is not None, role
        assert "--gang-size=4" in container["args"]  # 1 master + 3 workers
        assert all(e["name"] != "TRAINADMIT_GANG_RUN" for e in container["env"])  # no run label on its Pods


def test_a_trainjob_cannot_take_it_and_is_told_so_but_still_gets_the_required_labels(policy):
    """A TrainJob's runtime patches may only change init containers its runtime already has."""
    d = decide(policy, Request(gpu_job(document("operators/kubeflow-trainer-v2/examples/01-multi-node.yaml", 0))))
    [note] = [v for v in d.notes if v.rule == "preflight.unavailable"]  # its runtime's, not the TrainJob's to fix
    assert note.message == ("this TrainJob starts on nodes nobody checked: a TrainJob cannot add pool h100-ib's "
                            "preflight init container")
    spec = d.mutated["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0][
        "template"]["spec"]["template"]["spec"]
    assert "initContainers" not in spec
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": POOLS["h100-ib"]["requiredNodeLabels"]}]


def test_mutation_is_idempotent_and_survives_apiserver_defaults(policy):
    d = decide(policy, Request(job()))
    again = decide(policy, Request(deep(d.mutated)))
    assert again.patch == []
    stored = deep(d.mutated)
    container = _preflight(stored["spec"]["template"]["spec"])
    container.update(terminationMessagePolicy="FallbackToLogsOnError", imagePullPolicy="IfNotPresent")
    container["resources"]["limits"] = {k: str(v) for k, v in container["resources"]["limits"].items()}
    final = decide(policy, Request(stored, phase="validate"))
    assert final.allowed, final.denials
    lost = deep(d.mutated)
    del lost["spec"]["template"]["spec"]["initContainers"]  # another webhook removed it
    assert "final.injection-lost" in rules_of(decide(policy, Request(lost, phase="validate")))


def test_an_init_container_of_the_reserved_name_is_denied(policy):
    theirs = {"name": CONTAINER_NAME, "image": "busybox", "command": ["true"]}
    d = decide(policy, Request(job(extra_spec={"initContainers": [theirs]})))
    v = next(v for v in d.denials if v.rule == "preflight.reserved-name")
    assert v.path == "spec.template.spec.initContainers[0].name"
    assert d.mutated["spec"]["template"]["spec"]["initContainers"] == [theirs]  # not replaced silently


def _with_pool(tmp_path, change) -> object:
    directory = write_policy(tmp_path / "p")
    docs = load_yaml(directory / "pools.yaml")
    change(next(d for d in docs if d["metadata"]["name"] == "h100-ib")["spec"])
    (directory / "pools.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return directory


def test_skipped_checks_leave_their_arguments_and_mounts_out(tmp_path):
    policy = load_policy(_with_pool(tmp_path, lambda s: s["preflight"].update(skip=["gang", "ports", "shm"])))
    d = decide(policy, Request(load_yaml(EXAMPLES / "llama-pretrain.yaml")[0]))
    container = _preflight(d.mutated["spec"]["template"]["spec"])
    flags = {a.split("=")[0] for a in container["args"][1:]}
    assert not flags & {"--gang-size", "--gang-id", "--active-ports", "--shm-size"}
    assert "--rdma-link-layer" in flags and "/dev/shm" not in {m["mountPath"] for m in container["volumeMounts"]}


@pytest.mark.parametrize(("change", "message"), [
    (lambda s: s["preflight"].pop("image"), "set image (the webhook's own image) when the preflight is enabled"),
    (lambda s: s["requiredNodeLabels"].append({"key": "nvidia.com/cuda.driver.major", "operator": "Gt",
                                                "values": ["5x"]}), "Gt needs exactly one integer value"),
    (lambda s: s["requiredNodeLabels"].append({"key": "nvidia.com/gpu.product", "operator": "In",
                                                "values": ["NVIDIA-A100-SXM4-80GB"]}),
     "excludes nodeSelector nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3: no node could be in the pool"),
    (lambda s: s["preflight"].update(skip=["gpu"]), "spec.preflight.skip[0]: Input should be 'gpus'"),
])
def test_policy_mistakes_are_load_errors(tmp_path, change, message):
    with pytest.raises(PolicyError) as err:
        load_policy(_with_pool(tmp_path, change))
    assert message in str(err.value)


def _nodes(driver_by_node: dict[str, str]) -> SnapshotCluster:
    """The captured NodeList with the labels GFD and NFD would add; ``driver_by_node`` sets the driver."""
    listed = json.loads((FIXTURES / "apiserver" / "nodes-list.json").read_text())
    listed = copy.deepcopy(listed)
    for node in listed["items"]:
        labels = node["metadata"]["labels"]
        if labels.get("trainadmit.io/pool") == "h100-ib":
            labels["feature.node.kubernetes.io/rdma.capable"] = "true"
            labels["nvidia.com/cuda.driver.major"] = driver_by_node.get(node["metadata"]["name"], "550")
    return SnapshotCluster([listed])


def test_a_gang_too_few_matching_nodes_can_hold_is_denied_naming_the_label(policy):
    names = [n["metadata"]["name"] for n in json.loads((FIXTURES / "apiserver" / "nodes-list.json").read_text())
             ["items"] if n["metadata"]["labels"].get("trainadmit.io/pool") == "h100-ib"]
    assert len(names) == 4
    cluster = _nodes({names[0]: "535", names[1]: "535"})  # two nodes still run driver 535
    any_topology = {"trainadmit.io/topology": "any"}
    d = decide(policy, Request(job(workers=3, annotations=any_topology)), cluster)
    v = next(v for v in d.denials if v.rule == "hardware.matching-nodes")
    assert v.message == ("needs 3 nodes of pool h100-ib with its required node labels, and 2 of its 4 nodes have them "
                         "(nvidia.com/cuda.driver.major > 549 holds on 2)")
    # the captured nodes are all NotReady (capacity.unusable-nodes): no count of workers passes every size rule, so
    # the fix names the nodes only, and only the two that lack the label
    assert v.hint == "ask the platform team to bring the other 2 nodes up to nvidia.com/cuda.driver.major > 549"
    assert not v.fix
    assert "hardware.matching-nodes" not in rules_of(decide(policy, Request(job(workers=2, annotations=any_topology)),
                                                            cluster))
    cluster.put_node({"metadata": {"name": names[0], "labels": {
        **next(n for n in json.loads((FIXTURES / "apiserver" / "nodes-list.json").read_text())["items"]
               if n["metadata"]["name"] == names[0])["metadata"]["labels"],
        "feature.node.kubernetes.io/rdma.capable": "true", "nvidia.com/cuda.driver.major": "550"}}})
    assert "hardware.matching-nodes" not in rules_of(decide(policy, Request(job(workers=3, annotations=any_topology)),
                                                            cluster))  # the upgraded node counts at once


def test_without_a_cluster_view_and_for_user_affinity(policy):
    assert "hardware.matching-nodes" not in rules_of(decide(policy, Request(job(workers=16))))
    theirs = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In",
                                                           "values": ["a"]}]},
                                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}
    d = decide(policy, Request(job(extra_spec={"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": theirs}}})))
    terms = d.mutated["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    required = POOLS["h100-ib"]["requiredNodeLabels"]
    assert terms[0]["matchExpressions"] == theirs["nodeSelectorTerms"][0]["matchExpressions"] + required
    assert terms[1] == {**theirs["nodeSelectorTerms"][1], "matchExpressions": required}  # ANDed into every term
    d = decide(policy, Request(job(extra_spec={"nodeSelector": {"nvidia.com/cuda.driver.major": "535"}})))
    v = next(v for v in d.denials if v.rule == "placement.contradiction")
    assert "nvidia.com/cuda.driver.major > 549" in v.message
    bad = decide(policy, Request(job(extra_spec={"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": "zone-a"}}}})))
    assert [v.path for v in bad.denials if v.rule == "object.malformed"] == [
        "spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"]


def test_the_preflight_image_is_the_webhooks_own():
    deployment = next(d for d in load_yaml(POLICIES.parent / "deploy" / "base" / "deployment.yaml")
                      if d["kind"] == "Deployment")
    assert POOLS["h100-ib"]["preflight"]["image"] == deployment["spec"]["template"]["spec"]["containers"][0]["image"]
