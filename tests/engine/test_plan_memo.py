"""What the plan and the workload views remember across decisions, and that they answer as if they did not.

Each memo here stands for a function of immutable inputs (a frozen policy model, a frozen ``Discovered``, a Job's Pod
count, an adapter's class-level gang table): these tests change one input at a time and expect the answer of the
function itself, so a memo keyed on too little (the policy alone, the first count seen) fails them."""

from __future__ import annotations

import pytest
from support.paths import POLICIES
from support.policies import write_policy

from trainadmit.engine import load_policy
from trainadmit.engine.clusterview import Discovered
from trainadmit.engine.plan import _TARGETS_KEPT, plan_target, present_gangs
from trainadmit.engine.target import choose
from trainadmit.engine.workloads import GangMethod, JobAdapter, Workload


class _View:
    """A cluster view that shows ``found`` as its discovery (all ``plan_target`` asks of one)."""

    def __init__(self, found: Discovered | None):
        self.found = found

    def discovered(self) -> Discovered | None:
        return self.found


PLAIN = Discovered((1, 36), "v1.36.2", frozenset({"v1", "batch/v1"}))
WORKLOAD_API = Discovered((1, 36), "v1.36.2", frozenset({"v1", "batch/v1", "scheduling.k8s.io/v1alpha2"}))
VOLCANO = Discovered((1, 35), "v1.35.1", frozenset({"v1", "batch/v1", "scheduling.volcano.sh/v1beta1"}))


@pytest.fixture(scope="module")
def bundled():
    return load_policy(POLICIES)


def test_the_target_follows_the_discovery_it_is_chosen_for(bundled):
    seen = []
    for found in (None, PLAIN, WORKLOAD_API, VOLCANO, PLAIN, None, VOLCANO):
        target = plan_target(bundled, _View(found))
        assert target == choose(bundled.platform, found)
        seen.append((target.version, target.backend_name, target.discovered))
    assert len(set(seen)) == 4  # none, plain, the Workload API and Volcano each choose differently
    assert seen[1] == seen[4] and seen[0] == seen[5] and seen[3] == seen[6]


def test_the_target_follows_the_policy_it_is_chosen_for(bundled, tmp_path):
    volcano = load_policy(write_policy(tmp_path / "volcano", {"gang": {"backend": "volcano"}}))
    for policy in (bundled, volcano, bundled, volcano):
        for found in (None, WORKLOAD_API):
            assert plan_target(policy, _View(found)) == choose(policy.platform, found)
    assert plan_target(volcano, _View(None)).backend_name == "volcano"
    assert plan_target(bundled, _View(None)).backend_name != "volcano"


def test_an_equal_discovery_in_another_object_is_chosen_for_again_and_agrees(bundled):
    again = Discovered(PLAIN.version, PLAIN.git_version, frozenset(PLAIN.api_versions))
    assert plan_target(bundled, _View(again)) == plan_target(bundled, _View(PLAIN))


def test_many_views_keep_a_bounded_memo_and_every_answer(bundled):
    from trainadmit.engine import plan

    views = [Discovered((1, 30 + i), "", frozenset({"v1"})) for i in range(3 * _TARGETS_KEPT)]
    for found in views:
        assert plan_target(bundled, _View(found)) == choose(bundled.platform, found)
    assert len(plan._TARGETS) <= _TARGETS_KEPT


def test_a_jobs_template_counts_its_own_parallelism():
    adapter = JobAdapter()
    counts = [adapter.templates({"spec": {"parallelism": n}})[0].pods for n in (3, 5, 3, 0)]
    assert counts == [3, 5, 3, 0]
    assert adapter.templates({"spec": {}})[0].pods == 1  # the apiserver's default
    first, second = adapter.templates({"spec": {"parallelism": 4}}), adapter.templates({"spec": {"parallelism": 4}})
    assert first == second and first is not second  # a new list each time: a caller may change its own


def test_a_backend_the_kind_lacks_is_unsupported_and_named():
    gang = JobAdapter().gang("no-such-backend")
    assert gang.method is GangMethod.unsupported and "no-such-backend" in gang.reason
    assert JobAdapter().gang("kueue").method is GangMethod.kueue


def test_a_jobs_own_gang_field_is_seen_as_present():
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "a"},
           "spec": {"template": {"spec": {"containers": []}}}}
    assert present_gangs(Workload(job, JobAdapter())) == {}
    job["spec"]["scheduling"] = {"schedulingPolicy": {"gang": {"minCount": 2}}}
    assert present_gangs(Workload(job, JobAdapter())) == {"native/job-scheduling": "spec.scheduling"}


def test_the_transport_prefilter_lets_every_transport_variable_through():
    from trainadmit.grammars.nccl import TRANSPORT_PREFIXES, TRANSPORT_VARS, VARIABLE_PREFIX, is_transport_variable

    assert VARIABLE_PREFIX == "NCCL_"
    assert all(name.startswith(VARIABLE_PREFIX) for name in (*TRANSPORT_PREFIXES, *TRANSPORT_VARS))
    for name in ("NCCL_IB_HCA", "NCCL_NET_PLUGIN", "NCCL_CROSS_NIC", "NCCL_DEBUG", "XNCCL_IB_HCA", "nccl_ib_hca"):
        assert (name.startswith(VARIABLE_PREFIX) and is_transport_variable(name)) is is_transport_variable(name)


def test_a_views_identity_is_that_of_its_own_state():
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"generateName": "run-", "namespace": "a"},
           "spec": {"template": {"spec": {"containers": []}}}}
    view = Workload(job, JobAdapter())
    assert (view.name, view.generate_name, view.namespace) == (None, "run-", "a")
    named = view.with_object({**job, "metadata": {"name": "run-x1", "namespace": "b"}})
    assert (named.name, named.generate_name, named.namespace) == ("run-x1", None, "b")
    assert (view.name, view.generate_name, view.namespace) == (None, "run-", "a")  # the first state keeps its own


def test_gpu_pods_counts_every_gpu_template():
    from trainadmit.engine.intent import Resolved

    class _T:
        def __init__(self, pods: int):
            self.pods = pods

    assert Resolved().gpu_pods == 0
    assert Resolved(gpu_templates=[(_T(3), 8)]).gpu_pods == 3
    assert Resolved(gpu_templates=[(_T(3), 8), (_T(4), 2)]).gpu_pods == 7
    resolved = Resolved(gpu_templates=[(_T(3), 8)])
    resolved.gpu_templates.append((_T(5), 1))  # resolve appends as it counts: nothing is remembered
    assert resolved.gpu_pods == 8


def test_every_kinds_own_count_fields_are_its_counts_then_its_gang_sizes():
    from trainadmit.engine.workloads import ADAPTERS
    from trainadmit.engine.workloads.base import _kind_counts

    for adapter in ADAPTERS:
        found = dict.fromkeys(adapter.counts)
        for gang in adapter.gangs.values():
            size = gang.size_path
            if size is not None and not (len(size) >= 2 and size[-2] in ("labels", "annotations")):
                found[size] = None
        assert list(_kind_counts(adapter)) == list(found), adapter.kind
    fields = JobAdapter().count_fields({"spec": {"parallelism": 2}})
    assert fields == [("spec", "parallelism"), ("spec", "completions"),
                      ("spec", "scheduling", "schedulingPolicy", "gang", "minCount")]


def test_gpus_per_pod_is_the_largest_templates():
    from trainadmit.engine.intent import Resolved

    assert Resolved().gpus_per_pod == 0
    assert Resolved(gpu_templates=[(None, 8)]).gpus_per_pod == 8
    assert Resolved(gpu_templates=[(None, 2), (None, 8), (None, 4)]).gpus_per_pod == 8
