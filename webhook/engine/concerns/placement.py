"""Placement: the pool's node selector and tolerations; a user selector that contradicts the pool.

A user node selector or required node affinity that no node of the pool can satisfy makes a Job
that can never be scheduled, so it is refused with the pool that would match, when one does.
"""

from __future__ import annotations

from ...policy.vocab import Action, Enforceable
from ..concern import Concern
from ..context import Context
from ..decision import shared_source
from ..paths import as_dict, as_list, field_path
from ..reads import Reads
from ..rule import rule
from ..workloads import PodTemplate, Workload
from .enforced import conflict

CONTRADICTION = rule("placement.contradiction", Action.deny,
                     "a user nodeSelector or required node affinity that no node of the pool can satisfy")


def _same_toleration(a: dict, b: dict) -> bool:
    def norm(t: dict) -> tuple:
        return (t.get("key") or "", t.get("operator") or "Equal", t.get("value") or "", t.get("effect") or "")
    return isinstance(a, dict) and norm(a) == norm(b)


def mutate(ctx: Context) -> None:
    pool = ctx.resolved.pool
    if pool is None:
        return
    for template in ctx.pool_templates:
        _place(ctx, pool, template)


def _place(ctx: Context, pool, template: PodTemplate) -> None:
    name = ctx.resolved.pool_name or ""
    selector_source = shared_source("Pool", name, ("spec", "nodeSelector"))
    selector_path = (*template.spec_path, "nodeSelector")
    whole = False
    if not ctx.patcher.get(selector_path) and pool.nodeSelector:  # absent: the whole map in one operation
        whole = ctx.inject(selector_path, dict(pool.nodeSelector), "placement", selector_source)
    # once the whole map went in, every key holds the pool's value: setting each again changes nothing
    for key, value in () if whole else pool.nodeSelector.items():
        path = (*template.spec_path, "nodeSelector", key)
        current = ctx.patcher.get(path)
        if current is None or current == value:
            ctx.inject(path, value, "placement", selector_source)
        else:
            # A contradiction with the pool is always a denial (validate below); enforcement only
            # changes the rule id that reports it.
            conflict(ctx, Enforceable.nodeSelector, path, current, value)
    tol_path = (*template.spec_path, "tolerations")
    missing = []
    existing = ctx.patcher.get(tol_path) or []
    for i, wanted in enumerate(pool.toleration_dicts):
        if any(_same_toleration(t, wanted) for t in existing):
            ctx.satisfied("placement")
        else:
            missing.append((wanted, shared_source("Pool", name, ("spec", "tolerations", i))))
    ctx.inject_extend(tol_path, missing, "placement")


def _term_contradicts(term: dict, selector: dict[str, str]) -> bool:
    for expr in as_list(term.get("matchExpressions")):
        if not isinstance(expr, dict) or expr.get("key") not in selector:
            continue
        wanted, op = selector[expr["key"]], expr.get("operator")
        values = as_list(expr.get("values"))
        if (op == "In" and wanted not in values) or (op == "NotIn" and wanted in values) or op == "DoesNotExist":
            return True
    return False


def validate(ctx: Context, view: Workload) -> None:
    pool = ctx.resolved.pool
    if pool is None:
        return
    for template in ctx.pool_templates_in(view):
        _contradictions(ctx, pool, template)


def _contradictions(ctx: Context, pool, template: PodTemplate) -> None:
    r = ctx.resolved
    selector = as_dict(template.pod_spec.get("nodeSelector"))
    for key, value in pool.nodeSelector.items():
        if key in selector and selector[key] != value:
            other = [n for n, p in sorted(ctx.policy.pools.items()) if p.nodeSelector.get(key) == selector[key]]
            hint = (f"set {ctx.policy.keys.pool}: {other[0]} or remove the nodeSelector" if other
                    else "remove it: the pool chooses the nodes")
            ctx.report(CONTRADICTION, field_path((*template.spec_path, "nodeSelector", key)),
                       f"nodeSelector {key}={selector[key]} contradicts pool {r.pool_name} ({key}={value})", hint)
    terms = as_list(as_dict(as_dict(as_dict(template.pod_spec.get("affinity")).get("nodeAffinity"))
                            .get("requiredDuringSchedulingIgnoredDuringExecution")).get("nodeSelectorTerms"))
    terms = [t for t in terms if isinstance(t, dict)]
    if terms and all(_term_contradicts(t, pool.nodeSelector) for t in terms):
        ctx.report(CONTRADICTION, field_path((*template.spec_path, "affinity", "nodeAffinity")),
                   f"no required node-affinity term can match a node of pool {r.pool_name} "
                   f"({', '.join(f'{k}={v}' for k, v in pool.nodeSelector.items())})",
                   "remove the node affinity or pick the pool that matches it")


CONCERN = Concern("placement", rules=(CONTRADICTION,), mutate=mutate, validate=validate,
                  reads=Reads(pod=("nodeSelector", "tolerations", "affinity")))
