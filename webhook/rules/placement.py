"""Placement: a user node selector or required node affinity that contradicts the pool is a denial.

Such a Job can never be scheduled (no node is both in the pool and matches the user's choice), so
it is refused with the pool that would match, when one does.
"""

from __future__ import annotations

from ..context import Context, field_path
from ..workloads import Workload, as_dict, as_list


def _term_contradicts(term: dict, selector: dict[str, str]) -> bool:
    for expr in as_list(term.get("matchExpressions")):
        if not isinstance(expr, dict) or expr.get("key") not in selector:
            continue
        wanted, op = selector[expr["key"]], expr.get("operator")
        values = as_list(expr.get("values"))
        if (op == "In" and wanted not in values) or (op == "NotIn" and wanted in values) or op == "DoesNotExist":
            return True
    return False


def check(ctx: Context, view: Workload) -> None:
    r, pool = ctx.resolved, ctx.resolved.pool
    if pool is None:
        return
    selector = as_dict(view.pod_spec.get("nodeSelector"))
    for key, value in pool.nodeSelector.items():
        if key in selector and selector[key] != value:
            other = [n for n, p in sorted(ctx.policy.pools.items()) if p.nodeSelector.get(key) == selector[key]]
            hint = (f"set {ctx.policy.keys.pool}: {other[0]} or remove the nodeSelector" if other
                    else "remove it: the pool chooses the nodes")
            ctx.report("placement.contradiction", field_path((*view.pod_spec_path, "nodeSelector", key)),
                       f"nodeSelector {key}={selector[key]} contradicts pool {r.pool_name} ({key}={value})", hint)
    terms = as_list(as_dict(as_dict(as_dict(view.pod_spec.get("affinity")).get("nodeAffinity"))
                            .get("requiredDuringSchedulingIgnoredDuringExecution")).get("nodeSelectorTerms"))
    terms = [t for t in terms if isinstance(t, dict)]
    if terms and all(_term_contradicts(t, pool.nodeSelector) for t in terms):
        ctx.report("placement.contradiction",
                   field_path((*view.pod_spec_path, "affinity", "nodeAffinity")),
                   f"no required node-affinity term can match a node of pool {r.pool_name} "
                   f"({', '.join(f'{k}={v}' for k, v in pool.nodeSelector.items())})",
                   "remove the node affinity or pick the pool that matches it")
