"""The PodGroup reconciler reacts to a workload's watch event (``PodGroupReconciler.event``): the PodGroup is
written as soon as the event is handled, while the Lease is known held, once per what the workload asks for;
the full pass runs every ``resync`` seconds as the safety net; each write and pass is measured.

The Job is the captured one (admission-reviews/job-03, as the apiserver stored it) mutated by the bundled
policy (native PodGroup ``llama-pretrain-gang``); the apiserver is the project's fake, which stores and lists.
"""

from __future__ import annotations

import threading

from support.fake_apiserver import FakeAPIServer
from support.manifests import deep, review
from support.server import wait_until

from trainadmit.cluster.live import WATCHED, LiveCluster
from trainadmit.cluster.reconciler import PodGroupReconciler, Reconciler
from trainadmit.engine import Request, decide


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _client(api):
    from kubernetes import client

    config = client.Configuration()
    config.host = f"http://127.0.0.1:{api.port}"
    return client.CustomObjectsApi(client.ApiClient(config))


def _job(policy, uid: str = "0b7e6f1c-0000-4000-8000-000000000001") -> dict:
    job = decide(policy, Request(deep(review("job-03-mutate-Job-CREATE.json")["request"]["object"]))).mutated
    job["metadata"]["uid"] = uid
    return job


def _podgroups(api) -> list[dict]:
    return [o for p, o in api.objects.items() if "/podgroups/" in p]


def _reconciler(api, clock: Clock, writes: list, lags: list, **kwargs) -> PodGroupReconciler:
    return PodGroupReconciler(_client(api), log=lambda m: None, kinds=[("batch", "v1", "jobs")], clock=clock,
                              on_write=lambda *w: writes.append(w), on_lag=lags.append, **kwargs)


def test_a_created_workloads_event_makes_its_podgroup_once(policy):
    api, clock, writes, lags = FakeAPIServer(), Clock(), [], []
    try:
        pgr = _reconciler(api, clock, writes, lags)
        pgr.held(30.0)
        job = _job(policy)
        pgr.event("ADDED", job)
        arrived, obj = pgr._events.get_nowait()
        clock.now += 0.25
        assert pgr.handle(arrived, obj) == "created"
        [pg] = _podgroups(api)
        assert pg["metadata"]["name"] == "llama-pretrain-gang"
        assert pg["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
        assert writes == [("PodGroup", "create", "ok")] and lags == [0.25]
        # the Job's status updates are events too: nothing asked for changed, nothing written
        assert pgr.handle(clock.now, job) is None and writes == [("PodGroup", "create", "ok")]
        pgr.event("DELETED", job)  # forgotten: a new Job of the same uid (never) or a re-create is handled again
        assert pgr.handle(clock.now, job) == "exists" and writes[-1] == ("PodGroup", "create", "exists")
    finally:
        api.close()


def test_no_event_is_written_unless_the_lease_is_known_held(policy):
    api, clock, writes, lags = FakeAPIServer(), Clock(), [], []
    try:
        pgr = _reconciler(api, clock, writes, lags)
        job = _job(policy)
        assert pgr.handle(clock.now, job) is None  # never held
        pgr.held(30.0)
        clock.now += 31.0  # no pass renewed it since
        assert pgr.handle(clock.now, job) is None
        assert _podgroups(api) == [] and writes == []
        unlabelled = deep(job)
        del unlabelled["metadata"]["labels"]["trainadmit.io/podgroup"]
        pgr.event("ADDED", unlabelled)
        assert pgr._events.empty()
    finally:
        api.close()


def test_the_full_pass_is_the_safety_net_every_resync_seconds(policy):
    api, clock, writes, lags = FakeAPIServer(), Clock(), [], []
    try:
        job = _job(policy)
        api.put_raw(f"/apis/batch/v1/namespaces/team-nlp/jobs/{job['metadata']['name']}", job)
        pgr = _reconciler(api, clock, writes, lags, resync=30.0)
        passes: list[float] = []
        reconciler = Reconciler(None, pgr, log=lambda m: None, on_pass=passes.append)
        assert reconciler.step() == ["team-nlp/llama-pretrain-gang: created"]
        assert pgr.held_until == clock.now + reconciler.hold_margin and len(passes) == 1
        for path in [p for p in api.objects if "/podgroups/" in p]:  # someone deleted it
            del api.objects[path]
        clock.now += 10.0
        assert reconciler.step() == [] and _podgroups(api) == []  # not due: events make PodGroups meanwhile
        clock.now += 20.0
        assert reconciler.step() == ["team-nlp/llama-pretrain-gang: created"]
        assert len(passes) == 3 and all(p >= 0 for p in passes)
    finally:
        api.close()


def test_the_event_thread_writes_what_the_live_view_hears(policy):
    """The live view hands every workload event (and what a relist finds) to the reconciler, on its watch
    thread; the event thread writes the PodGroup."""
    api, writes, lags = FakeAPIServer(), [], []
    try:
        pgr = PodGroupReconciler(_client(api), log=lambda m: None, kinds=[("batch", "v1", "jobs")],
                                 on_write=lambda *w: writes.append(w), on_lag=lags.append)
        pgr.held(30.0)
        view = LiveCluster(core=None, keep_workloads=True, on_workload=pgr.event)
        jobs = next(w for w in WATCHED if w.workload is not None and w.workload.kind == "Job")
        stop = threading.Event()
        thread = threading.Thread(target=pgr.run_events, args=(stop,), daemon=True)
        thread.start()
        try:
            view._apply(jobs, "ADDED", _job(policy))
            wait_until(lambda: _podgroups(api), message="the PodGroup from the event")
            view._replace(jobs, [_job(policy, uid="0b7e6f1c-0000-4000-8000-000000000002")])  # a relist
            wait_until(lambda: len(writes) == 2, message="the relisted Job handled")
        finally:
            stop.set()
            thread.join(5)
        assert writes == [("PodGroup", "create", "ok"), ("PodGroup", "create", "exists")] and len(lags) == 2
    finally:
        api.close()


def test_the_budgets_writes_are_counted_by_verb_and_result(policy, tmp_path):
    from kubernetes import client
    from support.policies import write_policy

    from trainadmit.cluster.budget import BUDGET_NAME, BudgetQuotas
    from trainadmit.engine import load_policy

    api, writes = FakeAPIServer(), []
    try:
        api.put_raw("/api/v1/namespaces/team-nlp", {"apiVersion": "v1", "kind": "Namespace",
                                                     "metadata": {"name": "team-nlp"}})
        config = client.Configuration()
        config.host = f"http://127.0.0.1:{api.port}"
        stored = lambda ns: api.objects.get(f"/api/v1/namespaces/{ns}/resourcequotas/{BUDGET_NAME}")  # noqa: E731
        budgets = BudgetQuotas(client.CoreV1Api(client.ApiClient(config)), stored, log=lambda m: None,
                               on_write=lambda *w: writes.append(w))
        budgets.step(policy)
        budgets.step(policy)  # unchanged: nothing written, nothing counted
        none = load_policy(write_policy(tmp_path / "none", extra=[{
            "apiVersion": "trainadmit.io/v1alpha1", "kind": "Quota", "metadata": {"name": "a-team-nlp"},
            "spec": {"namespaces": ["team-nlp"]}}]))
        budgets.step(none)
        assert writes == [("ResourceQuota", "create", "ok"), ("ResourceQuota", "delete", "ok")]
    finally:
        api.close()


def test_write_metrics_have_closed_labels():
    from prometheus_client import REGISTRY, generate_latest

    from trainadmit.server.metrics import record_write

    record_write("PodGroup", "create", "ok")
    record_write("Secret", "exec", "maybe")
    text = generate_latest(REGISTRY).decode()
    assert 'trainadmit_reconciler_writes_total{kind="PodGroup",result="ok",verb="create"}' in text
    assert 'trainadmit_reconciler_writes_total{kind="other",result="other",verb="other"}' in text
