"""A native gang's PodGroup carries its tier's PriorityClass.

Why: kube-scheduler 1.36's workload-aware preemption compares the PodGroups' own priorities, not their
Pods': with PodGroups that name no class (priority 0 on both sides) it found no victims, and a higher
tier's gang waited behind a lower tier's for good (tests/integration/test_outcome_lifecycle.py shows
the whole lower-tier gang preempted once the PodGroups carry their class).
"""

from __future__ import annotations

from support.manifests import load_yaml
from support.paths import EXAMPLES
from support.policies import BACKENDS, write_policy

from trainadmit.engine import Request, decide, load_policy

GATES = ["GenericWorkload", "GangScheduling", "WorkloadAwarePreemption"]


def test_the_podgroup_carries_the_tiers_priority_class(tmp_path):
    policy = load_policy(write_policy(tmp_path, {"kubernetesVersion": "1.36", "featureGates": GATES,
                                                 **BACKENDS["native-podgroup"]}))
    job = load_yaml(EXAMPLES / "llama-pretrain.yaml")[0]  # trainadmit.io/priority: high
    [podgroup] = decide(policy, Request(job)).companions
    assert podgroup["spec"]["priorityClassName"] == "training-high"
    job["metadata"]["annotations"].pop("trainadmit.io/priority")  # the policy's default tier
    [podgroup] = decide(policy, Request(job)).companions
    assert podgroup["spec"]["priorityClassName"] == "training-normal"


def test_without_workload_aware_preemption_a_136_podgroup_names_no_class(tmp_path):
    """A 1.36 apiserver without the gate drops the field (measured): the reconciler's PodGroup would then
    differ from the one the decision names."""
    policy = load_policy(write_policy(tmp_path, {"kubernetesVersion": "1.36", "featureGates": GATES[:2],
                                                 **BACKENDS["native-podgroup"]}))
    [podgroup] = decide(policy, Request(load_yaml(EXAMPLES / "llama-pretrain.yaml")[0])).companions
    assert "priorityClassName" not in podgroup["spec"]
