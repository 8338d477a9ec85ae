"""Topology: whole-node workers, single-node fit, the requested domain, the pool, the gang shape.

A multi-node job whose workers do not take whole nodes shares nodes with others and gets uneven
NVLink/NIC bandwidth; a gang larger than any domain of its level, or than the pool, waits forever.
Both are cheaper to refuse at submission than to discover after hours in a queue.
"""

from __future__ import annotations

import hashlib
from math import ceil

from ...policy.policyset import TOPOLOGY_GATE
from ...policy.vocab import Action, GangBackend
from ..backends import KUEUE_REQUIRED_TOPOLOGY
from ..concern import Concern
from ..context import Context
from ..decision import Source
from ..dra import pod_claims
from ..paths import field_path
from ..plan import NoGang
from ..reads import Reads
from ..rule import Resize, rule
from ..workloads import GroupedGangs, PodTemplate, Workload, capable

WHOLE_NODE = rule("topology.whole-node", Action.deny,
                  "a multi-pod Job whose GPUs per pod differ from the pool's per node", Resize.grow)
SINGLE_NODE_FIT = rule("topology.single-node-fit", Action.deny, "one pod asking for more GPUs than a node has",
                       Resize.any)
DOMAIN_FIT = rule("topology.domain-fit", Action.deny,
                  "more workers than nodes in the largest domain of the requested topology level", Resize.grow)
COLOCATION_UNAVAILABLE = rule("topology.colocation-unavailable", Action.warn,
                              "the requested colocation cannot be expressed for this object or backend")
COLOCATION_RISK = rule("topology.colocation-risk", Action.warn,
                       "the cluster's scheduler cannot guarantee that the workers start together in one domain")


def mutate(ctx: Context) -> None:
    """Colocate the workers at the requested level, with the mechanism the plan chose
    (``plan.plan_colocation``): the native gang's topology constraint (written by the gang concern with the
    gang), Kueue's TAS annotation, or a required pod affinity on the level's node label with the workload's
    own pods; warn where the method cannot guarantee the outcome (see :func:`_report_risk`)."""
    r, colocation = ctx.resolved, ctx.plan.colocation
    level = colocation.level
    if colocation.method is None or level is None:
        return
    _report_risk(ctx, colocation.method)
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
        ctx.report(COLOCATION_UNAVAILABLE, "spec.scheduling", colocation.unavailable, "")
    elif colocation.by_gang:
        ctx.satisfied("topology")  # the gang concern writes the constraint with the gang


def _report_risk(ctx: Context, method: str) -> None:
    """Warn where the colocation method cannot hold the gang's promise on the cluster the policy targets.

    Measured with kube-scheduler 1.36 (racks of 4 and 3 free nodes, the smaller one scoring higher, 4
    workers): required pod affinity put the first worker in the small rack; with a native gang none
    was ever bound although the other rack was free, without a gang 3 were bound and the 4th waited
    for good. Without the topology gate auto therefore adds no colocation, and the workers may span
    domains. Explicit ``topologyMethod: none`` is the platform's own choice and is not warned about.
    """
    r, platform, target = ctx.resolved, ctx.policy.platform, ctx.plan.target
    level, n, key = r.level_name, r.gpu_pods, ctx.policy.keys.topology
    where = f'metadata.annotations["{key}"]'
    if method == "none" and platform.gang.topologyMethod == "auto":
        if ctx.plan.gang.why_not is NoGang.foreign:
            return  # the workload's own gang mechanism places it (a Kueue-managed JobSet: Kueue's topology)
        if target.backend is None:
            ctx.report(COLOCATION_RISK, where,
                       f"the {n} workers may span {level}s: without a gang scheduler nothing places them in one "
                       f"{level}, and required pod affinity would let the first workers start in a {level} without "
                       f"room for all {n} while the rest wait for good; trainadmit added no colocation",
                       f"a gang backend with topology (the native gang with {TOPOLOGY_GATE}, Kueue's topology-aware "
                       f"scheduling) places them; or set {key}: any")
            return
        ctx.report(COLOCATION_RISK, where,
                   f"the {n} workers may span {level}s: without feature gate {TOPOLOGY_GATE} the scheduler cannot "
                   f"place a native gang in one {level}, and required pod affinity would let the gang wait for good "
                   f"when its first worker lands in a {level} without room for all {n}, although another {level} "
                   "fits it; trainadmit added no colocation",
                   f"declare {TOPOLOGY_GATE} in Platform.spec.featureGates once the cluster runs it (trainadmit then "
                   f"writes a PodGroup topology constraint), or set {key}: any")
    elif method == "podAffinity":
        gang = "the gang may never start" if r.gang and target.backend is not None else \
            "the workers that fit start and hold their GPUs"
        native = target.backend is GangBackend.native and TOPOLOGY_GATE in target.gates
        ctx.report(COLOCATION_RISK, where,
                   f"required pod affinity cannot guarantee one {level} for {n} workers: the first worker picks its "
                   f"{level} alone, and when that {level} has no room for all {n}, {gang} although another {level} "
                   "fits them",
                   ("set Platform.spec.gang.topologyMethod: auto (the PodGroup's topology constraint)" if native else
                    "use a scheduler that places the gang per domain (native gang with "
                    f"{TOPOLOGY_GATE}, Kueue's topology-aware scheduling)") + f", or set {key}: any")


def _pod_affinity(ctx: Context, node_label: str, source: Source) -> None:
    """Required pod affinity of every GPU Pod to the workload's other GPU Pods on the level's node
    label (the first Pod of a group that matches its own term is schedulable; whether the rest fit its
    domain is not known then: :func:`_report_risk`). The Pods are selected by a label their operator
    puts on all of them with the workload's name (a Job's ``batch.kubernetes.io/job-name``, a JobSet's
    ``jobset.sigs.k8s.io/jobset-name``…), or by trainadmit's own workload label when the operator sets
    none; a LeaderWorkerSet colocates each group on its own (``matchLabelKeys`` on the group index)."""
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


def _gpu_path(ctx: Context, resource: str, template: PodTemplate, claims: frozenset[str] = frozenset()) -> str:
    """Where the template asks for its GPUs: the first container limit (where the kind holds it: a TrainJob's in
    ``spec.trainer``), else the first DRA claim holding GPUs."""
    for ref in template.main_containers:
        limits = ((ref.body.get("resources") or {}).get("limits") or {})
        if resource in limits:
            return field_path(ctx.patcher.route((*template.container_path(ref), "resources", "limits", resource)))
    for claim in pod_claims(template.pod_spec):
        if claim.name in claims:
            return field_path((*template.spec_path, "resourceClaims", claim.index))
    return field_path((*template.spec_path, "containers"))


def _set_gpus(r, per: int) -> str:
    """How to ask for ``per`` GPUs per Pod, in the terms the workload asks for them."""
    if r.gpu_resource:
        return f"{r.gpu_resource}: {per}"
    return f"count: {per} in the claim's {r.gpu_classes[0] if r.gpu_classes else 'GPU'} request"


def validate(ctx: Context, view: Workload) -> None:
    r, pool = ctx.resolved, ctx.resolved.pool
    if pool is None or not r.gpus_per_pod:
        return
    per, name, resource = pool.gpu.perNode, r.pool_name, r.gpu_resource or ""
    templates = {t.root: t for t in view.templates}
    for original, gpus in r.gpu_templates:
        template = templates.get(original.root, original)
        gpu_path = _gpu_path(ctx, resource, template, r.gpu_claims.get(original.root, frozenset()))
        if r.gpu_pods > 1 and gpus != per:
            total = r.total_gpus
            workers = max(1, ceil(total / per))
            hint = f"set {_set_gpus(r, per)} and {workers} worker{'s' if workers != 1 else ''}"
            if workers * per != total:
                hint += f" ({workers * per} GPUs in all)"
            ctx.report(WHOLE_NODE, gpu_path,
                       f"requests {gpus} GPUs per worker across {r.gpu_pods} workers; pool {name} has {per} "
                       "GPUs per node: multi-node workers must take whole nodes", hint)
        if r.gpu_pods <= 1 and gpus > per:
            workers = ceil(gpus / per)
            ctx.report(SINGLE_NODE_FIT, gpu_path,
                       f"requests {gpus} GPUs in one pod; nodes of pool {name} have {per}: a pod cannot "
                       "span nodes", f"run {workers} workers with {_set_gpus(r, per)} as an Indexed Job")
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
            hint = (f"set {ctx.policy.keys.topology}: {bigger}" if bigger else "") + \
                   (" or " if bigger else "") + f"use at most {domain} workers"
            ctx.report(DOMAIN_FIT, f'metadata.annotations["{ctx.policy.keys.topology}"]',
                       f"{r.gpu_pods} workers need {nodes_needed} nodes in one {r.level_name}, and the largest "
                       f"{r.level_name} of pool {name} has {domain} nodes ({where})", hint)


CONCERN = Concern("topology", rules=(WHOLE_NODE, SINGLE_NODE_FIT, DOMAIN_FIT, COLOCATION_UNAVAILABLE, COLOCATION_RISK),
                  mutate=mutate, validate=validate,
                  reads=Reads(metadata=("labels", "annotations", "name"), annotations=(KUEUE_REQUIRED_TOPOLOGY,),
                              pod=("affinity", "resourceClaims"), container=("resources",)))
