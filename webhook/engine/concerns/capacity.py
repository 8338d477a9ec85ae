"""Capacity: only nodes that can take the work count, and a gang that fits only later is said so.

``topology.domain-fit`` and ``quota.pool-capacity`` compare a gang with every node the pool's
selector matches. With a cluster view that is not enough: a NotReady node, a node whose taints the
workload does not tolerate, one with no allocatable GPUs or without the pool's health labels (kept
by the GPU operator or node-problem-detector) runs nothing, and a gang that needs it waits forever.
So, once the gang fits the pool's nodes at all, it must also fit the usable ones:

- more nodes than the pool (or the largest domain of the requested level) has usable, even counting
  cordoned nodes: ``capacity.unusable-nodes`` (deny) names the unusable nodes and why;
- more than are usable now, but not more once cordoned nodes are uncordoned (an administrator's
  reversible decision, e.g. a drain for maintenance): ``capacity.cordoned-nodes`` (warn), the gang
  would wait.

The tolerations are those of the workload's pool templates as they will be stored (the pool's own
plus the user's), so a node tainted for another team does not count for this workload.
"""

from __future__ import annotations

from ...policy.vocab import Action
from ..concern import Concern
from ..context import Context
from ..fit import Limit
from ..reads import Reads
from ..rule import Resize, rule
from ..workloads import Workload

UNUSABLE_NODES = rule("capacity.unusable-nodes", Action.deny,
                      "the gang needs more nodes than the pool or its largest domain has usable (Ready, schedulable, "
                      "taints tolerated, GPUs allocatable, health labels), even after cordons lift", Resize.grow)
CORDONED_NODES = rule("capacity.cordoned-nodes", Action.warn,
                      "the gang fits only once cordoned nodes are uncordoned: it would wait", Resize.grow)


def tolerations_of(ctx: Context, view: Workload) -> tuple[dict, ...]:
    """The tolerations of the workload's pool templates as they will be stored (all of them, deduplicated)."""
    found: dict[str, dict] = {}
    for template in ctx.pool_templates_in(view):
        for tol in template.pod_spec.get("tolerations") or []:
            if isinstance(tol, dict):
                found.setdefault(repr(sorted(tol.items())), tol)
    return tuple(found.values())


def limits(ctx: Context, view: Workload) -> list[Limit]:
    """As many workers as the pool has usable nodes (a gang: the best domain of its level): once cordons lift
    (``unusable-nodes``), and now (``cordoned-nodes``)."""
    r, pool = ctx.resolved, ctx.resolved.pool
    if pool is None or not r.gpus_per_pod:
        return []
    tolerations = tolerations_of(ctx, view)
    out = []
    single = ctx.cluster.capacity(pool, None, tolerations)
    if single is not None:  # one Pod: any usable node of the pool
        out += [Limit(UNUSABLE_NODES, lambda s: s.gpu_pods > 1 or single.eventually >= 1,
                      f"pool {r.pool_name} has {single.eventually} usable nodes"),
                Limit(CORDONED_NODES, lambda s: s.gpu_pods > 1 or single.usable >= 1,
                      f"pool {r.pool_name} has {single.usable} usable nodes now")]
    gang = ctx.cluster.capacity(pool, r.level, tolerations) if r.level is not None else single
    if gang is not None:
        where = f"the best {r.level_name} of pool {r.pool_name}" if r.level is not None else f"pool {r.pool_name}"
        out += [Limit(UNUSABLE_NODES, lambda s: s.gpu_pods <= 1 or s.gpu_pods <= gang.eventually,
                      f"{where} has {gang.eventually} usable nodes"),
                Limit(CORDONED_NODES, lambda s: s.gpu_pods <= 1 or s.gpu_pods <= gang.usable,
                      f"{where} has {gang.usable} usable nodes now")]
    return out


def validate(ctx: Context, view: Workload) -> None:
    r, pool = ctx.resolved, ctx.resolved.pool
    if pool is None or not r.gpus_per_pod:
        return
    needed = max(r.gpu_pods, 1)
    level = r.level if r.gpu_pods > 1 else None  # a gang colocates in one domain; else any node of the pool
    tolerations = tolerations_of(ctx, view)
    cap = ctx.cluster.capacity(pool, level, tolerations)
    if cap is None or needed > cap.total:
        return  # unknown, or it does not fit the pool's nodes at all: domain-fit / pool-capacity say so
    where = f"the best {r.level_name} of pool {r.pool_name}" if level is not None else f"pool {r.pool_name}"
    scale = ctx.plan.scale
    field = (f'metadata.annotations["{ctx.policy.keys.topology}"]' if level is not None else scale.path or "spec")
    if needed > cap.eventually:
        detail = ctx.cluster.unusable(pool, level, tolerations)
        if detail is not None:
            named = f" ({level.name} {detail.domain})" if level is not None and detail.domain else ""
            counts = (f"{detail.total} nodes, {detail.usable} usable now and {detail.eventually} once cordoned "
                      f"nodes return: {detail.describe()}")
        else:
            named, counts = "", f"{cap.eventually} usable nodes"
        fit = ctx.size_fit(view)
        ctx.report(UNUSABLE_NODES, field,
                   f"{r.gpu_pods} workers need {needed} usable nodes{' in one ' + level.name if level else ''}; "
                   f"{where}{named} has {counts}",
                   (f"{fit.hint}, or " if fit.fix else "") + "ask the platform team to repair the nodes", fit.fix)
    elif needed > cap.usable:
        fit = ctx.size_fit(view, warnings=True)  # the shape that starts now: it passes this warning too
        ctx.report(CORDONED_NODES, field,
                   f"{r.gpu_pods} workers need {needed} nodes; {where} has {cap.usable} usable now and "
                   f"{cap.eventually} once its cordoned nodes are uncordoned: the gang would wait",
                   f"{fit.hint} to start now" if fit.fix else "wait for the cordoned nodes", fit.fix)


CONCERN = Concern("capacity", rules=(UNUSABLE_NODES, CORDONED_NODES), validate=validate, limits=limits,
                  reads=Reads(pod=("tolerations",)))
