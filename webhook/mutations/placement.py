"""Placement: the pool's node selector and tolerations, and topology colocation of the workers.

Colocation uses the mechanism the gang backend understands: the native PodGroup topology
constraint (set by the gang mutation), Kueue's TAS annotation, or a required pod affinity on the
level's node label with the Job's own pods (the first pod of a group that matches its own term is
schedulable, so the gang can start).
"""

from __future__ import annotations

from ..context import Context
from ..policy.models import Enforceable
from .gang import colocation_method

KUEUE_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


def _same_toleration(a: dict, b: dict) -> bool:
    def norm(t: dict) -> tuple:
        return (t.get("key") or "", t.get("operator") or "Equal", t.get("value") or "", t.get("effect") or "")
    return isinstance(a, dict) and norm(a) == norm(b)


def apply(ctx: Context) -> None:
    r, w = ctx.resolved, ctx.workload
    pool = r.pool
    if pool is None:
        return
    source = f"Pool {r.pool_name}"
    selector_path = (*w.pod_spec_path, "nodeSelector")
    if not ctx.patcher.get(selector_path) and pool.nodeSelector:  # absent: the whole map in one operation
        ctx.inject(selector_path, dict(pool.nodeSelector), "placement", f"{source}: spec.nodeSelector")
    for key, value in pool.nodeSelector.items():
        path = (*w.pod_spec_path, "nodeSelector", key)
        current = ctx.patcher.get(path)
        if current is None or current == value:
            ctx.inject(path, value, "placement", f"{source}: spec.nodeSelector")
        else:
            # A contradiction with the pool is always a denial (rules/placement.py); enforcement
            # only changes the rule id that reports it.
            ctx.conflict(Enforceable.nodeSelector, path, current, value)
    tol_path = (*w.pod_spec_path, "tolerations")
    for wanted in pool.toleration_dicts:
        existing = ctx.patcher.get(tol_path) or []
        if not any(_same_toleration(t, wanted) for t in existing):
            ctx.inject_append(tol_path, wanted, "placement", f"{source}: spec.tolerations")
        else:
            ctx._note(tol_path, "placement", f"{source}: spec.tolerations")
    _colocate(ctx)


def _colocate(ctx: Context) -> None:
    r, w = ctx.resolved, ctx.workload
    if r.level is None or r.pods <= 1 or not w.is_job:
        return
    method = colocation_method(ctx)
    source = f"Pool {r.pool_name}: topology level {r.level_name} ({r.level.nodeLabel})"
    if method == "kueue":
        path = (*w.pod_meta_path, "annotations", KUEUE_REQUIRED_TOPOLOGY)
        current = ctx.patcher.get(path)
        ctx.inject(path, current if current is not None else r.level.nodeLabel, "topology", source)
    elif method == "podAffinity":
        if w.name is None:
            ctx.report("topology.colocation-unavailable", "metadata.name",
                       f"colocation at level {r.level_name} selects the Job's own pods by name, and a "
                       "generateName Job has no name during admission; workers may spread",
                       "set metadata.name")
            return
        term = {"labelSelector": {"matchLabels": {JOB_NAME_LABEL: w.name}}, "topologyKey": r.level.nodeLabel}
        path = (*w.pod_spec_path, "affinity", "podAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
        existing = ctx.patcher.get(path) or []
        if term in existing:
            ctx._note(path, "topology", source)
        else:
            ctx.inject_append(path, term, "topology", source)
    elif method == "native":
        if ctx.policy.platform.gang.backend.value != "native" or not r.gang:
            ctx.report("topology.colocation-unavailable", "spec.scheduling",
                       "the native topology constraint needs the native gang backend", "")
        else:
            ctx._note(("spec", "scheduling", "schedulingConstraints"), "topology", source)
