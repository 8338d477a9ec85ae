"""Quota: per-Job limits, allowed pools and tiers per namespace, and the namespace's GPU quota.

A Job that asks for more GPUs than its namespace may ever hold is always refused: with gang
scheduling it would sit in the queue forever. With a cluster view, the remaining quota is checked
too, since ResourceQuota would otherwise reject some of the gang's pods at creation time.
"""

from __future__ import annotations

from ...policy.vocab import Action
from ..concern import Concern
from ..context import Context
from ..reads import Reads
from ..rule import rule
from ..workloads import Workload

GPUS_PER_JOB = rule("quota.gpus-per-job", Action.deny, "more GPUs in one Job than the namespace's Quota allows")
WORKERS_PER_JOB = rule("quota.workers-per-job", Action.deny,
                       "more workers in one Job than the namespace's Quota allows")
POOL_NOT_ALLOWED = rule("quota.pool-not-allowed", Action.deny, "a pool the namespace's Quota does not allow")
PRIORITY_NOT_ALLOWED = rule("quota.priority-not-allowed", Action.deny,
                            "a priority tier the namespace's Quota does not allow")
NAMESPACE_HARD = rule("quota.namespace-hard", Action.deny,
                      "more GPUs than the namespace may ever hold (ResourceQuota or Quota.gpuQuota)")
NAMESPACE_REMAINING = rule("quota.namespace-remaining", Action.deny,
                           "more GPUs than the namespace has free now (cluster view)")
POOL_CAPACITY = rule("quota.pool-capacity", Action.deny, "more nodes than the pool has")


def validate(ctx: Context, view: Workload) -> None:
    check(ctx, view)


def check(ctx: Context, view: Workload, extra_gpus: int | None = None) -> None:
    """Check quota; ``extra_gpus`` (UPDATE scale-up) replaces the Job's total for the remaining check."""
    r, ns = ctx.resolved, ctx.namespace or view.namespace
    found = ctx.policy.quota_for(ns)
    if found is not None:
        qname, quota = found
        scale = ctx.plan.scale  # advice in the kind's own count fields, with values that would pass
        if quota.maxGPUsPerJob is not None and r.total_gpus > quota.maxGPUsPerJob:
            ctx.report(GPUS_PER_JOB, scale.path or "spec",
                       f"requests {r.total_gpus} GPUs ({r.gpu_pods} × {r.gpus_per_pod}); quota {qname} allows "
                       f"{quota.maxGPUsPerJob} per job in namespace {ns}",
                       scale.fewer_gpus(view, r, r.total_gpus - quota.maxGPUsPerJob))
        if quota.maxWorkersPerJob is not None and r.pods > quota.maxWorkersPerJob:
            ctx.report(WORKERS_PER_JOB, scale.path or "spec",
                       f"runs {r.pods} workers; quota {qname} allows {quota.maxWorkersPerJob} per job",
                       scale.fewer(view, r.pods - quota.maxWorkersPerJob))
        if quota.allowedPools is not None and r.pool_name and r.pool_name not in quota.allowedPools:
            ctx.report(POOL_NOT_ALLOWED, f'metadata.labels["{ctx.policy.keys.pool}"]',
                       f"namespace {ns} may not use pool {r.pool_name}",
                       f"use one of: {', '.join(quota.allowedPools) or '(none)'}")
        if quota.allowedPriorities is not None and r.tier and r.tier[0] not in quota.allowedPriorities:
            ctx.report(PRIORITY_NOT_ALLOWED, f'metadata.annotations["{ctx.policy.keys.priority}"]',
                       f"namespace {ns} may not use priority tier {r.tier[0]}",
                       f"use one of: {', '.join(quota.allowedPriorities) or '(none)'}")
    _pool_capacity(ctx)
    if not (r.gpu_resource and r.total_gpus and ns):
        return
    hard_used = ctx.cluster.gpu_quota(ns, r.gpu_resource)
    source = "ResourceQuota"
    if hard_used is None and found is not None and found[1].gpuQuota is not None:
        hard_used, source = (found[1].gpuQuota, None), f"Quota {found[0]}"  # type: ignore[assignment]
    if hard_used is None:
        return
    hard, used = hard_used
    needed = r.total_gpus if extra_gpus is None else extra_gpus
    scale = ctx.plan.scale
    if r.total_gpus > hard:
        ctx.report(NAMESPACE_HARD, scale.path or "spec",
                   f"needs {r.total_gpus} {r.gpu_resource}, and namespace {ns} may hold at most {hard} ({source}): "
                   "this job could never start", scale.fewer_gpus(view, r, r.total_gpus - hard))
    elif used is not None and needed > hard - used:
        free = max(hard - used, 0)
        ctx.report(NAMESPACE_REMAINING, scale.path or "spec",
                   f"needs {needed} {r.gpu_resource}; namespace {ns} has {free} of {hard} free ({source})",
                   "wait for running jobs to finish" + (f", or {scale.fewer_gpus(view, r, needed - free)}"
                                                        if r.gpus_per_pod and free >= r.gpus_per_pod else ""))


def _pool_capacity(ctx: Context) -> None:
    """A gang larger than the pool never starts: refuse it now rather than queue it forever."""
    r, pool = ctx.resolved, ctx.resolved.pool
    if pool is None or not r.gpus_per_pod:
        return
    nodes_needed = max(r.gpu_pods, 1)
    capacity = ctx.cluster.pool_nodes(pool)
    capacity = capacity if capacity is not None else pool.capacityNodes
    if capacity is not None and nodes_needed > capacity:
        scale = ctx.plan.scale
        ctx.report(POOL_CAPACITY, scale.path or "spec",
                   f"needs {nodes_needed} nodes and pool {r.pool_name} has {capacity}: this job could never start",
                   scale.fewer(ctx.workload, nodes_needed - capacity))


CONCERN = Concern("quota", rules=(GPUS_PER_JOB, WORKERS_PER_JOB, POOL_NOT_ALLOWED, PRIORITY_NOT_ALLOWED, NAMESPACE_HARD,
                                  NAMESPACE_REMAINING, POOL_CAPACITY), validate=validate, reads=Reads())
