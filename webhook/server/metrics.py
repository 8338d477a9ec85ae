"""Prometheus metrics. Works under gunicorn's multiple processes when PROMETHEUS_MULTIPROC_DIR is
set (``trainadmit serve`` sets it before the workers start), and as plain in-process metrics otherwise."""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import multiprocess as _mp
from prometheus_client.core import GaugeMetricFamily

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
LABELS = ("webhook", "kind", "operation", "result")

REQUESTS = Counter("trainadmit_admission_requests_total", "Admission requests answered", LABELS)
LATENCY = Histogram("trainadmit_admission_duration_seconds", "Time to answer an admission request", LABELS,
                    buckets=BUCKETS)
DENIALS = Counter("trainadmit_denials_total", "Violations that denied a request, by rule", ("rule",))
WARNINGS = Counter("trainadmit_warnings_total", "Warnings returned, by rule", ("rule",))
BAD_REQUESTS = Counter("trainadmit_bad_requests_total", "Requests answered with a 4xx", ("webhook", "code"))
POLICY_GENERATION = Gauge("trainadmit_policy_generation_info", "Policy generation in use (value 1)",
                          ("generation",), multiprocess_mode="liveall")
POLICY_RELOADS = Counter("trainadmit_policy_reloads_total", "Policy sets loaded and swapped in")
POLICY_RELOAD_FAILURES = Counter("trainadmit_policy_reload_failures_total",
                                 "Policy updates that failed to load (the previous set kept serving)")
CERT_EXPIRY = Gauge("trainadmit_certificate_expiry_timestamp_seconds", "notAfter of the serving certificate",
                    multiprocess_mode="max")
CERT_RELOADS = Counter("trainadmit_certificate_reloads_total", "Serving certificate reloads")
PREFLIGHT_FAILURES = Counter("trainadmit_preflight_failures_total",
                             "Preflight runs that failed, by pool, node and check", ("pool", "node", "check"))
PREFLIGHT_READY = Histogram("trainadmit_preflight_ready_seconds",
                            "Time from a workload's creation to every one of its workers passing the preflight",
                            ("pool",), buckets=(5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200))


def render() -> bytes:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        _mp.MultiProcessCollector(registry)
        return generate_latest(registry)
    return generate_latest()


class _ViewAge:
    """The live cluster view's age, read at scrape time from this process's view (each worker
    watches on its own; a multi-process gauge would report a value from whenever it was last set)."""

    def __init__(self, age: float | None):
        self.age = age

    def collect(self):
        family = GaugeMetricFamily("trainadmit_cluster_view_age_seconds",
                                   "Seconds since the live cluster view was last confirmed current (-1: not synced)")
        family.add_metric([], -1.0 if self.age is None else self.age)
        yield family


def cluster_view_age(age: float | None) -> bytes:
    registry = CollectorRegistry()
    registry.register(_ViewAge(age))
    return generate_latest(registry)
