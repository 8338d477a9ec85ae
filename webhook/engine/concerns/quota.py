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

from ...policy.vocab import Action
from ..concern import Concern
from ..context import Context
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


def check(ctx: Context, view: Workload, extra_gpus: int | None = None) -> None:
    """Check quota; ``extra_gpus`` (a resize) replaces the Job's total for the remaining check."""
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
        # workers are the Pods that request GPUs: a launcher, head, submitter or initializer is not one
        if quota.maxWorkersPerJob is not None and r.gpu_pods > quota.maxWorkersPerJob:
            ctx.report(WORKERS_PER_JOB, scale.path or "spec",
                       f"runs {r.gpu_pods} workers; quota {qname} allows {quota.maxWorkersPerJob} per job",
                       scale.fewer(view, r.gpu_pods - quota.maxWorkersPerJob))
        if quota.allowedPools is not None and r.pool_name and r.pool_name not in quota.allowedPools:
            ctx.report(POOL_NOT_ALLOWED, f'metadata.labels["{ctx.policy.keys.pool}"]',
                       f"namespace {ns} may not use pool {r.pool_name}",
                       f"use one of: {', '.join(quota.allowedPools) or '(none)'}")
        if quota.allowedPriorities is not None and r.tier and r.tier[0] not in quota.allowedPriorities:
            ctx.report(PRIORITY_NOT_ALLOWED, f'metadata.annotations["{ctx.policy.keys.priority}"]',
                       f"namespace {ns} may not use priority tier {r.tier[0]}",
                       f"use one of: {', '.join(quota.allowedPriorities) or '(none)'}")
    _pool_capacity(ctx)
    if not (r.total_gpus and ns):
        return
    # the namespace's ResourceQuotas count GPUs where the apiserver does: an extended resource's on
    # requests.<resource>, a DRA class's devices on <class>.deviceclass.resource.k8s.io/devices; the budget
    # (Quota.gpuQuota) every GPU of the workload
    needed = r.total_gpus if extra_gpus is None else extra_gpus
    share = needed / r.total_gpus
    unit = r.gpu_unit
    limits = []  # (hard, held by others or None, what says so, needed against it, who holds it, of what, total)
    quota = ctx.cluster.gpu_quota(ns, r.gpu_resource) if r.gpu_resource and r.extended_gpus else None
    if quota is not None:  # its used counts this workload's own Pods already: a scale-up needs only the added
        limits.append((quota[0], quota[1], "ResourceQuota", round(r.extended_gpus * share), "", r.gpu_resource,
                       r.extended_gpus))
    for device_class in r.gpu_classes[:1] if r.claimed_gpus else ():  # one GPU type per workload
        devices = ctx.cluster.device_quota(ns, device_class)
        if devices is not None:
            limits.append((devices[0], devices[1], f"ResourceQuota on {device_class}.deviceclass.resource.k8s.io/"
                           "devices", round(r.claimed_gpus * share), "", f"{device_class} devices", r.claimed_gpus))
    if found is not None and found[1].gpuQuota is not None:
        identity = (view.kind, view.name) if view.name else None
        usage = ctx.cluster.namespace_gpus(ns, r.gpu_resource, identity) if r.gpu_resource else None
        limits.append((found[1].gpuQuota, usage.total if usage is not None else None, f"Quota {found[0]}",
                       r.total_gpus, usage.describe() if usage is not None else "", unit, r.total_gpus))
    if not limits:
        return
    over = [lim for lim in limits if lim[6] > lim[0]]
    if over:
        hard, _, source, _, _, what, total = min(over, key=lambda lim: lim[0])
        ctx.report(NAMESPACE_HARD, ctx.plan.scale.path or "spec",
                   f"needs {total} {what}, and namespace {ns} may hold at most {hard} ({source}): "
                   "this job could never start", ctx.plan.scale.fewer_gpus(view, r, total - hard))
        return
    known = [lim for lim in limits if lim[1] is not None]
    if not known:
        return
    hard, used, source, want, holders, what, _ = min(known, key=lambda lim: lim[0] - lim[1] - lim[3])
    if want <= hard - used:
        return
    free = max(hard - used, 0)
    if holders:  # the budget: what the namespace's other unfinished workloads hold, by name
        message = (f"needs {want} {what}; the other unfinished workloads of namespace {ns} hold {used} of "
                   f"its {hard} {what} ({source}: {holders}), {free} free")
    else:
        message = f"needs {want} {what}; namespace {ns} has {free} of {hard} free ({source})"
    ctx.report(NAMESPACE_REMAINING, ctx.plan.scale.path or "spec", message,
               "wait for running jobs to finish" + (f", or {ctx.plan.scale.fewer_gpus(view, r, want - free)}"
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


# the name: the workload itself is not among the namespace's other workloads (a scale-up, a re-check)
CONCERN = Concern("quota", rules=(GPUS_PER_JOB, WORKERS_PER_JOB, POOL_NOT_ALLOWED, PRIORITY_NOT_ALLOWED, NAMESPACE_HARD,
                                  NAMESPACE_REMAINING, POOL_CAPACITY), validate=validate,
                  reads=Reads(metadata=("name",)))
