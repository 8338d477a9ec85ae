"""The colocation method trainadmit chooses, and what it tells the user, per cluster the policy targets.

The outcome tier (tests/integration/test_outcome_gangs.py) shows on the real kube-scheduler 1.36 why:
required pod affinity leaves a native gang unscheduled for good when its first worker's best node is
in a rack too small for all workers, and leaves workers without a gang partially started. These are
the same decisions, in-process, on the Kubernetes documentation's Indexed Job asking for 4 whole
H100 nodes in one rack.
"""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from support.paths import FIXTURES
from support.policies import BACKENDS, write_policy

from trainadmit.engine import Request, decide, load_policy

INDEXED_JOB = FIXTURES / "real-world" / "k8s-website-indexed-job.yaml"
GATES_136 = ["GenericWorkload", "GangScheduling", "WorkloadWithJob"]


def _job(**annotations: str) -> dict:
    job = copy.deepcopy(yaml.safe_load(INDEXED_JOB.read_text()))
    job["metadata"] = {"name": "indexed-job", "namespace": "team-nlp", "labels": {"owner": "nlp"},
                       "annotations": {"trainadmit.io/topology": "rack", **annotations}}
    job["spec"].update(parallelism=4, completions=4)
    job["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 8}}
    return job


def _decide(tmp_path, platform: dict, job: dict | None = None):
    policy = load_policy(write_policy(tmp_path / "policies", platform))
    decision = decide(policy, Request(job or _job()))
    assert decision.allowed, decision.violations
    affinity = (decision.mutated["spec"]["template"]["spec"].get("affinity") or {}).get("podAffinity")
    # what the platform decides (the cluster's gates, its gang backend) is a note: the workload need not change
    warnings = {w.rule: w for w in (*decision.warnings, *decision.notes)}
    assert not decision.warnings, decision.warnings
    return decision, affinity, warnings


def test_with_the_topology_gate_the_podgroup_carries_the_constraint_and_nothing_is_risked(tmp_path):
    d, affinity, warnings = _decide(tmp_path, {"kubernetesVersion": "1.36",
                                               "featureGates": [*GATES_136, "TopologyAwareWorkloadScheduling"],
                                               **BACKENDS["native-podgroup"]})
    assert affinity is None and "topology.colocation-risk" not in warnings
    assert d.companions[0]["spec"]["schedulingConstraints"] == {"topology": [{"key": "topology.kubernetes.io/rack"}]}


def test_without_the_topology_gate_the_pods_get_the_placement_gate_and_nothing_is_risked(tmp_path):
    """No pod affinity, no note: the gate and the template annotation the ungater reads (docs/scheduling.md); the same
    decision on the stored object changes nothing (idempotent)."""
    d, affinity, warnings = _decide(tmp_path, {"kubernetesVersion": "1.36", "featureGates": GATES_136,
                                               **BACKENDS["native-podgroup"]})
    assert affinity is None and "topology.colocation-risk" not in warnings
    template = d.mutated["spec"]["template"]
    assert template["spec"]["schedulingGates"] == [{"name": "trainadmit.io/placement"}]
    assert json.loads(template["metadata"]["annotations"]["trainadmit.io/placement"]) == {
        "gang": "team-nlp/indexed-job", "size": 4, "key": "topology.kubernetes.io/rack", "level": "rack",
        "pool": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "trainadmit.io/pool": "h100-ib"}}
    assert all("schedulingConstraints" not in c["spec"] for c in d.companions)
    policy = load_policy(tmp_path / "policies")
    again = decide(policy, Request(d.mutated))
    assert again.patch == [] and again.mutated == d.mutated


def test_a_job_that_asks_for_no_rack_gets_no_gate(tmp_path):
    d, _, _ = _decide(tmp_path, {"kubernetesVersion": "1.36", "featureGates": GATES_136,
                                 **BACKENDS["native-podgroup"]}, _job(**{"trainadmit.io/topology": "any"}))
    assert "schedulingGates" not in d.mutated["spec"]["template"]["spec"]


@pytest.mark.parametrize("platform", [
    {"kubernetesVersion": "1.36", "featureGates": GATES_136,
     "gang": {**BACKENDS["native-podgroup"]["gang"], "topologyMethod": "podAffinity"}},
    {"gang": {**BACKENDS["coscheduling"]["gang"], "topologyMethod": "podAffinity"}},
    {"gang": {**BACKENDS["volcano"]["gang"], "topologyMethod": "podAffinity"}},
], ids=["native-podAffinity", "coscheduling-podAffinity", "volcano-podAffinity"])
def test_pod_affinity_is_kept_where_chosen_and_its_risk_is_said(tmp_path, platform):
    """An explicit ``topologyMethod: podAffinity`` is kept on every backend (auto gives coscheduling and Volcano the
    placement gate now: tests/engine/test_gate_under_gang_schedulers.py)."""
    _, affinity, warnings = _decide(tmp_path, platform)
    assert affinity["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"] == "topology.kubernetes.io/rack"
    risk = warnings["topology.colocation-risk"]
    assert risk.message == ("the gang may never start if its first worker lands in a rack too small for all 4 "
                            "(required pod affinity)")


def test_without_a_gang_the_risk_named_is_workers_holding_gpus(tmp_path):
    job = _job(**{"trainadmit.io/gang": "false"})
    _, _, warnings = _decide(tmp_path, {"gang": {**BACKENDS["coscheduling"]["gang"], "topologyMethod": "podAffinity"}},
                             job)
    assert warnings["topology.colocation-risk"].message.startswith("the workers that fit start and hold their GPUs")


def test_topology_any_and_an_explicit_none_are_not_warned(tmp_path):
    _, affinity, warnings = _decide(tmp_path, BACKENDS["coscheduling"], _job(**{"trainadmit.io/topology": "any"}))
    assert affinity is None and "topology.colocation-risk" not in warnings
    (tmp_path / "none").mkdir()
    _, affinity, warnings = _decide(tmp_path / "none", {"gang": {**BACKENDS["coscheduling"]["gang"],
                                                                  "topologyMethod": "none"}})
    assert affinity is None and "topology.colocation-risk" not in warnings


def test_a_136_policy_without_gang_scheduling_is_told_the_gang_is_not_enforced(tmp_path):
    """Measured on kube-scheduler 1.36.2 with only GenericWorkload: a PodGroup of minCount 4 and 3
    fitting nodes had 3 Pods bound while the PodGroup said Scheduled."""
    _, _, warnings = _decide(tmp_path, {"kubernetesVersion": "1.36", "featureGates": ["GenericWorkload"],
                                        **BACKENDS["native-podgroup"]})
    gap = warnings["gang.cluster-support"]
    assert "GangScheduling" in gap.message and "the Pods may start one by one" in gap.message
    (tmp_path / "137").mkdir()  # merged into GenericWorkload in 1.37: not asked for there
    _, _, warnings = _decide(tmp_path / "137", {"featureGates": ["GenericWorkload", "TopologyAwareWorkloadScheduling"],
                                                **BACKENDS["native-podgroup"]})
    assert "gang.cluster-support" not in warnings
