"""deploy/monitoring's metric names, and where each comes from: what trainadmit's code registers and the kube-apiserver's own admission webhook metrics.

Shared by the fast check (tests/project/test_monitoring.py: every name and label a dashboard panel or an alert
names is one of these, every expression parses as PromQL) and the integration tier (the same names scraped from a
real server's and a real kube-apiserver's /metrics).
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

import yaml

from support.paths import ROOT

MONITORING = ROOT / "deploy" / "monitoring"

# the kube-apiserver's metrics of its calls to admission webhooks (k8s.io/apiserver pkg/admission/metrics), the
# only view of a webhook that cannot be reached: name -> (type, labels); the integration tier reads them from a
# real kube-apiserver 1.36.2 after it called trainadmit
APISERVER_METRICS: dict[str, tuple[str, tuple[str, ...]]] = {
    "apiserver_admission_webhook_admission_duration_seconds": ("histogram", ("name", "type", "operation", "rejected")),
    "apiserver_admission_webhook_rejection_count": ("counter", ("name", "type", "operation", "error_type",
                                                                 "rejection_code")),
    "apiserver_admission_webhook_fail_open_count": ("counter", ("name", "type")),
}
SUFFIXES = {"counter": ("",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}
GRAFANA_VARIABLES = re.compile(r"\$__(rate_interval|interval|range)")


@dataclass(frozen=True)
class Selector:
    """One series selector of an expression: the metric name and the label names it matches on."""

    name: str
    labels: tuple[str, ...]
    where: str  # "alert TrainadmitWebhookSlow", "panel Latency …"


def samples(families: dict[str, tuple[str, tuple[str, ...]]]) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Sample names (``x_bucket``, ``x_total``) of families (the name as declared: a counter ends in
    ``_total``), with the family's labels (and ``le`` for a histogram's buckets)."""
    out = {}
    for name, (kind, labels) in families.items():
        for suffix in SUFFIXES[kind]:
            out[name + suffix] = (kind, labels + (("le",) if suffix == "_bucket" else ()))
    return out


@cache
def exported_by_code() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Every metric family trainadmit's code registers (every module of the package imported, then
    prometheus_client's registry read) and those ``server.metrics`` computes at scrape time: name -> (type,
    labels), counters with their ``_total``. (``__main__`` modules are not imported: they run the program.)"""
    from prometheus_client import REGISTRY

    import trainadmit

    for module in pkgutil.walk_packages(trainadmit.__path__, "trainadmit."):
        if not module.name.endswith(".__main__"):  # a program, not a module: it runs when imported
            importlib.import_module(module.name)
    from trainadmit.server import metrics

    out: dict[str, tuple[str, tuple[str, ...]]] = {}
    for collector in list(REGISTRY._collector_to_names):  # the registry's own: no public list of collectors
        for family in collector.describe() if hasattr(collector, "describe") else ():
            if not family.name.startswith("trainadmit_"):
                continue
            name = family.name + ("_total" if family.type == "counter" else "")
            out[name] = (family.type, tuple(getattr(collector, "_labelnames", ())))
    out[metrics.VIEW_AGE] = ("gauge", ())
    out[metrics.UNHONOURED] = ("gauge", ("setting",))
    assert set(metrics.SCRAPE_TIME_GAUGES) <= set(out)
    return out


def rendered() -> list[dict]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl (with kustomize) is needed to render deploy/monitoring"
    out = subprocess.run([kubectl, "kustomize", str(MONITORING)], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def expressions(objs: list[dict]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) of every alert of the PrometheusRule and every target of the dashboard (Grafana's
    ``$__rate_interval`` as the duration it stands for)."""
    for obj in objs:
        if obj["kind"] == "PrometheusRule":
            for group in obj["spec"]["groups"]:
                for rule in group["rules"]:
                    yield f"alert {rule.get('alert') or rule.get('record')}", str(rule["expr"])
        elif obj["kind"] == "ConfigMap" and (obj["metadata"].get("labels") or {}).get("grafana_dashboard") == "1":
            for key, text in obj["data"].items():
                for panel in json.loads(text)["panels"]:
                    for target in panel.get("targets") or []:
                        yield f"panel {panel['title']!r} ({key})", GRAFANA_VARIABLES.sub("5m", target["expr"])


def selectors(where: str, expr: str) -> list[Selector]:
    """The series selectors of one expression (raises ValueError when it is not PromQL)."""
    import promql_parser

    found: list[Selector] = []

    def visit(node) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            labels = [m.name for m in node.matchers.matchers if m.name != "__name__"]
            name = node.name or next(m.value for m in node.matchers.matchers if m.name == "__name__")
            found.append(Selector(name, tuple(labels), where))

    promql_parser.walk(promql_parser.parse(expr), visit)
    return found
