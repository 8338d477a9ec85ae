"""Policy reports for the training workloads of one namespace, in the format the ecosystem reads.

Two report APIs share one shape (no spec, no status: ``scope``, ``summary``, ``results``): OpenReports
``Report`` (``openreports.io/v1alpha1``, which Kyverno writes with ``--openreportsEnabled`` and calls
the successor) and ``wgpolicyk8s.io/v1alpha2`` ``PolicyReport`` (what Kyverno writes by default).
Policy Reporter reads whichever the apiserver serves. trainadmit writes OpenReports where its CRD is
served, else PolicyReport.

One report per namespace (name ``trainadmit``, scope the Namespace), not one per workload as Kyverno's
reports are: a namespace of 2,000 Jobs is one object to rewrite, not 2,000 (Kyverno's users have lost
apiservers to hundreds of thousands of report objects). Results, one per workload and rule:

- a denial: ``fail``, severity ``high``; a warning: ``warn``, severity ``medium``; ``rule`` the rule
  id, ``category`` its concern, the fields and the fix in ``properties`` (a rule that fired at several
  fields, once per pod template say, is one result);
- an admitted workload with no warning: one ``pass``; a note (a condition only the platform changes, told to
  the platform once) is never a workload's ``warn``: ``properties.notes`` names its rules. When an admitted
  workload lacks fields the policy would set, ``properties.would-set`` names their concerns (audit lists them);
- every result names the workload in ``resources`` and the policy generation in ``properties``.

Size is bounded, like Gatekeeper's ``--constraint-violations-limit`` (20 per constraint) and Kyverno's
``reportsChunkSize`` (1,000 results): at most ``MAX_RESULTS`` results and ``MAX_BYTES`` of them,
failures first, then warnings, then passes; ``summary`` still counts every result (as Gatekeeper's
``totalViolations`` does), the annotation ``trainadmit.io/results-omitted`` says how many were left out,
and OpenReports' ``configuration.limits.maxResults`` states the bound. Timestamps are ``{seconds,
nanos}``, as both CRDs require, and stay those of the first time a result was seen, so that an
unchanged namespace gives an unchanged report (which the writer then does not write).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..policy.vocab import Action
from .judge import Status, Verdict

MANAGED_BY = {"app.kubernetes.io/managed-by": "trainadmit"}
REPORT_NAME = "trainadmit"
SOURCE = "trainadmit"
POLICY = "trainadmit"
GENERATION_ANNOTATION = "trainadmit.io/policy-generation"
OMITTED_ANNOTATION = "trainadmit.io/results-omitted"
MAX_RESULTS = 1000
MAX_BYTES = 800_000  # of results, as JSON: well under etcd's default 1.5 MiB request limit
MAX_MESSAGE = 1024
SEVERITY = {"fail": "high", "warn": "medium"}
ORDER = {"fail": 0, "warn": 1, "error": 2, "pass": 3, "skip": 4}


@dataclass(frozen=True)
class ReportAPI:
    """One of the two report APIs: where its namespaced report lives, and what only it has."""

    group: str
    version: str
    kind: str
    plural: str
    has_source: bool  # report-level ``source`` and ``configuration.limits``: OpenReports only

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


OPENREPORTS = ReportAPI("openreports.io", "v1alpha1", "Report", "reports", True)
WGPOLICY = ReportAPI("wgpolicyk8s.io", "v1alpha2", "PolicyReport", "policyreports", False)
REPORT_APIS = (OPENREPORTS, WGPOLICY)  # in order of preference


def choose_api(serves) -> ReportAPI | None:
    """The API to write: OpenReports where served, else wgpolicyk8s.io; None when neither is (or unknown)."""
    for api in REPORT_APIS:
        if serves(api.api_version):
            return api
    return None


def _text(value: str) -> str:
    return value if len(value) <= MAX_MESSAGE else value[: MAX_MESSAGE - 1] + "…"


def results_of(verdict: Verdict) -> list[dict[str, Any]]:
    """The results of one workload: one per rule that fired (a rule that fired at several fields, such as
    one per pod template, is one result naming them all), or one pass."""
    if verdict.status is Status.skipped:
        return []
    d = verdict.decision
    base_properties = {"generation": d.generation}
    if verdict.changes and not d.denials:
        base_properties["would-set"] = ", ".join(sorted({c.concern for c in verdict.changes}))
    if d.notes:  # the platform's conditions (Action.note): said, never a workload's warn or fail
        base_properties["notes"] = ", ".join(dict.fromkeys(v.rule for v in d.notes))
    acted = [v for v in d.violations if v.action is not Action.note]
    by_rule: dict[str, list] = {}
    for violation in acted:
        by_rule.setdefault(violation.rule, []).append(violation)
    out = []
    for rule_id, violations in by_rule.items():
        first = violations[0]
        result = "fail" if first.action is Action.deny else "warn"
        properties = {**base_properties, "path": ", ".join(dict.fromkeys(v.path for v in violations))}
        if first.hint:
            properties["fix"] = _text(first.hint)
        message = "; ".join(dict.fromkeys(v.message for v in violations))
        out.append({"policy": POLICY, "rule": rule_id, "category": rule_id.split(".", 1)[0],
                    "result": result, "severity": SEVERITY[result], "message": _text(message),
                    "properties": properties, "resources": [verdict.reference], "scored": True, "source": SOURCE})
    if not acted:
        message = "admitted: no rule of the policy fires"
        if verdict.changes:
            message += (f"; the policy would also set {len(verdict.changes)} field"
                        f"{'s' if len(verdict.changes) != 1 else ''} it lacks ({base_properties['would-set']})")
        out.append({"policy": POLICY, "result": "pass", "message": message, "properties": base_properties,
                    "resources": [verdict.reference], "scored": True, "source": SOURCE})
    return out


def _content_key(result: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in result.items() if k != "timestamp"}, sort_keys=True, separators=(",", ":"))


def build_report(api: ReportAPI, namespace: str, results: Iterable[dict[str, Any]], generation: str,
                 now: int, previous: dict | None = None) -> dict[str, Any]:
    """The report of a namespace from its results (any order), bounded; ``previous`` (the stored report)
    lends its timestamps to results it already held, unchanged."""
    seen: dict[str, dict] = {}
    for old in (previous or {}).get("results") or []:
        if isinstance(old, dict) and isinstance(old.get("timestamp"), dict):
            seen.setdefault(_content_key(old), old["timestamp"])
    ordered = sorted(results, key=lambda r: (ORDER.get(r["result"], 9), _resource_key(r), r.get("rule", "")))
    summary = {"pass": 0, "fail": 0, "warn": 0, "error": 0, "skip": 0}
    kept: list[dict] = []
    size = 0
    for result in ordered:
        summary[result["result"]] += 1
        if len(kept) >= MAX_RESULTS:
            continue
        key = _content_key(result)
        result = {**result, "timestamp": seen.get(key) or {"seconds": int(now), "nanos": 0}}
        cost = len(json.dumps(result, separators=(",", ":")))
        if size + cost > MAX_BYTES:
            continue
        size += cost
        kept.append(result)
    omitted = sum(summary.values()) - len(kept)
    report: dict[str, Any] = {
        "apiVersion": api.api_version, "kind": api.kind,
        "metadata": {"name": REPORT_NAME, "namespace": namespace, "labels": dict(MANAGED_BY),
                     "annotations": {GENERATION_ANNOTATION: generation, OMITTED_ANNOTATION: str(omitted)}},
        "scope": {"apiVersion": "v1", "kind": "Namespace", "name": namespace},
        "summary": summary,
        "results": kept,
    }
    if api.has_source:
        report["source"] = SOURCE
        report["configuration"] = {"limits": {"maxResults": MAX_RESULTS}}
    return report


def _resource_key(result: dict[str, Any]) -> tuple[str, str]:
    resources = result.get("resources") or [{}]
    return (str(resources[0].get("kind", "")), str(resources[0].get("name", "")))


def same_content(a: dict | None, b: dict | None) -> bool:
    """Whether two reports say the same (timestamps and server-set metadata aside)."""
    if a is None or b is None:
        return a is b

    def key(report: dict) -> str:
        meta = report.get("metadata") or {}
        return json.dumps({"labels": meta.get("labels"), "annotations": meta.get("annotations"),
                           "summary": report.get("summary"), "scope": report.get("scope"),
                           "source": report.get("source"), "configuration": report.get("configuration"),
                           "results": [_content_key(r) for r in report.get("results") or []]},
                          sort_keys=True, separators=(",", ":"))
    return key(a) == key(b)


__all__ = ["MANAGED_BY", "OPENREPORTS", "REPORT_APIS", "REPORT_NAME", "WGPOLICY", "ReportAPI", "build_report",
           "choose_api", "results_of", "same_content"]
