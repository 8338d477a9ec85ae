"""Prometheus metrics. Works under gunicorn's multiple processes when PROMETHEUS_MULTIPROC_DIR is
set (``trainadmit serve`` sets it before the workers start), and as plain in-process metrics otherwise.

Every label value comes from a closed set: a label taken from what a client sends (a
request path, an AdmissionReview's kind or operation) gives anyone who can reach the port one new series per
request, and in multi-process mode every series lives in files that outlast worker restarts.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import multiprocess as _mp
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from ..engine.registry import RULES
from ..engine.workloads import HANDLED_KINDS

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
LABELS = ("webhook", "kind", "operation", "result")
WEBHOOKS = frozenset({"mutate", "validate", "noop", "noop-patch"})  # the app's admission routes
OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})  # admission.k8s.io/v1 Operation
OTHER = "other"

REQUESTS = Counter("trainadmit_admission_requests_total", "Admission requests answered", LABELS)
LATENCY = Histogram("trainadmit_admission_duration_seconds", "Time to answer an admission request", LABELS,
                    buckets=BUCKETS)
# per submission, not per webhook call: /mutate, its reinvocation and /validate see one submission
# (server.handler.counts); a rule that fired at several fields counts once
DENIALS = Counter("trainadmit_denials_total", "Submissions a rule denied, by rule", ("rule",))
WARNINGS = Counter("trainadmit_warnings_total", "Submissions a rule warned about, by rule", ("rule",))
BAD_REQUESTS = Counter("trainadmit_bad_requests_total", "Requests answered with a 4xx by the app, by webhook "
                       "(other: any other path) and status", ("webhook", "code"))
EARLY_RESPONSES = Counter("trainadmit_early_responses_total", "Requests answered by the server before the app saw "
                          "them (408 too slow, 411 chunked, 413 too large, 431 head too large, 503 budget wait)",
                          ("code",))
TLS_HANDSHAKE_FAILURES = Counter("trainadmit_tls_handshake_failures_total", "TLS handshakes that failed")
# liveall: one series per live process; old generations are set to 0 and left out of /metrics (render)
POLICY_GENERATION = Gauge("trainadmit_policy_generation_info", "Policy generation in use (value 1)",
                          ("generation",), multiprocess_mode="liveall")
POLICY_RELOADS = Counter("trainadmit_policy_reloads_total", "Policy sets loaded and swapped in")
POLICY_RELOAD_FAILURES = Counter("trainadmit_policy_reload_failures_total",
                                 "Policy updates that failed to load (the previous set kept serving)")
# liveall, reduced in render() to the earliest notAfter a live worker serves: a worker still on the old
# certificate counts, one that has exited does not (the gauge used to be a maximum over every worker that ever
# ran), and processes that serve nothing (the master, a worker before its first connection) report 0
CERT_EXPIRY = Gauge("trainadmit_certificate_expiry_timestamp_seconds",
                    "notAfter of the serving certificate (the earliest any live worker serves)",
                    multiprocess_mode="liveall")
CERT_RELOADS = Counter("trainadmit_certificate_reloads_total", "Serving certificate reloads")
CERT_RELOAD_FAILURES = Counter("trainadmit_certificate_reload_failures_total",
                               "Changed certificate files that failed to load (the previous certificate kept serving)")
PREFLIGHT_FAILURES = Counter("trainadmit_preflight_failures_total",
                             "Preflight runs that failed, by pool, node and check", ("pool", "node", "check"))
PREFLIGHT_READY = Histogram("trainadmit_preflight_ready_seconds",
                            "Time from a workload's creation to every one of its workers passing the preflight",
                            ("pool",), buckets=(5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200))

# the elected reconciler's (the controllers' process of the replica holding the Lease): each write by kind of object
# (PodGroup, ...), verb (create, patch) and result (ok; exists: a create found it there; error), the time from a
# workload's watch event to its PodGroup written, and each pass's time
RECONCILER_WRITES = Counter("trainadmit_reconciler_writes_total", "Writes of the elected reconciler, by kind of "
                            "object, verb and result (ok, exists, error)", ("kind", "verb", "result"))
RECONCILER_EVENT_LAG = Histogram("trainadmit_reconciler_event_lag_seconds", "Time from a workload's watch event "
                                 "to the reconciler's write for it",
                                 buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0))
RECONCILER_PASS = Histogram("trainadmit_reconciler_pass_seconds", "Time of one pass of the elected reconciler "
                            "(PodGroups when due, budgets, reports)",
                            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0))
WRITE_KINDS = frozenset({"PodGroup", "ResourceQuota", "Report", "PolicyReport", "Pod", "Event"})
WRITE_VERBS = frozenset({"create", "patch", "update", "delete"})
WRITE_RESULTS = frozenset({"ok", "exists", "error"})


def record_write(kind: str, verb: str, result: str) -> None:
    """One write of the reconciler (labels outside their closed sets count as ``other``)."""
    RECONCILER_WRITES.labels(kind if kind in WRITE_KINDS else OTHER, verb if verb in WRITE_VERBS else OTHER,
                             result if result in WRITE_RESULTS else OTHER).inc()


# written by the reconciler (the elected replica's controllers' process) after each reports pass; a (rule, namespace)
# whose count fell to 0 is set to 0 (left out of /metrics): rules are the policy's, namespaces at most
# cluster.report_writer.MAX_NAMESPACE_LABELS (the rest "other")
REPORT_VIOLATIONS = Gauge("trainadmit_report_violations", "Stored workloads a rule fails or warns about, by rule and "
                          "namespace, as the latest reports say", ("rule", "namespace"), multiprocess_mode="mostrecent")
_reported: set[tuple[str, str]] = set()

# families computed when /metrics is scraped, from this worker's own state (not in the registry); with the
# registry's, what /metrics exports (deploy/monitoring names nothing else of trainadmit's)
VIEW_AGE = "trainadmit_cluster_view_age_seconds"
UNHONOURED = "trainadmit_policy_setting_unhonoured"
SCRAPE_TIME_GAUGES = (VIEW_AGE, UNHONOURED)

_INFO_GAUGES = frozenset({"trainadmit_policy_generation_info",
                          "trainadmit_report_violations"})  # 0 means "no longer": not exported
_EARLIEST = frozenset({"trainadmit_certificate_expiry_timestamp_seconds"})  # one sample: the smallest non-zero


def multiprocess() -> bool:
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


def forget_generation(generation: str) -> None:
    """A replaced policy generation leaves ``/metrics``: set to 0 (``render`` leaves 0 out), and removed when
    the metrics live in this process only (in multi-process mode its files keep every key, and
    prometheus_client warns on every ``remove``)."""
    POLICY_GENERATION.labels(generation).set(0)
    if not multiprocess():
        POLICY_GENERATION.remove(generation)


def webhook_label(path: str) -> str:
    name = path.strip("/")
    return name if name in WEBHOOKS else OTHER


def kind_label(kind: str) -> str:
    return kind if kind in HANDLED_KINDS else OTHER


def operation_label(operation: str) -> str:
    return operation if operation in OPERATIONS else OTHER


def rule_label(rule: str) -> str:
    """A rule id the engine declares, or a policy's own CEL rule (``custom.<name>``: the platform team's
    names, not a client's); anything else is ``other``."""
    return rule if rule in RULES or rule.startswith("custom.") else OTHER


class _Reduced:
    """Wraps a collector: drops the zero samples of info gauges (a multi-process gauge cannot forget a label
    value, its files keep every key, so a replaced policy generation is set to 0 and filtered here), and
    reduces per-process gauges that mean "the earliest" to one sample without the ``pid`` label."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def collect(self) -> Iterator[Metric]:
        for metric in self.inner.collect():
            if metric.name in _INFO_GAUGES:
                metric.samples = [s for s in metric.samples if s.value != 0]
            elif metric.name in _EARLIEST:
                live = [s for s in metric.samples if s.value > 0]
                earliest = min(live, key=lambda s: s.value) if live else None
                metric.samples = [earliest._replace(labels={})] if earliest else []
            yield metric


def record_report_violations(counts: dict[tuple[str, str], int]) -> None:
    """The reports writer's counts: every (rule, namespace) it names, and 0 for those it no longer names."""
    for key in _reported - set(counts):
        REPORT_VIOLATIONS.labels(*key).set(0)
        REPORT_VIOLATIONS.remove(*key)
    for key, value in counts.items():
        REPORT_VIOLATIONS.labels(*key).set(value)
    _reported.clear()
    _reported.update(counts)


def render() -> bytes:
    registry = CollectorRegistry()
    if multiprocess():
        registry.register(_Reduced(_mp.MultiProcessCollector(None)))
    else:
        from prometheus_client import REGISTRY

        registry.register(_Reduced(REGISTRY))
    return generate_latest(registry)


class _ViewAge:
    """The live cluster view's age, read at scrape time from this process's view (each worker
    watches on its own; a multi-process gauge would report a value from whenever it was last set)."""

    def __init__(self, age: float | None):
        self.age = age

    def collect(self):
        family = GaugeMetricFamily(VIEW_AGE,
                                   "Seconds since the live cluster view was last confirmed current (-1: not synced)")
        family.add_metric([], -1.0 if self.age is None else self.age)
        yield family


def cluster_view_age(age: float | None) -> bytes:
    registry = CollectorRegistry()
    registry.register(_ViewAge(age))
    return generate_latest(registry)


class _Unhonoured:
    """The policy settings the cluster cannot honour, read at scrape time from this worker's view of it."""

    def __init__(self, settings: tuple[str, ...], unhonoured: set[str]):
        self.settings, self.unhonoured = settings, unhonoured

    def collect(self):
        family = GaugeMetricFamily(UNHONOURED,
                                   "1 for a setting the cluster or this server cannot honour (a version it does not "
                                   "run, a gang backend it does not serve: rule gang.unavailable; gangs that need "
                                   "the reconciler where none runs: rule reconciler.missing)", labels=["setting"])
        for setting in self.settings:
            family.add_metric([setting], 1.0 if setting in self.unhonoured else 0.0)
        yield family


def unhonoured_settings(settings: tuple[str, ...], unhonoured: set[str]) -> bytes:
    registry = CollectorRegistry()
    registry.register(_Unhonoured(settings, unhonoured))
    return generate_latest(registry)
