"""Topology: whole-node workers, single-node fit, the requested domain, the pool, the gang shape.

A multi-node job whose workers do not take whole nodes shares nodes with others and gets uneven
NVLink/NIC bandwidth; a gang larger than any domain of its level, or than the pool, waits forever.
Both are cheaper to refuse at submission than to discover after hours in a queue.
"""

from __future__ import annotations

from math import ceil

from ..context import Context, field_path
from ..workloads import Workload


def _gpu_path(ctx: Context, view: Workload) -> str:
    resource = ctx.resolved.gpu_resource or ""
    for ref in view.containers(include_init=False):
        limits = ((ref.body.get("resources") or {}).get("limits") or {})
        if resource in limits:
            return field_path((*view.container_path(ref), "resources", "limits", resource))
    return field_path((*view.pod_spec_path, "containers"))


def check(ctx: Context, view: Workload) -> None:
    r, pool = ctx.resolved, ctx.resolved.pool
    _gang_shape(ctx, view)
    if pool is None or not r.gpus_per_pod:
        return
    per, name, resource = pool.gpu.perNode, r.pool_name, r.gpu_resource
    gpu_path = _gpu_path(ctx, view)
    if r.pods > 1 and r.gpus_per_pod != per:
        total = r.gpus_per_pod * r.pods
        workers = max(1, ceil(total / per))
        hint = f"set {resource}: {per} and {workers} worker{'s' if workers != 1 else ''}"
        if workers * per != total:
            hint += f" ({workers * per} GPUs in all)"
        ctx.report("topology.whole-node", gpu_path,
                   f"requests {r.gpus_per_pod} GPUs per worker across {r.pods} workers; pool {name} has {per} "
                   "GPUs per node: multi-node workers must take whole nodes", hint)
    if r.pods <= 1 and r.gpus_per_pod > per:
        workers = ceil(r.gpus_per_pod / per)
        ctx.report("topology.single-node-fit", gpu_path,
                   f"requests {r.gpus_per_pod} GPUs in one pod; nodes of pool {name} have {per}: a pod cannot "
                   "span nodes", f"run {workers} workers with {resource}: {per} as an Indexed Job")
    nodes_needed = r.pods if r.pods > 1 else 1
    if r.level is not None and r.pods > 1:
        known = ctx.cluster.largest_domain(pool, r.level)
        domain = known if known is not None else r.level.maxNodes
        if nodes_needed > domain:
            bigger = None
            for level in pool.topology.levels:
                size = ctx.cluster.largest_domain(pool, level)
                size = size if size is not None else level.maxNodes
                if size >= nodes_needed:
                    bigger = level.name
                    break
            where = "in the cluster" if known is not None else "by policy"
            hint = (f"set {ctx.policy.keys.topology}: {bigger}" if bigger else "") + \
                   (" or " if bigger else "") + f"use at most {domain} workers"
            ctx.report("topology.domain-fit", f'metadata.annotations["{ctx.policy.keys.topology}"]',
                       f"{r.pods} workers need {nodes_needed} nodes in one {r.level_name}, and the largest "
                       f"{r.level_name} of pool {name} has {domain} nodes ({where})", hint)
    capacity = ctx.cluster.pool_nodes(pool)
    capacity = capacity if capacity is not None else pool.capacityNodes
    if capacity is not None and nodes_needed > capacity:
        ctx.report("quota.pool-capacity", "spec.parallelism",
                   f"needs {nodes_needed} nodes and pool {name} has {capacity}: this job could never start",
                   f"use at most {capacity} workers")


def _gang_shape(ctx: Context, view: Workload) -> None:
    r = ctx.resolved
    if r.gang and view.is_job:
        if view.completion_mode != "Indexed":
            ctx.report("gang.completion-mode", "spec.completionMode",
                       f"a gang Job needs completionMode Indexed so each of its {r.pods} workers gets a stable rank, "
                       f"got {view.completion_mode}", "set spec.completionMode: Indexed")
        if view.completions != view.parallelism:
            ctx.report("gang.parallelism-completions", "spec.completions",
                       f"parallelism {view.parallelism} and completions "
                       f"{view.completions if view.completions is not None else '(unset)'} differ: a gang runs "
                       "all ranks at once", f"set spec.completions: {view.parallelism}")
