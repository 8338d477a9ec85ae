"""A workload whose PodGroup only trainadmit's elected reconciler creates, decided by a server where none runs:
admitted with ``reconciler.missing`` saying what happens to it (its Pods wait Pending) and what to run; refused
with ``reconciler.missing: deny``; nothing said where the view cannot tell (``check``) or nothing waits for the
reconciler (Kueue forms its gang itself). Public manifests: the examples' llama-pretrain (4 x 8 GPUs, gang)."""

from __future__ import annotations

from support.manifests import load_yaml
from support.patches import apply_patch
from support.paths import EXAMPLES
from support.policies import BACKENDS, write_policy

from trainadmit.engine import Request, decide, load_policy
from trainadmit.engine.clusterview import DiscoveryOnly, NoCluster

LLAMA = load_yaml(EXAMPLES / "llama-pretrain.yaml")[0]
WHY = "serve runs without --reconcile"


class WithoutReconciler(NoCluster):
    """What a server without --reconcile answers; nothing else known."""

    constant = False

    def reconciler(self) -> str | None:
        return WHY


def _missing(decision):
    return [v for v in decision.violations if v.rule == "reconciler.missing"]


def test_a_gang_whose_podgroup_nobody_creates_is_admitted_saying_so(tmp_path):
    policy = load_policy(write_policy(tmp_path, BACKENDS["native-podgroup"]))
    mutated = decide(policy, Request(LLAMA), WithoutReconciler())
    validated = decide(policy, Request(apply_patch(LLAMA, mutated.patch), phase="validate"), WithoutReconciler())
    for decision in (mutated, validated):  # both webhooks say the same (the apiserver shows kubectl one)
        [warning] = _missing(decision)
        assert decision.allowed and warning.action.value == "warn"
        assert warning.message.startswith("its PodGroup llama-pretrain-gang (scheduling.k8s.io/v1beta1) and the "
                                          "release of its Pods' scheduling gate trainadmit.io/placement come from "
                                          f"trainadmit's reconciler, and none runs ({WHY}): admitted, its 4 Pods "
                                          "wait Pending until one runs")
        assert "trainadmit serve --reconcile" in warning.hint and "reconciler.missing: deny" in warning.hint


def test_coscheduling_podgroups_too_and_a_stale_view_still_knows_there_is_no_reconciler(tmp_path):
    """A view too old to trust is dropped for counts; what the server's own processes know is not."""
    policy = load_policy(write_policy(tmp_path, BACKENDS["coscheduling"]))
    assert DiscoveryOnly(WithoutReconciler()).reconciler() == WHY
    [warning] = _missing(decide(policy, Request(LLAMA), WithoutReconciler()))
    assert "its PodGroup llama-pretrain (scheduling.x-k8s.io/v1alpha1)" in warning.message


def test_deny_refuses_such_workloads(tmp_path):
    policy = load_policy(write_policy(tmp_path, {**BACKENDS["native-podgroup"],
                                                 "rules": {"reconciler.missing": "deny"}}))
    decision = decide(policy, Request(LLAMA), WithoutReconciler())
    assert not decision.allowed and [v.rule for v in decision.denials] == ["reconciler.missing"]


def test_nothing_is_said_where_nothing_waits_for_it_or_nobody_can_tell(tmp_path):
    kueue = load_policy(write_policy(tmp_path / "kueue", BACKENDS["kueue"]))
    assert not _missing(decide(kueue, Request(LLAMA), WithoutReconciler()))  # Kueue forms the gang itself
    native = load_policy(write_policy(tmp_path / "native", BACKENDS["native-podgroup"]))
    checked = decide(native, Request(LLAMA), NoCluster())  # check: whether a reconciler runs is unknown
    assert checked.companions and not _missing(checked)
