"""/validate sees the final object: a native gang the apiserver dropped follows gang.unavailable (the cluster
does not have it: admitted with the reason, or refused), gang keys another webhook removed are denied."""

from __future__ import annotations

from support.builders import job, rules_of
from support.manifests import deep
from support.patches import apply_patch
from support.policies import BACKENDS, write_policy

from trainadmit.engine import Request, decide, load_policy


def _mutated(policy, obj):
    d = decide(policy, Request(deep(obj)))
    return apply_patch(obj, d.patch)


def test_dropped_job_scheduling_is_the_cluster_lacking_it_named_by_version(tmp_path):
    """The policy targets 1.37 with WorkloadWithJob declared; the apiserver dropped Job.spec.scheduling (a gate
    off, measured per DESIGN §5): admitted without the gang (a note, the default), the message naming the gates
    a 1.37 cluster needs for the field; with the rule set to deny, refused."""
    policy = load_policy(write_policy(tmp_path / "p", BACKENDS["native-job"]))
    final = _mutated(policy, job())
    del final["spec"]["scheduling"]
    d = decide(policy, Request(final, phase="validate"))
    [v] = [v for v in d.violations if v.rule == "gang.unavailable"]
    assert d.allowed and v.action.value == "note" and v.path == "/spec/scheduling"
    assert "native/job-scheduling" in v.message and "WorkloadWithJob or GenericWorkload is off" in v.message
    assert "gang.membership-lost" not in rules_of(d)
    strict = load_policy(write_policy(tmp_path / "deny", {**BACKENDS["native-job"],
                                                          "rules": {"gang.unavailable": "deny"}}))
    final = _mutated(strict, job())
    del final["spec"]["scheduling"]
    assert [v.rule for v in decide(strict, Request(final, phase="validate")).denials] == ["gang.unavailable"]


def test_a_dropped_gang_under_auto_without_a_view_says_what_was_assumed(policy):
    """The bundled policy without a cluster view assumed 1.37 with its Workload API; a cluster without it drops
    schedulingGroup: the warning says the decision had no view and how to give it one."""
    final = _mutated(policy, job())
    del final["spec"]["template"]["spec"]["schedulingGroup"]
    d = decide(policy, Request(final, phase="validate"))
    [v] = [v for v in d.violations if v.rule == "gang.unavailable"]
    assert d.allowed and "without the cluster's discovery" in v.message and "--cluster-live" in v.hint


def test_gang_keys_another_webhook_removed_are_denied(tmp_path):
    policy = load_policy(write_policy(tmp_path / "c", BACKENDS["coscheduling"]))
    final = _mutated(policy, job())
    del final["spec"]["template"]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"]
    [v] = decide(policy, Request(final, phase="validate")).denials
    assert v.rule == "gang.membership-lost" and "another mutating webhook removed it" in v.message


def test_other_lost_fields_and_unmutated_objects(policy):
    final = _mutated(policy, job())
    final["spec"]["template"]["spec"]["tolerations"] = []
    assert "final.injection-lost" in rules_of(decide(policy, Request(final, phase="validate")))
    raw = job()
    d = decide(policy, Request(raw, phase="validate"))
    assert "final.not-mutated" in rules_of(d)


def test_validate_accepts_final_object_and_never_patches(policy):
    final = _mutated(policy, job())
    d = decide(policy, Request(final, phase="validate"))
    assert d.allowed and d.patch == [] and d.mutated is None


def test_update_scale_up_checked_against_quota(policy):
    old = _mutated(policy, job(workers=4))
    new = deep(old)
    new["spec"]["parallelism"] = 12
    d = decide(policy, Request(new, operation="UPDATE", old=old, phase="validate"))
    assert "quota.namespace-hard" in rules_of(d)  # 12 x 8 = 96 GPUs > the team's 64
    same = decide(policy, Request(deep(old), operation="UPDATE", old=old, phase="validate"))
    assert same.allowed and same.violations == []
    mutate_update = decide(policy, Request(new, operation="UPDATE", old=old, phase="mutate"))
    assert mutate_update.patch == [] and mutate_update.allowed
