"""The reports writer and the budgets' ResourceQuotas, on the fake apiserver (real HTTP, the official client):
what each pass writes, counted at the apiserver. The real apiserver tier repeats the key cases
(tests/integration/test_reports_on_apiserver.py)."""

from __future__ import annotations

import copy
from collections import Counter

import pytest
from support.builders import job
from support.fake_apiserver import FakeAPIServer
from support.kube_fixtures import cluster_nodes
from support.manifests import load_yaml
from support.paths import EXAMPLES
from support.policies import BACKENDS, write_policy
from support.reports import problems

from trainadmit.cluster import report_writer
from trainadmit.cluster.budget import BUDGET_NAME, BudgetQuotas, desired
from trainadmit.cluster.live import LiveCluster
from trainadmit.cluster.report_writer import ReportWriter
from trainadmit.engine import Request, decide, load_policy

PARTIAL = next(d for d in load_yaml(EXAMPLES / "denied-partial-nodes.yaml") if d.get("kind") == "Job")
# the report APIs, and 1.37's Workload API (the cluster BACKENDS["native-job"] describes: its gang is served)
SERVED = {"openreports.io/v1alpha1", "wgpolicyk8s.io/v1alpha2", "scheduling.k8s.io/v1beta1"}


def _client(api: FakeAPIServer):
    from kubernetes import client

    config = client.Configuration()
    config.host = f"http://127.0.0.1:{api.port}"
    return client.ApiClient(config)


class Cluster:
    """The fake apiserver and a synced view (as the writer's live view is once its lists are in)."""

    def __init__(self, served=SERVED, max_namespaces=50):
        from kubernetes import client

        self.api = FakeAPIServer()
        self.view = LiveCluster(None, log=lambda m: None, keep_workloads=True,
                                on_change=lambda what, ns: self.writer.mark(what, ns))
        self.view.set_served(set(served) | {"v1"})
        self.view.replace_nodes(cluster_nodes())  # the integration tier's nodes, as the bundled policy describes
        self.view.synced.set()
        self.writer = ReportWriter(client.CustomObjectsApi(_client(self.api)), self.view, log=lambda m: None,
                                   max_namespaces=max_namespaces, clock=lambda: 1_800_000_000)
        self.view.workloads.replace("jobs.batch/v1", [])

    def store(self, obj: dict) -> None:
        self.view.workloads.put("jobs.batch/v1", obj)

    def delete(self, obj: dict) -> None:
        self.view.workloads.delete("jobs.batch/v1", obj)

    def writes(self, plural: str = "reports") -> Counter:
        """Calls that changed a report, as the apiserver received them."""
        return Counter(method for method, path in self.api.requests
                       if f"/{plural}" in path and method in ("POST", "PUT", "DELETE"))

    def report(self, namespace: str, group: str = "openreports.io/v1alpha1", plural: str = "reports") -> dict | None:
        return self.api.objects.get(f"/apis/{group}/namespaces/{namespace}/{plural}/trainadmit")

    def close(self) -> None:
        self.api.close()


@pytest.fixture
def cluster():
    c = Cluster()
    yield c
    c.close()


def _job(source: dict, name: str, namespace: str, minute: int) -> dict:
    obj = copy.deepcopy(source)
    obj["metadata"].update(name=name, namespace=namespace, uid=f"uid-{namespace}-{name}",
                           creationTimestamp=f"2026-01-10T08:{minute % 60:02d}:00Z")
    return obj


def _fill(cluster: Cluster, policy, namespaces: int, per_namespace: int) -> list[dict]:
    """``namespaces`` namespaces (team-0..., Quota teams: no GPU budget) of stored Jobs: every fifth the
    partial-nodes example (denied: whole nodes; a warning: no owner label), the others one 8-GPU worker with
    an owner, as admission stored it (a pass)."""
    out = []
    for n in range(namespaces):
        good = decide(policy, Request(job(name="x", namespace=f"team-{n}", workers=1, gpus=8,
                                          labels={"owner": "ml"}))).mutated
        for i in range(per_namespace):
            obj = _job(PARTIAL if i % 5 == 0 else good, f"job-{i:04d}", f"team-{n}", i)
            cluster.store(obj)
            out.append(obj)
    return out


def test_a_policy_change_writes_one_report_per_namespace(cluster, tmp_path):
    """200 workloads in 20 namespaces here (the real apiserver tier does 2,000)."""
    policy = load_policy(write_policy(tmp_path / "a", BACKENDS["native-job"]))
    _fill(cluster, policy, namespaces=20, per_namespace=10)
    assert sorted(cluster.writer.step(policy))[:1] == ["team-0/trainadmit: created"]
    assert cluster.writes() == {"POST": 20}
    report = cluster.report("team-3")
    assert problems(report) == [] and report["summary"] == {"pass": 8, "fail": 2, "warn": 2, "error": 0, "skip": 0}
    assert cluster.writer.step(policy) == [] and cluster.writes() == {"POST": 20}  # nothing changed: nothing written
    changed = load_policy(write_policy(tmp_path / "b", {**BACKENDS["native-job"], "rules": {"custom.owner-label": "off"}}))
    assert changed.generation != policy.generation
    assert len(cluster.writer.step(changed)) == 20
    assert cluster.writes() == {"POST": 20, "PUT": 20}  # one write per namespace for 200 re-judged workloads
    assert cluster.report("team-3")["summary"]["warn"] == 0
    assert cluster.writer.step(changed) == [] and cluster.writes() == {"POST": 20, "PUT": 20}


def test_a_pass_writes_at_most_max_namespaces_oldest_first(tmp_path):
    c = Cluster(max_namespaces=8)
    try:
        policy = load_policy(write_policy(tmp_path / "a", BACKENDS["native-job"]))
        _fill(c, policy, namespaces=20, per_namespace=3)
        per_pass = [len(c.writer.step(policy)) for _ in range(4)]
        assert per_pass == [8, 8, 4, 0] and c.writes() == {"POST": 20}
    finally:
        c.close()


def test_status_changes_rewrite_nothing_and_deleting_removes_results(cluster, tmp_path):
    policy = load_policy(write_policy(tmp_path / "a", BACKENDS["native-job"]))
    jobs = _fill(cluster, policy, namespaces=2, per_namespace=5)
    cluster.writer.step(policy)
    before = cluster.writes()
    for obj in jobs:  # the Job controller writes status all the time
        cluster.store({**obj, "status": {"active": 1, "ready": 1}})
    assert cluster.writer.step(policy) == [] and cluster.writes() == before
    denied = next(o for o in jobs if o["metadata"]["namespace"] == "team-0" and o["metadata"]["name"] == "job-0000")
    cluster.delete(denied)
    assert cluster.writer.step(policy) == ["team-0/trainadmit: replaced"]
    names = {r["resources"][0]["name"] for r in cluster.report("team-0")["results"]}
    assert "job-0000" not in names and names == {"job-0001", "job-0002", "job-0003", "job-0004"}
    for obj in jobs:
        if obj["metadata"]["namespace"] == "team-1":
            cluster.delete(obj)
    assert cluster.writer.step(policy) == ["team-1/trainadmit: deleted"] and cluster.report("team-1") is None


def test_openreports_where_served_else_policyreport(tmp_path):
    c = Cluster(served={"wgpolicyk8s.io/v1alpha2"})
    try:
        policy = load_policy(write_policy(tmp_path / "a", BACKENDS["native-job"]))
        _fill(c, policy, namespaces=2, per_namespace=2)
        c.writer.step(policy)
        polr = c.report("team-0", "wgpolicyk8s.io/v1alpha2", "policyreports")
        assert polr["kind"] == "PolicyReport" and problems(polr) == []
        c.view.set_served(SERVED | {"v1"})  # the OpenReports CRD got installed
        c.writer.step(policy)
        assert c.report("team-0")["kind"] == "Report" and problems(c.report("team-0")) == []
        assert c.report("team-0", "wgpolicyk8s.io/v1alpha2", "policyreports") is None
        assert c.writes("policyreports") == {"POST": 2, "DELETE": 2} and c.writes("reports") == {"POST": 2}
        c.view.set_served({"v1"})  # neither: nothing is written, and nothing deleted
        assert c.writer.step(policy) == []
    finally:
        c.close()


def test_nothing_is_written_from_a_stale_view(cluster, tmp_path):
    policy = load_policy(write_policy(tmp_path / "a", BACKENDS["native-job"]))
    _fill(cluster, policy, namespaces=1, per_namespace=2)
    cluster.view.max_age = 0.0
    cluster.view._fresh["nodes"] = -1e9  # confirmed long ago
    assert cluster.view.stale() and cluster.writer.step(policy) == [] and cluster.writes() == {}


def test_violation_counts_have_closed_labels(cluster, tmp_path, monkeypatch):
    policy = load_policy(write_policy(tmp_path / "a", BACKENDS["native-job"]))
    monkeypatch.setattr(report_writer, "MAX_NAMESPACE_LABELS", 2)
    _fill(cluster, policy, namespaces=4, per_namespace=5)
    extra = _job(PARTIAL, "more", "team-0", 59)  # team-0 has the most violations
    cluster.store(extra)
    seen = []
    cluster.writer.on_counts = seen.append
    cluster.writer.step(policy)
    counts = seen[-1]
    assert {ns for _, ns in counts} == {"team-0", "team-1", "other"}  # 2 namespaces by name, then "other"
    assert counts[("topology.whole-node", "team-0")] == 2 and counts[("topology.whole-node", "other")] == 2
    assert counts[("custom.owner-label", "team-0")] == 2
    assert {rule for rule, _ in counts} == {"topology.whole-node", "custom.owner-label"}
    assert cluster.writer.counts(policy) == counts


def test_metrics_name_rules_and_namespaces_and_forget_the_gone():
    from prometheus_client import generate_latest
    from prometheus_client.registry import REGISTRY

    from trainadmit.server.metrics import record_report_violations

    record_report_violations({("topology.whole-node", "team-0"): 2, ("custom.owner-label", "other"): 1})
    text = generate_latest(REGISTRY).decode()
    assert 'trainadmit_report_violations{namespace="team-0",rule="topology.whole-node"} 2.0' in text
    record_report_violations({("custom.owner-label", "other"): 3})
    text = generate_latest(REGISTRY).decode()
    assert 'rule="topology.whole-node"' not in text
    assert 'trainadmit_report_violations{namespace="other",rule="custom.owner-label"} 3.0' in text
    record_report_violations({})


# ---- the budgets' ResourceQuotas ------------------------------------------------------------------

def test_each_budget_becomes_a_resourcequota_kept_in_step_with_the_policy(policy, tmp_path):
    from kubernetes import client

    api = FakeAPIServer()
    try:
        for ns in ("team-nlp", "team-vision", "kube-system"):
            api.put_raw(f"/api/v1/namespaces/{ns}", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        core = client.CoreV1Api(_client(api))
        stored = lambda ns: api.objects.get(f"/api/v1/namespaces/{ns}/resourcequotas/{BUDGET_NAME}")  # noqa: E731
        budgets = BudgetQuotas(core, stored, log=lambda m: None)
        assert budgets.step(policy) == [f"team-nlp/{BUDGET_NAME}: created (requests.amd.com/gpu: 64, "
                                        "requests.nvidia.com/gpu: 64)"]  # team-vision's Quota sets no budget
        quota = stored("team-nlp")
        assert quota["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "trainadmit"}
        assert quota["metadata"]["annotations"]["trainadmit.io/budget"].startswith("Quota team-nlp spec.gpuQuota")
        assert budgets.step(policy) == []  # unchanged: nothing written
        lower = load_policy(write_policy(tmp_path / "lower", extra=[{
            "apiVersion": "trainadmit.io/v1alpha1", "kind": "Quota", "metadata": {"name": "a-team-nlp"},
            "spec": {"namespaces": ["team-nlp"], "gpuQuota": 32}}]))
        assert budgets.step(lower) == [f"team-nlp/{BUDGET_NAME}: updated (requests.amd.com/gpu: 32, "
                                       "requests.nvidia.com/gpu: 32)"]
        none = load_policy(write_policy(tmp_path / "none", extra=[{
            "apiVersion": "trainadmit.io/v1alpha1", "kind": "Quota", "metadata": {"name": "a-team-nlp"},
            "spec": {"namespaces": ["team-nlp"]}}]))
        assert budgets.step(none) == [f"team-nlp/{BUDGET_NAME}: deleted (the policy sets no budget here)"]
        theirs = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": BUDGET_NAME, "namespace": "team-nlp"},
                  "spec": {"hard": {"requests.nvidia.com/gpu": "8"}}}
        api.put_raw(f"/api/v1/namespaces/team-nlp/resourcequotas/{BUDGET_NAME}", theirs)
        assert budgets.step(policy) == [] and stored("team-nlp")["spec"]["hard"] == {"requests.nvidia.com/gpu": "8"}
    finally:
        api.close()


def test_no_budget_in_exempt_namespaces(policy):
    assert desired(policy, "kube-system") is None and desired(policy, "team-nlp") is not None


def test_every_reconciler_part_runs_and_the_first_failure_is_raised():
    """A missing permission for one part (here the reports) must not stop the others; the loop running the
    pass still hears of it (it logs it and shows it on /readyz)."""
    from trainadmit.cluster.reconciler import Reconciler

    ran = []

    def budgets(policy):
        ran.append("budgets")
        return ["team-nlp/trainadmit-gpu-budget: created"]

    def reports(policy):
        ran.append("reports")
        raise PermissionError("policyreports is forbidden")

    def later(policy):
        ran.append("later")
        return []

    elected = []
    reconciler = Reconciler(None, None, lambda: "a policy", [("reports", reports), ("budgets", budgets),
                                                             ("later", later)], on_elected=lambda: elected.append(1))
    with pytest.raises(PermissionError, match="forbidden"):
        reconciler.step()
    assert ran == ["reports", "budgets", "later"] and elected == [1]
    reconciler.parts = [("budgets", budgets)]
    assert reconciler.step() == ["budgets: team-nlp/trainadmit-gpu-budget: created"] and elected == [1]
