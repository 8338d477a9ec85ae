"""Day two on a real kube-apiserver 1.36.2: what a platform team sees of trainadmit once it runs.

One control plane for the module (the tier's gates: the Workload API served, so the native pod-group gang the
policy asks for needs trainadmit's reconciler), installed as docs/install.md's "Try it" leaves a cluster before
Multus: deploy/'s namespace, ServiceAccount, RBAC and PriorityClasses, examples/prerequisites/' namespaces and
claims, GPU nodes of the bundled pools, and no NetworkAttachmentDefinition CRD. trainadmit runs as deploy/'s
ServiceAccount with ``serve --cluster-live`` and without ``--reconcile``, registered with deploy/'s webhook
configurations. The tests, each of which failed on the code before this work:

- the missing reconciler, said four ways: ``/readyz`` degraded naming it, the gauge, a log line, and kubectl's
  warning on the gang Job whose PodGroup nobody will create;
- Multus installed after the server started: the server admits the Job naming its network within 10 s (it
  refused it, saying the API was not seen yet), as ``check --kubeconfig`` does;
- one count per submission: Jobs through the real apiserver (``/mutate``, its reinvocation, ``/validate``) raise
  ``trainadmit_warnings_total`` by one each;
- every metric name deploy/monitoring's dashboard and alerts use is exported: by the server's /metrics, by the
  apiserver's, or (the elected loops' families) by the code; and the apiserver stores the PrometheusRule with
  prometheus-operator's own CRD;
- a Job created while the webhooks were removed gets a non-pass report result naming what it lacks, next to the
  same Job admitted through the webhook.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from support.cli import run_cli
from support.controlplane import ControlPlane, assets_from_env, load_manifests, wait_until
from support.kube_fixtures import (
    DEPLOY,
    OPERATOR_CRDS,
    PHASES,
    SKIP_REASON,
    SUITE_APISERVER_ARGS,
    Webhook,
    start_trainadmit,
    stop_trainadmit,
    webhooks_removed,
)
from support.manifests import load_yaml
from support.monitoring import MONITORING, exported_by_code, expressions, rendered, selectors
from support.paths import EXAMPLES, FIXTURES, ROOT
from support.pool_nodes import create_nodes, domains

from trainadmit.engine import load_policy

pytestmark = [pytest.mark.xdist_group("day-two"),
              pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")]

NS = "team-nlp"
PHASE = "native-podgroup"  # 1.36 with GenericWorkload: schedulingGroup and a PodGroup from the reconciler
# the families only the Lease-elected loops (--reconcile) observe: a server without them exports none of their
# series; the code registers them (tests/project/test_monitoring.py)
ELECTED_ONLY = {"trainadmit_preflight_failures_total", "trainadmit_preflight_ready_seconds",
                "trainadmit_report_violations",
                # the reconciler's writes and event lag (cluster.reconciler)
                "trainadmit_reconciler_writes_total", "trainadmit_reconciler_event_lag_seconds",
                "trainadmit_reconciler_pass_seconds",
                # the placement gate's ungater (cluster.placement_metrics)
                "trainadmit_placement_gangs_released_total", "trainadmit_placement_gangs_waiting",
                "trainadmit_placement_longest_wait_seconds", "trainadmit_placement_wait_seconds"}


@dataclass
class DayTwo:
    cp: ControlPlane
    hook: Webhook
    configs: list[dict]
    base: Path

    @property
    def http(self):
        return self.cp.http

    def kubectl(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(["kubectl", "--kubeconfig", str(self.cp.kubeconfig), *args], input=stdin,
                              capture_output=True, text=True, timeout=60, check=False)

    def metric(self, sample: str) -> float:
        return self.hook.server.metric(sample) or 0.0  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def day_two(tmp_path_factory) -> Iterator[DayTwo]:
    if assets_from_env() is None:
        pytest.skip(SKIP_REASON)
    base = tmp_path_factory.mktemp("day-two")
    cp = ControlPlane(extra_args=SUITE_APISERVER_ARGS)
    cp.start()
    try:
        cp.apply(load_manifests(*(DEPLOY / f for f in ("namespace.yaml", "serviceaccount.yaml", "rbac.yaml",
                                                       "priorityclasses.yaml"))))
        prerequisites = EXAMPLES / "prerequisites"
        cp.apply(load_manifests(prerequisites / "1-namespaces.yaml", prerequisites / "2-claims.yaml"))
        cp.ensure_namespace("trainadmit-system")
        policy = load_policy(ROOT / "policies")
        create_nodes(cp.http, policy.pools["h100-ib"], domains("h100", "rack", [4], outer={"zone": "z1"}))
        create_nodes(cp.http, policy.pools["l40s-eth"], domains("l40s", "zone", [2]))
        hook, configs = start_trainadmit(cp, base, PHASES, PHASE)
        try:
            yield DayTwo(cp, hook, configs, base)
        finally:
            stop_trainadmit(cp, hook, configs)
    finally:
        cp.stop()


def _job(path: Path, name: str) -> dict:
    [job] = [d for d in load_yaml(path) if d.get("kind") == "Job"]
    return {**job, "metadata": {**job["metadata"], "name": name}}


def test_multus_installed_later_is_seen_within_seconds_and_check_agrees(day_two, tmp_path):
    """The H100 Job names the pool's Multus network: refused while the API is not served, saying it was not seen
    yet; admitted by the running server within 10 s of the CRD and the network, and by `check --kubeconfig`."""
    http = day_two.http
    llama = _job(EXAMPLES / "llama-pretrain.yaml", "llama-late-multus")
    (tmp_path / "llama.yaml").write_text(yaml.safe_dump(llama))
    refused = day_two.kubectl("create", "--dry-run=server", "-f", str(tmp_path / "llama.yaml"))
    assert refused.returncode != 0 and "[references.network-missing]" in refused.stderr
    assert "has not seen this cluster serve k8s.cni.cncf.io/v1 NetworkAttachmentDefinition" in refused.stderr
    checked = run_cli("check", "--kubeconfig", str(day_two.cp.kubeconfig), "-p", str(day_two.hook.policy_dir),
                      str(tmp_path / "llama.yaml"))
    assert checked.returncode == 1 and "references.network-missing" in checked.stdout
    started = time.monotonic()
    day_two.cp.install_crds(OPERATOR_CRDS / "multus" / "crds")
    http.apply(load_manifests(EXAMPLES / "prerequisites" / "3-ib-ipoib-network.yaml"))
    installed = time.monotonic()

    def admitted() -> bool:
        return day_two.kubectl("create", "--dry-run=server", "-f", str(tmp_path / "llama.yaml")).returncode == 0

    wait_until(admitted, timeout=10, interval=0.2, what="the server to admit the Job once Multus is installed")
    seen = time.monotonic()
    print(f"CRD established and network created in {installed - started:.1f}s; admitted {seen - installed:.1f}s "
          "after")
    checked = run_cli("check", "--kubeconfig", str(day_two.cp.kubeconfig), "-p", str(day_two.hook.policy_dir),
                      str(tmp_path / "llama.yaml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_server_without_its_reconciler_says_so_four_ways(day_two, tmp_path):
    server = day_two.hook.server
    body = json.loads(server.metrics_client(keep_alive=False).request("GET", "/readyz")[1])  # type: ignore[attr-defined]
    assert body["status"] == "degraded"
    assert any(line.startswith("unhonoured reconciler: gang backend native/pod-group gets its PodGroups from "
                               "trainadmit's reconciler, and serve runs without --reconcile") for line in body["degraded"])
    assert server.metric('trainadmit_policy_setting_unhonoured{setting="reconciler"}') == 1.0  # type: ignore
    [line] = [x for x in server.log_lines() if x.get("event") == "setting_unhonoured"]  # type: ignore
    assert line["setting"] == "--reconcile" and "native/pod-group" in line["message"]
    bert = _job(EXAMPLES / "bert-finetune-ethernet.yaml", "bert-no-reconciler")
    (tmp_path / "bert.yaml").write_text(yaml.safe_dump(bert))
    created = day_two.kubectl("create", "-f", str(tmp_path / "bert.yaml"))
    try:
        assert created.returncode == 0, created.stderr
        warnings = [x for x in created.stderr.splitlines() if x.startswith("Warning: trainadmit [reconciler.missing]")]
        assert len(warnings) == 1, created.stderr  # both webhooks said it: kubectl shows it once
        assert ("its PodGroup bert-no-reconciler-gang (scheduling.k8s.io/v1alpha2) and the release of its Pods' "
                "scheduling gate trainadmit.io/placement come from trainadmit's reconciler, and none runs (serve runs "
                "without --reconcile): admitted, its 2 Pods wait Pending until one runs" in warnings[0]), warnings[0]
        assert "trainadmit serve --reconcile" in warnings[0]
        stored = day_two.http.get("batch/v1", "Job", bert["metadata"]["name"], NS)
        assert stored["spec"]["template"]["spec"]["schedulingGroup"] == {"podGroupName": "bert-no-reconciler-gang"}
        assert day_two.http.get_or_none("scheduling.k8s.io/v1alpha2", "PodGroup", "bert-no-reconciler-gang", NS) is None
    finally:
        day_two.http.delete(bert, propagation="Background")


def test_each_submission_is_counted_once(day_two, tmp_path):
    """Three gang Jobs through the apiserver (each asked of /mutate, maybe again, and of /validate) and one the
    policy refuses at /mutate: each submission's warning counted once, the denial once."""
    warned = 'trainadmit_warnings_total{rule="reconciler.missing"}'
    denied = 'trainadmit_denials_total{rule="topology.whole-node"}'
    before = (day_two.metric(warned), day_two.metric(denied))
    names = [f"bert-count-{i}" for i in range(3)]
    jobs = [_job(EXAMPLES / "bert-finetune-ethernet.yaml", name) for name in names]
    (tmp_path / "jobs.yaml").write_text(yaml.safe_dump_all(jobs))
    try:
        assert day_two.kubectl("create", "-f", str(tmp_path / "jobs.yaml")).returncode == 0
        partial = _job(EXAMPLES / "denied-partial-nodes.yaml", "partial-count")
        (tmp_path / "partial.yaml").write_text(yaml.safe_dump(partial))
        refused = day_two.kubectl("create", "-f", str(tmp_path / "partial.yaml"))
        assert refused.returncode != 0 and "[topology.whole-node]" in refused.stderr
        server = day_two.hook.server
        lines = server.wait_log(lambda x: x.get("event") == "decision" and x.get("name") in names  # type: ignore
                                and x.get("webhook") == "validate")
        assert len(lines) == 3 and all(x["warned"] and "reconciler.missing" in x["warned"] for x in lines)
        calls = [x for x in server.log_lines() if x.get("event") == "decision" and x.get("name") in names]  # type: ignore
        assert len(calls) >= 6  # at least /mutate and /validate per Job: counted once each all the same
        # four submissions warned: the three Jobs, and the refused one (a gang too: /mutate refused it, and its
        # answer carried the same warning); one was denied
        wait_until(lambda: day_two.metric(warned) >= before[0] + 4, timeout=5, what="four warnings counted")
        assert (day_two.metric(warned), day_two.metric(denied)) == (before[0] + 4, before[1] + 1)
    finally:
        for job in jobs:
            day_two.http.delete(job, propagation="Background")


def _chunked_once(port: int) -> None:
    """A chunked upload, which the server refuses (411) before its app sees it (the apiserver never sends one)."""
    import socket
    import ssl

    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="trainadmit") as tls:
        tls.sendall(b"POST /validate HTTP/1.1\r\nHost: trainadmit\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
        assert tls.recv(64).startswith(b"HTTP/1.1 411")


def _fail_open_once(day_two: DayTwo) -> None:
    """A mutating webhook with failurePolicy Ignore that cannot be called, asked once about a ConfigMap: the
    apiserver lets it through and counts apiserver_admission_webhook_fail_open_count."""
    http, ns = day_two.http, "fail-open-probe"
    day_two.cp.ensure_namespace(ns)
    config = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
              "metadata": {"name": "fail-open-probe"},
              "webhooks": [{"name": "fail-open-probe.trainadmit.test", "failurePolicy": "Ignore", "timeoutSeconds": 1,
                            "sideEffects": "None", "admissionReviewVersions": ["v1"],
                            "clientConfig": {"url": "https://127.0.0.1:1/unreachable"},
                            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                       "resources": ["configmaps"]}]}]}
    http.create(config)
    probe = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "probe", "namespace": ns}}

    def counted() -> bool:
        http.create(probe, dry_run=True)
        return "apiserver_admission_webhook_fail_open_count{" in http.request("GET", "/metrics", raw=True).decode()

    try:
        wait_until(counted, timeout=30, interval=0.5, what="the apiserver to count a call that failed open")
    finally:
        http.delete(config)


def test_every_dashboard_and_alert_metric_is_exported_and_the_rule_is_stored(day_two, tmp_path):
    http, server = day_two.http, day_two.hook.server
    # what the apiserver measures of its webhook calls exists once it made some (the tests above did); a call that
    # fails open has a family of its own: one made here, to a webhook nobody serves, on a namespace of its own
    _fail_open_once(day_two)
    apiserver = http.request("GET", "/metrics", raw=True).decode()
    served = server.client(keep_alive=False)  # type: ignore[attr-defined]
    served.request("POST", "/validate", b"not a review")  # a 400: the bad requests' family has a series
    _chunked_once(server.port)  # type: ignore[attr-defined]  # a 411 before the app: the early responses' family
    ours = server.metrics_client(keep_alive=False).request("GET", "/metrics")[1].decode()  # type: ignore[attr-defined]
    found = [s for where, expr in expressions(rendered()) for s in selectors(where, expr)]
    names = {s.name for s in found}
    scraped = {line.split("{")[0].split(" ")[0] for text in (apiserver, ours) for line in text.splitlines()
               if line and not line.startswith("#")}
    missing = sorted(names - scraped)
    assert [n for n in missing if not n.startswith("trainadmit_")] == [], "the apiserver exports no such metric"
    code = {n for family, (kind, _) in exported_by_code().items()
            for n in ([family] if kind != "histogram" else [family + "_bucket", family + "_sum", family + "_count"])}
    elected = {n for family in ELECTED_ONLY for n in (family, family + "_bucket", family + "_sum", family + "_count")}
    assert [n for n in missing if n not in elected] == [], "trainadmit's /metrics exports no such metric"
    assert all(n in code for n in missing)
    for name in ("mutate.trainadmit.io", "validate.trainadmit.io"):  # the alerts' name matcher matches real series
        assert any(line.startswith("apiserver_admission_webhook_admission_duration_seconds_bucket{")
                   and f'name="{name}"' in line for line in apiserver.splitlines()), name
    # prometheus-operator's CRD (tests/fixtures/prometheus-operator), and the component as kubectl renders it
    day_two.cp.install_crds(FIXTURES / "prometheus-operator" / "monitoring.coreos.com_prometheusrules.yaml")
    objs = rendered()
    # the ServiceMonitor's CRD is not among the fixtures (tests/project/test_monitoring.py checks its shape against
    # the Service and the reader role it names): every other object of the component is stored
    for obj in (o for o in objs if o["kind"] != "ServiceMonitor"):
        stored = http.create(obj, field_validation="Strict")
        if obj["kind"] == "PrometheusRule":
            assert stored["spec"] == obj["spec"]  # nothing pruned or defaulted away
    assert (MONITORING / "dashboard.json").exists()


def test_a_job_that_bypassed_admission_is_no_pass_next_to_the_same_job_admitted(day_two, tmp_path):
    """bert-finetune created while the webhooks were removed (no gang, no pool placement) and the same Job through
    them: in `audit -o report` (the reports `serve --reconcile` writes) the first has a result of its own naming
    what it lacks, the second not; audit's text calls them WOULD CHANGE and COMPLIANT."""
    http = day_two.http
    bypassed = _job(EXAMPLES / "bert-finetune-ethernet.yaml", "bert-bypassed")
    admitted = _job(EXAMPLES / "bert-finetune-ethernet.yaml", "bert-admitted")
    try:
        with webhooks_removed(day_two.cp, day_two.hook):
            http.create(bypassed)
        http.create(admitted)
        args = ("audit", "--kubeconfig", str(day_two.cp.kubeconfig), "-p", str(day_two.hook.policy_dir))
        result = run_cli(*args, "-o", "report")
        assert result.returncode == 0, result.stderr
        [report] = [d for d in yaml.safe_load_all(result.stdout) if d and d["metadata"]["namespace"] == NS]
        by_name: dict[str, list[tuple[str, str]]] = {}
        for r in report["results"]:
            by_name.setdefault(r["resources"][0]["name"], []).append((r["result"], r.get("rule", "")))
        # the admitted one passes (what this cluster lacks for its gang is a note, the platform's to change: named,
        # not counted); the one stored without admission warns what it lacks, and nothing says it passes
        assert by_name["bert-admitted"] == [("pass", "")], by_name
        assert by_name["bert-bypassed"] == [("warn", "final.not-admitted")], by_name
        assert all(result != "pass" for result, _ in by_name["bert-bypassed"])
        [lacks] = [r for r in report["results"] if r["resources"][0]["name"] == "bert-bypassed"
                   and r.get("rule") == "final.not-admitted"]
        assert lacks["message"].startswith("it was not admitted through trainadmit's webhooks (created while they were "
                                           "away, or skipped): it lacks ")
        assert "gang" in lacks["properties"]["would-set"] and "placement" in lacks["properties"]["would-set"]
        text = run_cli(*args).stdout
        assert "Job team-nlp/bert-bypassed: WOULD CHANGE" in text and "Job team-nlp/bert-admitted: COMPLIANT" in text
    finally:
        for job in (bypassed, admitted):
            http.delete(job, propagation="Background")
