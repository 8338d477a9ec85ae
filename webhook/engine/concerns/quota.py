"""Quota: per-Job limits, allowed pools and tiers per namespace, and the namespace's GPU quota.

A Job that asks for more GPUs than its namespace may ever hold is always refused: with gang
scheduling it would sit in the queue forever. With a cluster view, the remaining quota is checked
too, since ResourceQuota would otherwise reject some of the gang's pods at creation time.

Two limits, each checked when known, the tighter one reported: a ResourceQuota on ``requests.<gpu>``
(its ``status.used``: the namespace's Pods), and the policy's budget ``Quota.spec.gpuQuota``, a total
over the namespace's unfinished workloads (what their Pods ask for, counted from the workloads
themselves, so Pods not yet created count too) plus this one. Without a view of the namespace's
workloads the budget bounds each workload alone.
"""

from __future__ import annotations

from ...grammars.lazydataclass import dataclass
from ...policy.vocab import Action
from ..concern import Concern
from ..context import Context
from ..fit import Limit, Shape, shape_of
from ..reads import Reads
from ..rule import Resize, rule
from ..workloads import Workload

GPUS_PER_JOB = rule("quota.gpus-per-job", Action.deny, "more GPUs in one Job than the namespace's Quota allows",
                    Resize.grow)
WORKERS_PER_JOB = rule("quota.workers-per-job", Action.deny,
                       "more GPU workers in one Job than the namespace's Quota allows", Resize.grow)
POOL_NOT_ALLOWED = rule("quota.pool-not-allowed", Action.deny, "a pool the namespace's Quota does not allow")
PRIORITY_NOT_ALLOWED = rule("quota.priority-not-allowed", Action.deny,
                            "a priority tier the namespace's Quota does not allow")
NAMESPACE_HARD = rule("quota.namespace-hard", Action.deny,
                      "more GPUs than the namespace may ever hold (ResourceQuota or Quota.gpuQuota)", Resize.grow)
NAMESPACE_REMAINING = rule("quota.namespace-remaining", Action.deny,
                           "more GPUs than the namespace has free now: its ResourceQuota's use, or its Quota.gpuQuota "
                           "less what its other unfinished workloads hold (cluster view)", Resize.grow)
POOL_CAPACITY = rule("quota.pool-capacity", Action.deny, "more nodes than the pool has", Resize.grow)


def validate(ctx: Context, view: Workload) -> None:
    """Check quota; on a resize the namespace's free GPUs need hold only the GPUs it adds (the others are
    already counted as used)."""
    resize = ctx.plan.resize
    check(ctx, view, extra_gpus=resize.added_gpus if resize is not None else None)


@dataclass(frozen=True)
class Budget:
    """One limit on the namespace's GPUs: ``hard`` of them, ``used`` now (None: not known), where it is declared,
    who holds them, what it counts (``unit``: a ``Shape`` total), how it names them, and whether ``used`` counts this
    workload's own Pods already (a ResourceQuota's use does; the budget's leaves the workload out)."""

    hard: int
    used: int | None
    source: str
    unit: str  # total_gpus | extended_gpus | claimed_gpus
    holders: str
    what: str
    counts_self: bool = True

    def of(self, shape: Shape) -> int:
        return getattr(shape, self.unit)


def budgets(ctx: Context, view: Workload) -> list[Budget]:
    """The namespace's GPU limits that apply to this workload: a ResourceQuota on ``requests.<gpu>`` (an extended
    resource's GPUs, as the apiserver counts them), one on ``<class>.deviceclass.resource.k8s.io/devices`` (a DRA
    class's), and the policy's ``Quota.gpuQuota`` (every GPU of the workload)."""
    r, ns = ctx.resolved, ctx.namespace or view.namespace
    if not (r.total_gpus and ns):
        return []
    out = []
    quota = ctx.cluster.gpu_quota(ns, r.gpu_resource) if r.gpu_resource and r.extended_gpus else None
    if quota is not None:  # its used counts this workload's own Pods already: a scale-up needs only the added
        out.append(Budget(quota[0], quota[1], "ResourceQuota", "extended_gpus", "", r.gpu_resource or ""))
    # one GPU type per workload; claimed_gpus (a sum over the templates) only when a class is named
    for device_class in r.gpu_classes[:1] if r.gpu_classes and r.claimed_gpus else ():
        devices = ctx.cluster.device_quota(ns, device_class)
        if devices is not None:
            out.append(Budget(devices[0], devices[1], f"ResourceQuota on {device_class}.deviceclass.resource.k8s.io/"
                              "devices", "claimed_gpus", "", f"{device_class} devices"))
    found = ctx.policy.quota_for(ns)
    if found is not None and found[1].gpuQuota is not None:
        identity = (view.kind, view.name) if view.name else None
        usage = ctx.cluster.namespace_gpus(ns, r.gpu_resource, identity) if r.gpu_resource else None
        out.append(Budget(found[1].gpuQuota, usage.total if usage is not None else None, f"Quota {found[0]}",
                          "total_gpus", usage.describe() if usage is not None else "", r.gpu_unit, counts_self=False))
    return out


def _wanted(ctx: Context, budget: Budget, current: Shape) -> int:
    """What the workload needs free of ``budget``: all its GPUs, or on a resize the ones it adds when the budget's use
    counts its Pods already."""
    resize = ctx.plan.resize
    total = budget.of(current)
    if resize is None or not current.total_gpus or not budget.counts_self:
        return total
    return round(total * resize.added_gpus / current.total_gpus)


def limits(ctx: Context, view: Workload) -> list[Limit]:
    """The size rules' bounds: GPUs and workers per job, the pool's nodes, what the namespace may ever hold and what
    it has free now."""
    r, ns = ctx.resolved, ctx.namespace or view.namespace
    out = []
    found = ctx.policy.quota_for(ns)
    if found is not None:
        qname, quota = found
        most_gpus, most_workers = quota.maxGPUsPerJob, quota.maxWorkersPerJob
        if most_gpus is not None:
            out.append(Limit(GPUS_PER_JOB, lambda s: s.total_gpus <= most_gpus,
                             f"quota {qname} allows {most_gpus} GPUs per job"))
        if most_workers is not None:
            out.append(Limit(WORKERS_PER_JOB, lambda s: s.gpu_pods <= most_workers,
                             f"quota {qname} allows {most_workers} workers per job"))
    capacity = _capacity(ctx)
    if capacity is not None:
        out.append(Limit(POOL_CAPACITY, lambda s: max(s.gpu_pods, 1) <= capacity,
                         f"pool {r.pool_name} has {capacity} nodes"))
    current = shape_of(view, r)
    for budget in budgets(ctx, view):
        out.append(Limit(NAMESPACE_HARD, lambda s, b=budget: b.of(s) <= b.hard,
                         f"namespace {ns} may hold {budget.hard} {budget.what} ({budget.source})"))
        if budget.used is not None:
            held = budget.of(current) - _wanted(ctx, budget, current)  # already counted as used (a resize's)
            free = max(budget.hard - budget.used, 0)
            out.append(Limit(NAMESPACE_REMAINING, lambda s, b=budget, h=held, f=free: b.of(s) - h <= f,
                             f"namespace {ns} has {free} {budget.what} free now ({budget.source})", transient=True))
    return out


def check(ctx: Context, view: Workload, extra_gpus: int | None = None) -> None:
    """Check quota; ``extra_gpus`` (a resize) replaces the Job's total for the remaining check. Every size fix is
    the decision's one (``Context.size_fit``)."""
    r, ns = ctx.resolved, ctx.namespace or view.namespace
    found = ctx.policy.quota_for(ns)
    if found is not None:
        qname, quota = found
        # advice in the kind's own count fields (``plan.scale.path``, made only for a report), with values that pass
        if quota.maxGPUsPerJob is not None and r.total_gpus > quota.maxGPUsPerJob:
            fit = ctx.size_fit(view)
            ctx.report(GPUS_PER_JOB, ctx.plan.scale.path or "spec",
                       f"requests {r.total_gpus} GPUs ({r.gpu_pods} × {r.gpus_per_pod}); quota {qname} allows "
                       f"{quota.maxGPUsPerJob} per job in namespace {ns}", fit.hint, fit.fix)
        # workers are the Pods that request GPUs: a launcher, head, submitter or initializer is not one
        if quota.maxWorkersPerJob is not None and r.gpu_pods > quota.maxWorkersPerJob:
            fit = ctx.size_fit(view)
            ctx.report(WORKERS_PER_JOB, ctx.plan.scale.path or "spec",
                       f"runs {r.gpu_pods} workers; quota {qname} allows {quota.maxWorkersPerJob} per job",
                       fit.hint, fit.fix)
        if quota.allowedPools is not None and r.pool_name and r.pool_name not in quota.allowedPools:
            ctx.report(POOL_NOT_ALLOWED, f'metadata.labels["{ctx.policy.keys.pool}"]',
                       f"namespace {ns} may not use pool {r.pool_name}",
                       f"use one of: {', '.join(quota.allowedPools) or '(none)'}")
        if quota.allowedPriorities is not None and r.tier and r.tier[0] not in quota.allowedPriorities:
            ctx.report(PRIORITY_NOT_ALLOWED, f'metadata.annotations["{ctx.policy.keys.priority}"]',
                       f"namespace {ns} may not use priority tier {r.tier[0]}",
                       f"use one of: {', '.join(quota.allowedPriorities) or '(none)'}")
    _pool_capacity(ctx, view)
    found_budgets = budgets(ctx, view)
    if not found_budgets:
        return
    current = shape_of(view, r)
    over = [b for b in found_budgets if b.of(current) > b.hard]
    if over:
        budget = min(over, key=lambda b: b.hard)
        fit = ctx.size_fit(view)
        ctx.report(NAMESPACE_HARD, ctx.plan.scale.path or "spec",
                   f"needs {budget.of(current)} {budget.what}, and namespace {ns} may hold at most {budget.hard} "
                   f"({budget.source}): this job could never start", fit.hint, fit.fix)
        return
    known = [b for b in found_budgets if b.used is not None]
    if not known:
        return
    budget = min(known, key=lambda b: b.hard - (b.used or 0) - _wanted(ctx, b, current))
    want, hard, used = _wanted(ctx, budget, current), budget.hard, budget.used or 0
    if want <= hard - used:
        return
    free, what = max(hard - used, 0), budget.what
    if budget.holders:  # the budget: what the namespace's other unfinished workloads hold, by name
        message = (f"needs {want} {what}; the other unfinished workloads of namespace {ns} hold {used} of "
                   f"its {hard} {what} ({budget.source}: {budget.holders}), {free} free")
    else:
        message = f"needs {want} {what}; namespace {ns} has {free} of {hard} free ({budget.source})"
    fit = ctx.size_fit(view)
    smaller = fit.fix and not fit.waits  # a smaller shape that fits what is free now
    ctx.report(NAMESPACE_REMAINING, ctx.plan.scale.path or "spec", message,
               "wait for running jobs to finish" + (f", or {fit.hint}" if smaller else ""),
               fit.fix if smaller else ())


def _capacity(ctx: Context) -> int | None:
    """The pool's nodes: the cluster's, else the policy's ``capacityNodes`` (None: unknown, or no GPU workload)."""
    r, pool = ctx.resolved, ctx.resolved.pool
    if pool is None or not r.gpus_per_pod:
        return None
    capacity = ctx.cluster.pool_nodes(pool)
    return capacity if capacity is not None else pool.capacityNodes


def _pool_capacity(ctx: Context, view: Workload) -> None:
    """A gang larger than the pool never starts: refuse it now rather than queue it forever."""
    r = ctx.resolved
    nodes_needed = max(r.gpu_pods, 1)
    capacity = _capacity(ctx)
    if capacity is not None and nodes_needed > capacity:
        fit = ctx.size_fit(view)
        ctx.report(POOL_CAPACITY, ctx.plan.scale.path or "spec",
                   f"needs {nodes_needed} nodes and pool {r.pool_name} has {capacity}: this job could never start",
                   fit.hint, fit.fix)


# the name: the workload itself is not among the namespace's other workloads (a scale-up, a re-check)
CONCERN = Concern("quota", rules=(GPUS_PER_JOB, WORKERS_PER_JOB, POOL_NOT_ALLOWED, PRIORITY_NOT_ALLOWED, NAMESPACE_HARD,
                                  NAMESPACE_REMAINING, POOL_CAPACITY), validate=validate, limits=limits,
                  reads=Reads(metadata=("name",)))
