"""The report CRDs trainadmit writes to (OpenReports' and Kyverno's, tests/fixtures/reports/crds) and what the
apiserver would refuse or prune of a report by them: shared by the report, audit, writer and apiserver tests."""

from __future__ import annotations

from functools import cache

import jsonschema

from support.crd_prune import crd_schema, pruned
from support.paths import FIXTURES
from trainadmit.cluster.reports import OPENREPORTS, WGPOLICY

REPORTS = FIXTURES / "reports"
CRDS = {OPENREPORTS: REPORTS / "crds" / "openreports.io_reports.yaml",
        WGPOLICY: REPORTS / "crds" / "wgpolicyk8s.io_policyreports.yaml"}
BY_API_VERSION = {"openreports.io/v1alpha1": OPENREPORTS, "wgpolicyk8s.io/v1alpha2": WGPOLICY}


@cache
def _validator(api) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(crd_schema(CRDS[api], api.version))


def problems(report: dict) -> list[str]:
    """What the apiserver would refuse (schema) or drop (pruning) of a report, by its CRD."""
    api = BY_API_VERSION.get(report.get("apiVersion"))
    if api is None or report.get("kind") != api.kind:
        return [f"{report.get('apiVersion')} {report.get('kind')} is served by neither CRD"]
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in _validator(api).iter_errors(report)]
    return errors + [f"pruned: {p}" for p in pruned(report, crd_schema(CRDS[api], api.version))]
