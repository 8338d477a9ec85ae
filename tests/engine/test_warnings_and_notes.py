"""Warnings a user can act on, notes for what the platform decides: over the examples and the public manifests of
tests/fixtures (sources in SOURCES.md), on the bundled policy and one per gang backend, with and without a cluster
view. No warning or note contradicts the answer (nothing says "admitted" on a refusal); each says in one short
sentence what will happen, with its fix (the explanation is `check --explain`'s); what only the platform can change
is a note (``--strict`` does not fail on it; kubectl sees it prefixed "trainadmit note"), which the platform team
can also list once (``engine.platform.platform_notes``). ``hardware.matching-nodes`` never sends anyone to fix nodes
that already match; a Volcano task whose own minAvailable of 0 leaves its GPU workers out of the gang is told so.
"""

from __future__ import annotations

import copy

import pytest
from support.manifests import load_yaml
from support.paths import EXAMPLES, FIXTURES, POLICIES, ROOT
from support.policies import BACKENDS, write_policy

from trainadmit.authoring.explain import Explainer
from trainadmit.cluster.snapshot import SnapshotCluster
from trainadmit.engine import Request, decide, load_policy
from trainadmit.engine.platform import platform_notes
from trainadmit.engine.workloads import workload_of
from trainadmit.server.admission import decision_response

# what will happen, in one sentence a user reads at a glance; with its fix, well within the 1024 characters the
# server sends whole (server.admission): a warning's the user's own change, a note's the platform team's (which names
# the flags to start components with)
SENTENCE, WARNING, NOTE = 200, 300, 500


def _documents() -> list[tuple[str, dict]]:
    files = [*sorted(EXAMPLES.glob("*.yaml")), *sorted((FIXTURES / "real-world").glob("*.y*ml")),
             *sorted((FIXTURES / "operators").glob("*/examples/*.y*ml")), *sorted((FIXTURES / "dra").glob("**/*.y*ml"))]
    return [(f"{p.relative_to(ROOT)}#{i + 1}", d) for p in files for i, d in enumerate(load_yaml(p))
            if isinstance(d, dict) and workload_of(d) is not None]


DOCUMENTS = _documents()
HARDWARE = {"nvidia.com/gpu.count": "8", "nvidia.com/cuda.driver.major": "550",
            "feature.node.kubernetes.io/rdma.capable": "true"}
# a 1.36 cluster that serves no gang backend (`kubectl get --raw /apis`, `/version`)
NO_GANG = [{"kind": "APIGroupList", "groups": []}, {"major": "1", "minor": "36", "gitVersion": "v1.36.2"}]


def _node(name: str, rack: str, labels: dict | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"trainadmit.io/pool": "h100-ib", "topology.kubernetes.io/rack": rack,
                                                  "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", **HARDWARE,
                                                  **(labels or {})}},
            "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]}}


def _nodes(count: int, old_driver: int = 0) -> list[dict]:
    """``count`` healthy nodes in one rack, the last ``old_driver`` of them on driver 535 (the pool requires 550+)."""
    return [_node(f"n{i}", "rack-1", {"nvidia.com/cuda.driver.major": "535"} if i >= count - old_driver else None)
            for i in range(count)]


@pytest.fixture(scope="module")
def policies(tmp_path_factory):
    out = {"bundled": load_policy(POLICIES)}
    for name, platform in BACKENDS.items():
        out[name] = load_policy(write_policy(tmp_path_factory.mktemp(name), platform))
    return out


def _decided(policies):
    views = {"no view": None, "no gang backend": SnapshotCluster(NO_GANG),
             "4 nodes": SnapshotCluster([{"kind": "NodeList", "apiVersion": "v1", "items": _nodes(4, 1)}])}
    for policy_name, policy in policies.items():
        for view_name, view in views.items():
            for name, doc in DOCUMENTS:
                obj = copy.deepcopy(doc)
                obj.setdefault("metadata", {}).setdefault("name", "x")
                ns = obj["metadata"].get("namespace") or "default"
                yield f"{name} ({policy_name}, {view_name})", decide(policy, Request(obj, namespace=ns), view)


def test_no_warning_or_note_contradicts_the_answer_and_each_is_one_short_sentence(policies):
    problems, seen = [], set()
    for where, d in _decided(policies):
        for v in (*d.warnings, *d.notes):
            if v.rule.startswith("custom."):
                continue  # the policy's own words
            seen.add(v.rule)
            said = f"trainadmit [{v.rule}] {v.path}: {v.message}" + (f" ({v.hint})" if v.hint else "")
            if not d.allowed and "admitted" in said:
                problems.append(f"{where}: says admitted on a refusal: {said}")
            if len(v.message) > SENTENCE or len(said) > (NOTE if v in d.notes else WARNING):
                problems.append(f"{where}: {len(v.message)} / {len(said)} characters: {said}")
            if "; " in v.message or ". " in v.message:
                problems.append(f"{where}: more than one sentence: {v.message}")
    assert not problems, "\n".join(problems)
    # the walk reached the platform's notes and the user's warnings it is about
    assert {"topology.colocation-risk", "gang.unavailable", "gang.cluster-support", "gang.unsupported",
            "gang.foreign-backend", "gang.own-minimum"} <= seen, sorted(seen)


def test_what_only_the_platform_can_change_is_a_note_that_reaches_kubectl_marked_as_one(policies, tmp_path):
    """examples/llama-pretrain.yaml, 4 workers of 8 GPUs in one rack. On the bundled policy, which declares no
    TopologyAwareWorkloadScheduling: admitted with no warning and no note (the placement gate holds the rack). With
    required pod affinity, which the platform chose: a note that the gang may never start, which the AdmissionResponse
    carries as "trainadmit note ..."; `--explain` says why."""
    job = load_yaml(EXAMPLES / "llama-pretrain.yaml")[0]
    d = decide(policies["bundled"], Request(job))
    assert d.allowed and not d.warnings and not d.notes
    assert d.mutated["spec"]["template"]["spec"]["schedulingGates"] == [{"name": "trainadmit.io/placement"}]
    policy = load_policy(write_policy(tmp_path, {"gang": {"topologyMethod": "podAffinity"}}))
    d = decide(policy, Request(job))
    assert d.allowed and not d.warnings
    [note] = d.notes
    assert (note.rule, note.message) == (
        "topology.colocation-risk",
        "the gang may never start if its first worker lands in a rack too small for all 4 (required pod affinity)")
    [sent] = decision_response("uid", d, False)["response"]["warnings"]
    assert sent.startswith('trainadmit note [topology.colocation-risk] metadata.annotations["trainadmit.io/topology"]: '
                           "the gang may never start"), sent
    explained = Explainer(policy, POLICIES).violation(note, d, "team-nlp")
    assert "why: measured with kube-scheduler 1.36" in explained


def test_a_refusal_on_a_cluster_without_a_gang_backend_is_never_called_admitted(policies):
    """examples/denied-bigger-than-a-rack.yaml on a 1.36 cluster serving no gang backend: refused for its size, and
    told as a note that its Pods would start one by one (not that it was admitted without a gang)."""
    d = decide(policies["bundled"], Request(load_yaml(EXAMPLES / "denied-bigger-than-a-rack.yaml")[0]),
               SnapshotCluster(NO_GANG))
    assert not d.allowed
    [note] = [v for v in d.notes if v.rule == "gang.unavailable"]
    assert note.message.startswith("its 24 Pods may start one by one: no gang scheduler is served (Kubernetes v1.36.2")
    assert not any("admitted" in v.message for v in d.violations)


def test_the_platform_learns_its_notes_once(policies):
    """The bundled policy: without a view auto assumes 1.37 with its Workload API, and no topology gate is declared
    (the placement gate holds the rack: no note); on a cluster serving no gang backend, there is no gang."""
    assert platform_notes(policies["bundled"]) == ()
    assert [n.rule for n in platform_notes(policies["bundled"], SnapshotCluster(NO_GANG))] == ["gang.unavailable"]
    assert platform_notes(policies["native-job"]) == ()  # 1.37 with every gate its native gang needs


def test_matching_nodes_names_only_the_nodes_and_labels_that_lack_something(policies):
    """8 healthy nodes that all carry the pool's required labels, and a gang of 9: the pool is too small
    (quota.pool-capacity), no node is to be brought up to labels it has. 4 nodes of which one runs driver 535, and a
    gang of 4: only that node and only the driver label are named."""
    job = load_yaml(EXAMPLES / "llama-pretrain.yaml")[0]
    job["metadata"].setdefault("annotations", {})["trainadmit.io/topology"] = "any"
    nine = copy.deepcopy(job)
    nine["spec"].update(parallelism=9, completions=9)
    full = SnapshotCluster([{"kind": "NodeList", "apiVersion": "v1", "items": _nodes(8)}])
    d = decide(policies["bundled"], Request(nine), full)
    assert "quota.pool-capacity" in {v.rule for v in d.denials}
    assert "hardware.matching-nodes" not in {v.rule for v in d.violations}
    one_old = SnapshotCluster([{"kind": "NodeList", "apiVersion": "v1", "items": _nodes(4, old_driver=1)}])
    [v] = [v for v in decide(policies["bundled"], Request(job), one_old).denials if v.rule == "hardware.matching-nodes"]
    assert v.message == ("needs 4 nodes of pool h100-ib with its required node labels, and 3 of its 4 nodes have them "
                         "(nvidia.com/cuda.driver.major > 549 holds on 3)")
    assert v.hint == ("set spec.parallelism: 3 and spec.completions: 3, or ask the platform team to bring the other "
                      "node up to nvidia.com/cuda.driver.major > 549")


def test_a_volcano_task_whose_own_minimum_is_zero_is_told_its_gpu_workers_are_out_of_the_gang(policies):
    """OCI's Volcano nccl-test: minAvailable 0 on the job and on its mpiworker task of 2 GPU workers; Volcano's
    webhook makes the job's minimum 1 (the master), so the workers are placed one by one: a note, with the fix."""
    d = decide(policies["bundled"], Request(load_yaml(FIXTURES / "real-world" / "oci-volcano-BM.GPU.H100.8-nccl-test.yaml")[0]))
    [note] = [v for v in d.notes if v.rule == "gang.own-minimum"]
    assert (note.path, note.message) == ("spec.tasks[1].minAvailable", "its 2 GPU workers may start one by one: "
                                         "spec.tasks[1].minAvailable: 0 leaves them out of the gang")
    assert [(f.field, f.value) for f in note.fix] == [("spec.tasks[1].minAvailable", 2)]
