"""What the policy leaves to ``auto``, chosen from the cluster it finds, and what an explicit setting the cluster
cannot honour does: decided on the `/version` and `/apis` a real 1.36.2 apiserver returned, plain and started
with the Workload API (tests/fixtures/apiserver), and on what Volcano's, scheduler-plugins' and Kueue's CRDs add
to them. The expected backend for each is written down from the rules docs/install.md states, not read off the
code."""

from __future__ import annotations

import json

import pytest
import yaml
from support.builders import job, rules_of, with_gpus
from support.cli import run_cli
from support.manifests import deep, load_yaml
from support.paths import EXAMPLES, FIXTURES, POLICIES
from support.policies import BACKENDS, write_policy

from trainadmit.cluster.index import ClusterIndex
from trainadmit.cluster.snapshot import SnapshotCluster
from trainadmit.engine import Request, decide, load_policy
from trainadmit.engine.target import choose
from trainadmit.server.admission import decision_response
from trainadmit.server.decisions import DecisionCache

API = FIXTURES / "apiserver"
LLAMA = load_yaml(EXAMPLES / "llama-pretrain.yaml")[0]


def _doc(name: str) -> dict:
    return json.loads((API / name).read_text())


def discovery(*extra: str, apis: str = "apis-1.36-plain.json", version: bool = True) -> list[dict]:
    """What `kubectl get --raw /apis` and `/version` print, with the group/versions a backend's CRDs add."""
    docs = [_doc(apis)]
    if extra:
        docs.append({"kind": "APIGroupList", "groups": [{"versions": [{"groupVersion": v} for v in extra]}]})
    return [*docs, _doc("version-1.36.json")] if version else docs


def view(*extra: str, **kw) -> SnapshotCluster:
    return SnapshotCluster(discovery(*extra, **kw))


@pytest.fixture(scope="module")
def bundled():
    return load_policy(POLICIES)


def test_the_real_apiservers_discovery_reads_as_its_version_and_apis():
    plain, gated = view(), view(apis="apis-1.36-workload-api.json")
    assert plain.discovered().version == (1, 36) and plain.discovered().git_version == "v1.36.2"
    assert plain.serves("scheduling.k8s.io/v1") and not plain.serves("scheduling.k8s.io/v1alpha2")
    assert gated.serves("scheduling.k8s.io/v1alpha2")
    # `kubectl version -o json` works as well as /version
    kubectl = {"clientVersion": {"major": "1", "minor": "32"}, "serverVersion": _doc("version-1.36.json")}
    assert SnapshotCluster([_doc("apis-1.36-plain.json"), kubectl]).discovered().version == (1, 36)


@pytest.mark.parametrize("extra, apis, expected", [
    ((), "apis-1.36-plain.json", "none"),
    ((), "apis-1.36-workload-api.json", "native/pod-group"),  # 1.36 has no Job.spec.scheduling
    (("scheduling.volcano.sh/v1beta1", "scheduling.x-k8s.io/v1alpha1", "kueue.x-k8s.io/v1beta1"),
     "apis-1.36-plain.json", "volcano"),
    (("scheduling.x-k8s.io/v1alpha1", "kueue.x-k8s.io/v1beta2"), "apis-1.36-plain.json", "coscheduling"),
    (("kueue.x-k8s.io/v1beta2",), "apis-1.36-plain.json", "kueue"),
    (("scheduling.volcano.sh/v1beta1",), "apis-1.36-workload-api.json", "native/pod-group"),  # native first
    # KAI's Queue and PodGroup CRDs (fixtures/operators/kai/crds): KAI, before Volcano
    (("scheduling.run.ai/v2", "scheduling.run.ai/v2alpha2", "scheduling.volcano.sh/v1beta1"), "apis-1.36-plain.json",
     "kai"),
    (("scheduling.run.ai/v2",), "apis-1.36-workload-api.json", "native/pod-group"),
])
def test_auto_takes_the_first_backend_the_cluster_serves(bundled, extra, apis, expected):
    d = decide(bundled, Request(deep(LLAMA)), view(*extra, apis=apis))
    assert d.summary["gang"] == expected


def test_the_bundled_default_on_a_plain_136_apiserver_admits_without_a_gang_naming_what_is_missing(bundled):
    d = decide(bundled, Request(deep(LLAMA)), view())
    assert d.allowed and d.summary["gang"] == "none" and not d.companions
    [v] = [v for v in d.violations if v.rule == "gang.unavailable"]
    assert v.action.value == "note" and v.path == "metadata"  # the platform's to change
    assert v.message == ("its 4 Pods may start one by one: no gang scheduler is served (Kubernetes v1.36.2: no "
                         "scheduling.k8s.io/v1alpha2, no KAI Scheduler, Volcano, scheduler-plugins or Kueue CRDs)")
    assert "--feature-gates=GenericWorkload=true --runtime-config=scheduling.k8s.io/v1alpha2=true" in v.hint
    assert "GangScheduling=true" in v.hint and v.hint.endswith("or install one of those")
    # kubectl shows the whole of it: the server's bound on a warning's length cuts nothing
    [text] = [w for w in decision_response("u", d, True)["response"]["warnings"] if "[gang.unavailable]" in w]
    assert text.endswith(f"({v.hint})"), text
    spec = d.mutated["spec"]
    assert "scheduling" not in spec and "schedulingGroup" not in spec["template"]["spec"]
    # everything else the policy injects is there
    assert spec["template"]["spec"]["nodeSelector"]["trainadmit.io/pool"] == "h100-ib"
    assert spec["template"]["spec"]["priorityClassName"] == "training-high"
    # the same Job's shape rules still hold it (the verdict does not change with the cluster)
    bad = deep(LLAMA)
    bad["spec"]["completionMode"] = "NonIndexed"
    assert "gang.completion-mode" in rules_of(decide(bundled, Request(bad), view()))


KAI_SERVED = ("scheduling.run.ai/v2", "scheduling.run.ai/v2alpha2", "kai.scheduler/v1alpha1")  # its three CRDs


def test_the_bundled_default_on_a_cluster_serving_kais_crds_gangs_a_multi_node_gpu_job_through_kai(bundled):
    """A plain 1.36 apiserver (no Workload API) with KAI Scheduler's CRDs (Queue scheduling.run.ai/v2, PodGroup
    v2alpha2, Topology kai.scheduler/v1alpha1: fixtures/operators/kai/crds), and the Kubernetes docs' Indexed Job
    with 8 GPUs in each of its 3 Pods: auto chooses KAI, and the Job gets what KAI's podgrouper reads
    (fixtures/operators/kai/README.md): the queue label on the Job, KAI's default leaf queue default-queue since
    neither the Job nor the bundled policy names one; the gang's minimum as kai.scheduler/batch-min-member (KAI
    gives a Job one Pod otherwise); schedulerName kai-scheduler. No native gang and no gang.unavailable. The
    bundled policy names no KAI Topology, so the rack is held by the placement gate (KAI still forms the gang; the
    ungater chooses the rack): no pod affinity and no topology.colocation-risk (it used to be required pod
    affinity and the risk note)."""
    [obj] = [d for d in load_yaml(FIXTURES / "real-world" / "k8s-website-indexed-job.yaml") if d.get("kind") == "Job"]
    obj = with_gpus(obj, 8)
    obj["spec"]["completions"] = obj["spec"]["parallelism"]  # 3: a gang Job runs its Pods at once
    d = decide(bundled, Request(obj, namespace="team-nlp"), view(*KAI_SERVED))
    assert d.allowed, [v.text() for v in d.violations]
    assert d.summary["gang"] == "kai" and "gang.unavailable" not in rules_of(d)
    m = d.mutated
    assert m["metadata"]["labels"]["kai.scheduler/queue"] == "default-queue"
    assert m["metadata"]["annotations"]["kai.scheduler/batch-min-member"] == "3"
    pod = m["spec"]["template"]["spec"]
    assert pod["schedulerName"] == "kai-scheduler"
    assert "scheduling" not in m["spec"] and "schedulingGroup" not in pod and d.companions == []
    assert pod["schedulingGates"] == [{"name": "trainadmit.io/placement"}]
    assert "podAffinity" not in (pod.get("affinity") or {}) and "topology.colocation-risk" not in rules_of(d)
    # the same cluster with the Workload API on: native comes first
    gated = decide(bundled, Request(deep(obj), namespace="team-nlp"), view(*KAI_SERVED,
                                                                        apis="apis-1.36-workload-api.json"))
    assert gated.summary["gang"] == "native/pod-group" and "kai.scheduler/queue" not in gated.mutated["metadata"].get(
        "labels", {})


def test_a_platform_that_wants_no_gangless_gpu_job_sets_the_rule_to_deny(tmp_path):
    strict = load_policy(write_policy(tmp_path, {"rules": {"storage.shm-exceeds-memory": "warn",
                                                           "gang.unavailable": "deny"}}))
    d = decide(strict, Request(deep(LLAMA)), view())
    assert not d.allowed and [v.rule for v in d.denials] == ["gang.unavailable"]


def test_the_bundled_default_with_the_workload_api_gets_the_native_gang_of_that_version(bundled):
    d = decide(bundled, Request(deep(LLAMA)), view(apis="apis-1.36-workload-api.json"))
    assert d.allowed and d.summary["gang"] == "native/pod-group"
    assert d.mutated["spec"]["template"]["spec"]["schedulingGroup"] == {"podGroupName": "llama-pretrain-gang"}
    [pg] = d.companions
    assert pg["apiVersion"] == "scheduling.k8s.io/v1alpha2" and pg["spec"]["schedulingPolicy"] == {
        "gang": {"minCount": 4}}
    assert "priorityClassName" not in pg["spec"]  # 1.36 without WorkloadAwarePreemption declared drops it
    warned = {v.rule: v.message for v in d.notes}  # the platform's: notes
    # discovery cannot see the scheduler's gates: enforcement on 1.36 needs GangScheduling, said until declared
    assert "GangScheduling" in warned["gang.cluster-support"]
    assert "topology.colocation-risk" not in warned  # the placement gate holds the rack instead
    assert d.mutated["spec"]["template"]["spec"]["schedulingGates"] == [{"name": "trainadmit.io/placement"}]
    # the cluster view answered what the gang needs (the snapshot has no lists of the objects the Job names)
    assert not [u for u in d.unverified if "gang backend" in u or u.startswith("API ")], d.unverified


def test_the_issues_explicit_137_job_scheduling_policy_on_a_136_cluster_is_never_written_and_said_why(tmp_path):
    """The old bundled default (1.37, job-scheduling, its gates) against a 1.36 apiserver serving the Workload
    API: the decision used to inject Job.spec.scheduling, which that apiserver drops, and /validate then refused
    every gang Job. Now the gang is left out with the reason (the field is 1.37's), and nothing is injected."""
    policy = load_policy(write_policy(tmp_path, BACKENDS["native-job"]))
    d = decide(policy, Request(deep(LLAMA)), view(apis="apis-1.36-workload-api.json"))
    assert d.allowed and "scheduling" not in d.mutated["spec"]
    [v] = [v for v in d.violations if v.rule == "gang.unavailable"]
    assert "Job.spec.scheduling, which Kubernetes 1.36 does not have (it first exists in 1.37)" in v.message
    assert "nativeMode: auto or pod-group" in v.hint
    target = choose(policy.platform, view(apis="apis-1.36-workload-api.json").discovered())
    assert [(u.setting, u.message) for u in target.unhonoured] == [
        ("kubernetesVersion", "Platform.spec.kubernetesVersion is 1.37; the cluster runs 1.36 (v1.36.2): decisions "
                              "follow the cluster"),
        ("gang.nativeMode", "Platform.spec.gang.nativeMode is job-scheduling; nativeMode job-scheduling writes "
                            "Job.spec.scheduling, which Kubernetes 1.36 does not have (it first exists in 1.37)")]


def test_an_explicit_backend_the_cluster_does_not_serve_is_reported_and_left_out(tmp_path):
    volcano = load_policy(write_policy(tmp_path, BACKENDS["volcano"]))
    target = choose(volcano.platform, view().discovered())
    assert target.backend is None and [u.setting for u in target.unhonoured] == ["gang.backend"]
    assert target.unhonoured[0].message == ("Platform.spec.gang.backend is volcano; the gang backend volcano needs "
                                            "scheduling.volcano.sh/v1beta1 (Volcano), which this cluster does not "
                                            "serve")
    d = decide(volcano, Request(deep(LLAMA)), view())
    assert d.allowed and "gang.unavailable" in rules_of(d) and d.summary["gang"] == "none"
    # installed: honoured
    assert choose(volcano.platform, view("scheduling.volcano.sh/v1beta1").discovered()).unhonoured == ()


def test_a_declared_gate_the_cluster_shows_off_is_reported(tmp_path):
    policy = load_policy(write_policy(tmp_path, {"featureGates": ["GenericWorkload"]}))
    target = choose(policy.platform, view().discovered())
    assert [u.setting for u in target.unhonoured] == ["featureGates"]
    assert "the cluster serves no scheduling.k8s.io/v1alpha2, so its Workload API is off" in target.unhonoured[0].message


def test_native_mode_auto_uses_the_job_controller_on_137_only_when_workload_with_job_is_declared(tmp_path):
    served_137 = [{"kind": "APIGroupList", "groups": [{"versions": [{"groupVersion": "scheduling.k8s.io/v1beta1"}]}]},
                  {"major": "1", "minor": "37", "gitVersion": "v1.37.0"}]
    bundled = load_policy(POLICIES)
    declared = load_policy(write_policy(tmp_path, {"featureGates": ["WorkloadWithJob"]}))
    assert decide(bundled, Request(deep(LLAMA)), SnapshotCluster(served_137)).summary["gang"] == "native/pod-group"
    d = decide(declared, Request(deep(LLAMA)), SnapshotCluster(served_137))
    assert d.summary["gang"] == "native/job-scheduling"
    assert d.mutated["spec"]["scheduling"]["schedulingPolicy"] == {"gang": {"minCount": 4}}


def test_a_snapshot_without_version_takes_it_from_the_native_api_it_serves(bundled):
    d = decide(bundled, Request(deep(LLAMA)), view(apis="apis-1.36-workload-api.json", version=False))
    assert d.companions[0]["apiVersion"] == "scheduling.k8s.io/v1alpha2"


def test_without_discovery_auto_assumes_137_with_its_workload_api_and_says_so(bundled):
    d = decide(bundled, Request(deep(LLAMA)))
    assert d.summary["gang"] == "native/pod-group" and d.companions[0]["apiVersion"] == "scheduling.k8s.io/v1beta1"
    assert d.unverified[0] == ("the gang backend native/pod-group (without the cluster's discovery (/version, /apis) "
                               "auto assumed Kubernetes 1.37 with its Workload API (scheduling.k8s.io/v1beta1) served)")


def test_a_gangless_indexed_job_on_136_with_workload_with_job_declared_is_told_it_gets_a_gang_anyway(tmp_path):
    """Measured on 1.36.2: with WorkloadWithJob the Job controller gangs every Indexed Job whose parallelism
    equals its completions (> 1), whatever trainadmit.io/gang says."""
    policy = load_policy(write_policy(tmp_path, {"featureGates": ["WorkloadWithJob", "GangScheduling"]}))
    gangless = job(workers=4, annotations={"trainadmit.io/gang": "false"})
    d = decide(policy, Request(gangless), view(apis="apis-1.36-workload-api.json"))
    [v] = [v for v in d.notes if v.rule == "gang.cluster-support"]
    assert "the 4 Pods of this Job wait for one another although it asks for no gang" in v.message
    assert v.path == "spec.completions"
    # completions above parallelism: the controller makes no gang, and nothing is said
    other = job(workers=4, annotations={"trainadmit.io/gang": "false"})
    other["spec"]["completions"] = 5
    assert "gang.cluster-support" not in rules_of(decide(policy, Request(other),
                                                         view(apis="apis-1.36-workload-api.json")))


def test_the_servers_remembered_decision_follows_a_change_of_what_the_cluster_serves(bundled):
    """Discovery is a question the decision asks the view: a remembered decision is reused only while its
    answer is unchanged (an operator's CRD installed later changes the backend at once)."""
    cluster = ClusterIndex()
    cluster.set_served(set(json.loads(json.dumps([v["groupVersion"] for g in _doc("apis-1.36-plain.json")["groups"]
                                                  for v in g["versions"]]))), (1, 36), "v1.36.2")
    cache = DecisionCache(bundled)
    first = cache.decide(Request(deep(LLAMA)), cluster)
    assert "gang.unavailable" in {v.rule for v in first.violations}
    cluster.set_served({*cluster.discovered().api_versions, "scheduling.volcano.sh/v1beta1"}, (1, 36), "v1.36.2")
    second = cache.decide(Request(deep(LLAMA)), cluster)
    assert "gang.unavailable" not in {v.rule for v in second.violations}
    assert "/metadata/annotations/scheduling.volcano.sh~1group-min-member" in (second.patch_json or "")
    assert cache.misses == 2 and cache.hits == 0


def test_check_with_a_snapshot_of_the_plain_apiserver_prints_the_warning_and_no_gang(tmp_path):
    src = tmp_path / "snap.yaml"
    src.write_text(yaml.safe_dump_all(discovery()))
    r = run_cli("check", "--cluster", str(src), str(EXAMPLES / "llama-pretrain.yaml"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "gang none" in r.stdout or "gang: none" in r.stdout or "[gang.unavailable]" in r.stdout
    assert ("  note [gang.unavailable] metadata: its 4 Pods may start one by one: no gang scheduler is served "
            "(Kubernetes v1.36.2") in r.stdout
