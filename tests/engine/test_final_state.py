"""/validate sees the final object: a gang the apiserver dropped is denied with the reason."""

from __future__ import annotations

from support.builders import job, rules_of
from support.manifests import deep
from support.patches import apply_patch

from trainadmit.engine import Request, decide


def _mutated(policy, obj):
    d = decide(policy, Request(deep(obj)))
    return apply_patch(obj, d.patch)


def test_dropped_job_scheduling_is_denied_naming_the_feature_gate(policy):
    final = _mutated(policy, job())
    del final["spec"]["scheduling"]  # what a 1.36 apiserver (or gate off) does, measured per DESIGN §5
    d = decide(policy, Request(final, phase="validate"))
    v = next(v for v in d.denials if v.rule == "gang.membership-lost")
    assert "WorkloadWithJob" in v.message and "native/job-scheduling" in v.message


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
