"""Topology: whole-node workers, single-node fit, the requested domain, the pool, the gang shape.

A multi-node job whose workers do not take whole nodes shares nodes with others and gets uneven
NVLink/NIC bandwidth; a gang larger than any domain of its level, or than the pool, waits forever.
Both are cheaper to refuse at submission than to discover after hours in a queue.
"""

from __future__ import annotations

import hashlib
from math import ceil

from ...policy.vocab import Action
from ..backends import KAI_REQUIRED_PLACEMENT, KAI_TOPOLOGY, KUEUE_REQUIRED_TOPOLOGY, TOPOLOGY_REQUESTS
from ..concern import Concern
from ..context import Context
from ..decision import Source
from ..reads import Reads
from ..rule import rule
from ..workloads import GroupedGangs, Workload, capable
from .intent import gpu_request

WHOLE_NODE = rule("topology.whole-node", Action.deny,
                  "a multi-pod Job whose GPUs per pod differ from the pool's per node")
SINGLE_NODE_FIT = rule("topology.single-node-fit", Action.deny, "one pod asking for more GPUs than a node has")
DOMAIN_FIT = rule("topology.domain-fit", Action.deny,
                  "more workers than nodes in the largest domain of the requested topology level")
COLOCATION_UNAVAILABLE = rule("topology.colocation-unavailable", Action.warn,
                              "the requested colocation cannot be expressed for this object or backend")


def mutate(ctx: Context) -> None:
    """Colocate the workers at the requested level, with the mechanism the plan chose
    (``plan.plan_colocation``): the native gang's topology constraint (written by the gang concern with the
    gang), Kueue's TAS annotation, or a required pod affinity on the level's node label with the workload's
    own pods (the first pod of a group that matches its own term is schedulable, so the gang can start)."""
    r, colocation = ctx.resolved, ctx.plan.colocation
    level = colocation.level
    if colocation.left_to:
        ctx.note(f"workers are not colocated at level {r.level_name} by trainadmit: left to {colocation.left_to}")
    if colocation.method is None or level is None:
        return
    index = next(i for i, lv in enumerate(r.pool.topology.levels) if lv.name == r.level_name)  # type: ignore[union-attr]
    source = ctx.pool_source("spec", "topology", "levels", index, "nodeLabel", note=f"level {r.level_name}")
    if colocation.method == "kueue":
        for template in ctx.pool_templates:
            path = (*template.meta_path, "annotations", KUEUE_REQUIRED_TOPOLOGY)
            if ctx.patcher.get(path) is None:
                ctx.inject(path, level.nodeLabel, "topology", source)
            else:
                ctx.satisfied("topology")
    elif colocation.method == "podAffinity":
        _pod_affinity(ctx, level.nodeLabel, source)
    elif colocation.unavailable:
        key = ctx.policy.keys.topology
        ctx.report(COLOCATION_UNAVAILABLE, f'metadata.annotations["{key}"]',
                   f"workers are not colocated at level {r.level_name}: {colocation.unavailable}",
                   f"set {key}: any, or Platform.spec.gang.topologyMethod: auto (pod affinity where the gang cannot "
                   "carry it)")
    elif colocation.method == "kai":
        _kai(ctx, level.nodeLabel, source)
    elif colocation.by_gang:
        ctx.satisfied("topology")  # the gang concern writes the constraint with the gang


def _kai(ctx: Context, node_label: str, source: Source) -> None:
    """KAI's podgrouper reads the Topology and the level every Pod must share from the workload's own annotations."""
    topology = ctx.policy.platform.gang.kaiTopology
    wanted = ((KAI_TOPOLOGY, topology, ctx.platform_source("spec", "gang", "kaiTopology")),
              (KAI_REQUIRED_PLACEMENT, node_label, source))
    for key, value, why in wanted:
        path = ("metadata", "annotations", key)
        if ctx.patcher.get(path) is None:
            ctx.inject(path, value, "topology", why)
        else:
            ctx.satisfied("topology")  # the user's placement stands


def _pod_affinity(ctx: Context, node_label: str, source: Source) -> None:
    """Required pod affinity of every GPU Pod to the workload's other GPU Pods on the level's node
    label: the first Pod of a group that matches its own term is schedulable, so the gang can start.
    The Pods are selected by a label their operator puts on all of them with the workload's name (a
    Job's ``batch.kubernetes.io/job-name``, a JobSet's ``jobset.sigs.k8s.io/jobset-name``…), or by
    trainadmit's own workload label when the operator sets none; a LeaderWorkerSet colocates each
    group on its own (``matchLabelKeys`` on the group index)."""
    r, w = ctx.resolved, ctx.workload
    if w.name is None:
        ctx.report(COLOCATION_UNAVAILABLE, "metadata.name",
                   f"colocation at level {r.level_name} selects the {w.kind}'s own pods by name, and a generateName "
                   f"{w.kind} has no name during admission; workers may spread", "set metadata.name")
        return
    label = w.adapter.pods_label
    if label is None:
        label = ctx.policy.keys.workload
        for template in ctx.pool_templates:
            ctx.inject((*template.meta_path, "labels", label), workload_label_value(w.name), "topology", source)
    term: dict = {"labelSelector": {"matchLabels": {label: workload_label_value(w.name)}}, "topologyKey": node_label}
    if capable(w.adapter, GroupedGangs):
        term["matchLabelKeys"] = [w.adapter.group_label]
    for template in ctx.pool_templates:
        path = (*template.spec_path, "affinity", "podAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
        if term in (ctx.patcher.get(path) or []):
            ctx.satisfied("topology")
        else:
            ctx.inject_extend(path, [(term, source)], "topology")


def workload_label_value(name: str) -> str:
    """A workload name as a label value (at most 63 characters; longer names keep a stable hash)."""
    if len(name) <= 63:
        return name
    return f"{name[:54].rstrip('.-_')}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def _whole_nodes(ctx: Context, view: Workload, per: int, templates: dict) -> str:
    """Values that give every GPU Pod a whole node, in the kind's own fields: each GPU template's GPU field,
    and the largest GPU template's count fields for the workers the same GPUs make."""
    r, scale = ctx.resolved, ctx.plan.scale
    resource = r.gpu_resource or ""
    workers = max(1, ceil(r.total_gpus / per))
    target = scale.target
    changes = [f"{ctx.user_field(gpu_request(templates.get(t.root, t), resource))}: {per}"
               for t, gpus in r.gpu_templates if gpus != per]
    others = sum(t.pods for t, _ in r.gpu_templates if target is None or t.root != target.root)
    change = scale.with_pods(view, workers - others) if target is not None and workers > others else None
    pods = others + change.pods if change is not None else r.gpu_pods
    if change is not None and pods == r.gpu_pods:
        change = None  # the count is already right: only the GPUs per Pod change
    hint = "set " + " and ".join([*changes, *([change.values_text] if change else [])])
    if pods * per != r.total_gpus:
        hint += f" ({pods * per} GPUs in all)"
    return hint


def validate(ctx: Context, view: Workload) -> None:
    r, pool = ctx.resolved, ctx.resolved.pool
    if pool is None or not r.gpus_per_pod:
        return
    per, name, resource = pool.gpu.perNode, r.pool_name, r.gpu_resource or ""
    templates = {t.root: t for t in view.templates}
    for original, gpus in r.gpu_templates:
        template = templates.get(original.root, original)
        gpu_path = gpu_request(template, resource)
        if r.gpu_pods > 1 and gpus != per:
            ctx.report(WHOLE_NODE, gpu_path,
                       f"requests {gpus} GPUs per worker across {r.gpu_pods} workers; pool {name} has {per} "
                       "GPUs per node: multi-node workers must take whole nodes",
                       _whole_nodes(ctx, view, per, templates))
        if r.gpu_pods <= 1 and gpus > per:
            workers = ceil(gpus / per)
            count = ctx.plan.scale.with_pods(view, workers) if ctx.plan.scale.target is not None else None
            hint = (f"set {ctx.user_field(gpu_path)}: {per} and {count.values_text}" if count else
                    f"ask for at most {per} at {ctx.user_field(gpu_path)}, or run {workers} Pods of {per} GPUs as "
                    "one workload (an Indexed batch/v1 Job)")
            ctx.report(SINGLE_NODE_FIT, gpu_path,
                       f"requests {gpus} GPUs in one pod; nodes of pool {name} have {per}: a pod cannot "
                       "span nodes", hint)
    nodes_needed = max(r.gpu_pods, 1)
    if r.level is not None and r.gpu_pods > 1:
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
            fewer = ctx.plan.scale.fewer(view, nodes_needed - domain)
            hint = f"set {ctx.policy.keys.topology}: {bigger}, or {fewer}" if bigger else fewer
            ctx.report(DOMAIN_FIT, f'metadata.annotations["{ctx.policy.keys.topology}"]',
                       f"{r.gpu_pods} workers need {nodes_needed} nodes in one {r.level_name}, and the largest "
                       f"{r.level_name} of pool {name} has {domain} nodes ({where})", hint)


CONCERN = Concern("topology", rules=(WHOLE_NODE, SINGLE_NODE_FIT, DOMAIN_FIT, COLOCATION_UNAVAILABLE),
                  mutate=mutate, validate=validate,
                  reads=Reads(metadata=("labels", "annotations", "name"), annotations=TOPOLOGY_REQUESTS,
                              pod=("affinity",), container=("resources",)))
