"""deploy/monitoring: the Grafana dashboard (a ConfigMap for the Grafana sidecar) and the PrometheusRule name only
what is exported, in PromQL that parses, and the PrometheusRule is one prometheus-operator's CRD accepts.

Each metric name is checked against what trainadmit's code registers (``support.monitoring.exported_by_code``:
every module imported, the registry read) and the kube-apiserver's own webhook metrics; each label a
selector matches on against the metric's labels. The CRD is prometheus-operator's own
(tests/fixtures/prometheus-operator/, SOURCES.md); the integration tier creates the rule on a real apiserver with
that CRD installed, and scrapes the names from real processes.
"""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest
from support.controlplane import load_manifests
from support.crd_prune import crd_schema, pruned
from support.monitoring import (
    APISERVER_METRICS,
    exported_by_code,
    expressions,
    rendered,
    samples,
    selectors,
)
from support.paths import FIXTURES

CRD = FIXTURES / "prometheus-operator" / "monitoring.coreos.com_prometheusrules.yaml"


@pytest.fixture(scope="module")
def objs():
    return rendered()


def _rule(objs) -> dict:
    [rule] = [o for o in objs if o["kind"] == "PrometheusRule"]
    return rule


def test_the_component_holds_a_dashboard_for_the_grafana_sidecar_and_the_rules(objs):
    assert sorted((o["kind"], o["metadata"]["name"]) for o in objs) == [
        ("ClusterRole", "trainadmit-metrics-reader"), ("ConfigMap", "trainadmit-dashboard"),
        ("PrometheusRule", "trainadmit"), ("ServiceMonitor", "trainadmit")]
    [dashboard] = [o for o in objs if o["kind"] == "ConfigMap"]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"  # the sidecar's default label
    assert all(o["metadata"]["namespace"] == "trainadmit-system" for o in objs if o["kind"] != "ClusterRole")
    [board] = [json.loads(text) for text in dashboard["data"].values()]
    assert board["uid"] == "trainadmit" and len(board["panels"]) > 10
    assert [v["type"] for v in board["templating"]["list"]] == ["datasource"]  # no Prometheus baked in


def test_prometheus_scrapes_the_metrics_port_with_its_token_as_the_reader_role_allows(objs):
    """The ServiceMonitor selects the metrics Service (never the webhook's), by its port name, over HTTPS verified
    against the serving CA, with a bearer token; the reader role grants exactly what the server's filter asks
    (``server.metrics_auth``). On main nothing scraped the metrics port: there was none."""
    from support.kube_fixtures import DEPLOY

    from trainadmit.server.metrics_auth import AUTHORIZED_PATH, AUTHORIZED_VERB

    [monitor] = [o for o in objs if o["kind"] == "ServiceMonitor"]
    service = load_manifests(DEPLOY / "metrics-service.yaml")[0]
    labels = {**service["metadata"]["labels"], "app.kubernetes.io/name": "trainadmit"}  # base's kustomize labels
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert "metrics" in monitor["spec"]["selector"]["matchLabels"].values()
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"] and endpoint["scheme"] == "https"
    assert endpoint["path"] == AUTHORIZED_PATH and endpoint["bearerTokenFile"]
    assert endpoint["tlsConfig"]["ca"]["secret"] == {"name": "trainadmit-tls", "key": "ca.crt"}
    [role] = [o for o in objs if o["kind"] == "ClusterRole"]
    assert role["rules"] == [{"nonResourceURLs": [AUTHORIZED_PATH], "verbs": [AUTHORIZED_VERB]}]


def test_every_alert_the_issue_asks_for_is_there(objs):
    alerts = {r["alert"]: r["expr"] for g in _rule(objs)["spec"]["groups"] for r in g["rules"]}
    wanted = {"TrainadmitWebhookUnreachable": "apiserver_admission_webhook_rejection_count",
              "TrainadmitWebhookSlow": "apiserver_admission_webhook_admission_duration_seconds_bucket",
              "TrainadmitDenialRateHigh": 'result="denied"',
              "TrainadmitReconcilerLagging": "trainadmit_reconciler_event_lag_seconds_bucket",
              "TrainadmitGangsWaitingTooLong": "trainadmit_placement_longest_wait_seconds",
              "TrainadmitReportWritesFailing": 'kind="Report", result="error"',
              "TrainadmitCertificateExpiresSoon": "trainadmit_certificate_expiry_timestamp_seconds",
              "TrainadmitSettingUnhonoured": "trainadmit_policy_setting_unhonoured"}
    for alert, names in wanted.items():
        assert names in alerts[alert], alert


def test_every_expression_is_promql_naming_only_exported_metrics_and_their_labels(objs):
    known = {**samples(exported_by_code()), **samples(APISERVER_METRICS)}
    found = [s for where, expr in expressions(objs) for s in selectors(where, expr)]
    assert len(found) > 40
    unknown = sorted({f"{s.name} ({s.where})" for s in found if s.name not in known})
    assert unknown == [], "not exported by trainadmit's /metrics (nor by the kube-apiserver)"
    wrong = sorted({f"{s.name}{{{label}}} ({s.where})" for s in found for label in s.labels
                    if label not in known[s.name][1]})
    assert wrong == []


def test_a_name_or_label_that_is_not_exported_is_found():
    """The check can fail: a misspelt metric, a label the metric does not have, an expression that is no PromQL."""
    known = samples(exported_by_code())
    [typo] = selectors("x", "sum(rate(trainadmit_denial_total[5m]))")
    assert typo.name not in known
    [label] = selectors("x", 'rate(trainadmit_denials_total{reason="x"}[5m])')
    assert "reason" not in known[label.name][1]
    with pytest.raises(ValueError):
        selectors("x", "sum by (rule (rate(trainadmit_denials_total[5m]))")


def _validator() -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(crd_schema(CRD, "v1"))


def test_the_prometheus_rule_is_valid_for_prometheus_operators_crd(objs):
    rule = _rule(objs)
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert [e.message for e in _validator().iter_errors(rule)] == []
    assert pruned(rule, crd_schema(CRD, "v1")) == []  # nothing the apiserver would drop
    broken = copy.deepcopy(rule)
    broken["spec"]["groups"][0]["rules"][0]["for"] = "five minutes"  # the check can fail
    del broken["spec"]["groups"][1]["rules"][0]["expr"]
    assert len(list(_validator().iter_errors(broken))) == 2
