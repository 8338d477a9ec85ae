"""`serve --reconcile` writes policy reports on a real kube-apiserver, as deploy/'s ServiceAccount.

What it must show: reports that the installed report CRD accepts (wgpolicyk8s.io first, then OpenReports
once its CRD is installed, the PolicyReports then removed), one result per workload and rule; a change
of the policy directory rewrites them within the reconciler's period; deleting a Job removes its
results, deleting every workload of a namespace its report; and a policy change over 2,000 workloads
writes one report per namespace, counted by the apiserver itself (its apiserver_request_total)."""

from __future__ import annotations

import copy
import re
import time

from support.builders import job
from support.controlplane import wait_until
from support.kube_fixtures import (
    APISERVER,
    EXTRA_POLICY,
    OPERATOR_CRDS,
    PHASES,
    REPLACED_POLICY,
    SYSTEM_NS,
    reconciling_server,
    webhooks_removed,
)
from support.manifests import load_yaml
from support.paths import EXAMPLES, FIXTURES
from support.policies import write_policy
from support.reports import problems

from trainadmit.engine import load_policy

pytestmark = APISERVER
REPORT_CRDS = FIXTURES / "reports" / "crds"
NS = "team-reports"  # Quota "teams": no GPU budget; the owner-label rule (warn) applies to team-* namespaces
POLR = ("wgpolicyk8s.io/v1alpha2", "PolicyReport")
REPORT = ("openreports.io/v1alpha1", "Report")


def _doc(path, kind: str, name: str, namespace: str = NS) -> dict:
    [obj] = [d for d in load_yaml(path) if d.get("kind") == kind]
    obj = copy.deepcopy(obj)
    obj["metadata"] = {**{k: v for k, v in obj["metadata"].items() if k != "generateName"}, "name": name,
                       "namespace": namespace}
    return obj


def _results(report: dict | None) -> set[tuple[str, str, str]]:
    return {(r["resources"][0]["name"], r.get("rule", ""), r["result"]) for r in (report or {}).get("results") or []}


def _policy(directory, **platform):
    """The bundled policy with the scheduler's gates declared (discovery cannot see them; undeclared, every gang
    Job here would also warn gang.cluster-support and topology.colocation-risk)."""
    gates = {"featureGates": ["GenericWorkload", "GangScheduling", "TopologyAwareWorkloadScheduling"]}
    return load_policy(write_policy(directory, {**PHASES["default"], **gates, **platform}, EXTRA_POLICY,
                                    REPLACED_POLICY))


def test_reports_are_written_rewritten_and_removed(webhook, cluster, tmp_path):
    cp, http = cluster.cp, cluster.http
    cp.install_crds(REPORT_CRDS / "wgpolicyk8s.io_policyreports.yaml",
                    OPERATOR_CRDS / "lws" / "crds" / "leaderworkerset.x-k8s.io_leaderworkersets.yaml")
    cp.ensure_namespace(NS)
    policy_dir = tmp_path / "policies"
    policy = _policy(policy_dir)
    stored = []
    try:
        with webhooks_removed(cp, webhook):  # so that what breaks the policy gets stored too
            stored.append(http.create(_doc(EXAMPLES / "denied-partial-nodes.yaml", "Job", "partial-nodes")))
            stored.append(http.create(_doc(EXAMPLES / "single-node-eval.yaml", "Job", "eval")))
            stored.append(http.create(_doc(OPERATOR_CRDS / "lws" / "examples" / "vllm-gpu-lws.yaml",
                                           "LeaderWorkerSet", "vllm")))
        with reconciling_server(cp, policy_dir, webhook.kubeconfig, tmp_path, "reports-writer") as server:
            polr = wait_until(lambda: http.get(*POLR, "trainadmit", NS), timeout=90, what="the PolicyReport")
            # the violations metric, written by the elected replica, served by its workers' /metrics
            assert wait_until(lambda: _violations(server).get(("topology.whole-node", NS)), timeout=30,
                              what="the violations metric") == 1.0
            assert _violations(server).get(("custom.owner-label", NS)) == 2.0
            assert problems(polr) == []  # the apiserver validated it against the CRD on write; this says so too
            # by hand, from the files and the bundled policy: the partial-nodes example takes 6 of 8 GPUs per
            # node, the two Jobs have no owner label (the rule asks it of Jobs), LeaderWorkerSet has no native gang (a note);
            # the two admitted ones were stored without trainadmit's webhooks and lack what it sets
            assert _results(polr) == {("partial-nodes", "topology.whole-node", "fail"),
                                      ("partial-nodes", "custom.owner-label", "warn"),
                                      ("eval", "custom.owner-label", "warn"), ("eval", "final.not-admitted", "warn"),
                                      ("vllm", "final.not-admitted", "warn")}
            assert polr["summary"] == {"pass": 0, "fail": 1, "warn": 4, "error": 0, "skip": 0}
            [vllm] = [r for r in polr["results"] if r["resources"][0]["name"] == "vllm"]  # the gang: a note, named
            assert vllm["properties"]["notes"] == "gang.unsupported"
            assert polr["metadata"]["annotations"]["trainadmit.io/policy-generation"] == policy.generation
            # the policy changes: the owner label is no longer asked for
            changed = _policy(policy_dir, rules={"custom.owner-label": "off", "storage.shm-exceeds-memory": "warn"})

            def rewritten():
                report = http.get(*POLR, "trainadmit", NS)
                annotations = report["metadata"]["annotations"]
                return report if annotations["trainadmit.io/policy-generation"] == changed.generation else None

            polr = wait_until(rewritten, timeout=30, what="the report of the new policy generation")
            assert _results(polr) == {("partial-nodes", "topology.whole-node", "fail"),
                                      ("eval", "final.not-admitted", "warn"), ("vllm", "final.not-admitted", "warn")}
            wait_until(lambda: ("custom.owner-label", NS) not in _violations(server), timeout=30,
                       what="the metric to forget a rule that no longer fires")
            eval_result = next(r for r in polr["results"] if r["resources"][0]["name"] == "eval")
            assert eval_result["properties"]["would-set"] == "hardware, nccl, placement, preflight, priority, rdma, storage"
            # a Job is deleted: its results go
            http.delete(stored.pop(0), propagation="Background")
            wait_until(lambda: "partial-nodes" not in {n for n, _, _ in _results(http.get(*POLR, "trainadmit", NS))},
                       timeout=30, what="the deleted Job's results to go")
            # the OpenReports CRD is installed: the reports move there
            cp.install_crds(REPORT_CRDS / "openreports.io_reports.yaml")
            report = wait_until(lambda: http.get(*REPORT, "trainadmit", NS), timeout=60, what="the OpenReports Report")
            assert problems(report) == [] and report["source"] == "trainadmit"
            assert _results(report) == {("eval", "final.not-admitted", "warn"), ("vllm", "final.not-admitted", "warn")}
            wait_until(lambda: http.get_or_none(*POLR, "trainadmit", NS) is None, timeout=30,
                       what="the PolicyReport to be removed")
            # every workload of the namespace goes: so does its report
            for obj in stored:
                http.delete(obj, propagation="Background")
            stored.clear()
            wait_until(lambda: http.get_or_none(*REPORT, "trainadmit", NS) is None, timeout=30,
                       what="the namespace's report to be removed")
    finally:
        for obj in stored:
            http.delete(obj, propagation="Background")


def _violations(server) -> dict[tuple[str, str], float]:
    """trainadmit_report_violations samples of the server's /metrics, by (rule, namespace)."""
    text = server.metrics_client(keep_alive=False).request("GET", "/metrics")[1].decode()
    out = {}
    for m in re.finditer(r"^trainadmit_report_violations\{([^}]*)\} (\S+)$", text, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        out[(labels["rule"], labels["namespace"])] = float(m.group(2))
    return out


def _writes(http) -> dict[str, float]:
    """The apiserver's own count of successful write requests on reports of either API, by verb (a write refused
    with 409 Conflict and retried is the writer learning the stored state, not a second write)."""
    text = http.request("GET", "/metrics", raw=True).decode()
    out: dict[str, float] = {}
    for m in re.finditer(r"^apiserver_request_total\{([^}]*)\} (\S+)$", text, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if labels.get("resource") in ("reports", "policyreports") and labels.get("verb") in (
                "POST", "PUT", "PATCH", "DELETE", "APPLY") and labels.get("code", "200").startswith("2"):
            out[labels["verb"]] = out.get(labels["verb"], 0.0) + float(m.group(2))
    return out


def _passes(http, count: int) -> None:
    """Wait for ``count`` more passes of the reconciler: each renews its Lease first."""
    from trainadmit.cluster.lease import RECONCILER_LEASE

    def renewed() -> str:
        return http.get("coordination.k8s.io/v1", "Lease", RECONCILER_LEASE, SYSTEM_NS)["spec"]["renewTime"]

    seen = [renewed()]

    def advanced() -> bool:
        now = renewed()
        if now != seen[-1]:
            seen.append(now)
        return len(seen) > count

    wait_until(advanced, timeout=60, interval=0.2, what=f"{count} passes of the reconciler")


def _delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0)}


def test_a_policy_change_over_2000_workloads_writes_one_report_per_namespace(webhook, cluster, tmp_path):
    cp, http = cluster.cp, cluster.http
    cp.install_crds(REPORT_CRDS / "openreports.io_reports.yaml")
    namespaces = [f"team-r{i:02d}" for i in range(20)]
    for ns in namespaces:
        cp.ensure_namespace(ns)
    policy_dir = tmp_path / "policies"
    # the Jobs are created around the webhooks only to spare 4,000 admission calls: they stand for admitted ones
    admitted = {"final.not-admitted": "off"}
    policy = _policy(policy_dir, rules=admitted)
    started = time.monotonic()
    try:
        with webhooks_removed(cp, webhook):  # 2,000 creates, without 4,000 admission calls
            for ns in namespaces:
                for i in range(100):
                    http.create(job(name=f"w{i:03d}", namespace=ns, workers=1, gpus=8,
                                    labels={"owner": "ml"} if i % 10 else None))
        print(f"2,000 Jobs created in {time.monotonic() - started:.1f}s")
        with reconciling_server(cp, policy_dir, webhook.kubeconfig, tmp_path, "reports-at-scale"):
            def generation_everywhere(generation: str) -> bool:
                listed = http.request("GET", "/apis/openreports.io/v1alpha1/reports")["items"]  # every namespace's
                found = {r["metadata"]["namespace"]: r["metadata"]["annotations"]["trainadmit.io/policy-generation"]
                         for r in listed if r["metadata"]["name"] == "trainadmit"}
                return all(found.get(ns) == generation for ns in namespaces)

            wait_until(lambda: generation_everywhere(policy.generation), timeout=180, what="20 reports")
            report = http.get(*REPORT, "trainadmit", namespaces[0])
            assert report["summary"] == {"pass": 90, "fail": 0, "warn": 10, "error": 0, "skip": 0}
            _passes(http, 2)  # the first round settled (a write still in flight counts before the change, not after)
            before = _writes(http)
            changed = _policy(policy_dir, rules={**admitted, "custom.owner-label": "off",
                                                 "storage.shm-exceeds-memory": "warn"})
            wait_until(lambda: generation_everywhere(changed.generation), timeout=180, what="20 rewritten reports")
            _passes(http, 2)  # two more passes of the reconciler: nothing more is written
            assert _delta(_writes(http), before) == {"PUT": 20.0}  # one write per namespace, and only one
            assert http.get(*REPORT, "trainadmit", namespaces[0])["summary"]["warn"] == 0
    finally:
        for ns in namespaces:
            http.request("DELETE", f"/apis/batch/v1/namespaces/{ns}/jobs")
            http.delete({"apiVersion": REPORT[0], "kind": REPORT[1], "metadata": {"name": "trainadmit", "namespace": ns}})
