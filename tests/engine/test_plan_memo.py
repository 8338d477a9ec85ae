"""What the plan and the workload views remember across decisions, and that they answer as if they did not.

Each memo here stands for a function of immutable inputs (a frozen policy model, a frozen ``Discovered``, a Job's Pod
count, an adapter's class-level gang table): these tests change one input at a time and expect the answer of the
function itself, so a memo keyed on too little (the policy alone, the first count seen) fails them."""

from __future__ import annotations

from trainadmit.engine.workloads import GangMethod, JobAdapter


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
