"""Topology: whole-node workers, single-node fit, the requested domain, the pool, the gang shape.

A multi-node job whose workers do not take whole nodes shares nodes with others and gets uneven
NVLink/NIC bandwidth; a gang larger than any domain of its level, or than the pool, waits forever.
Both are cheaper to refuse at submission than to discover after hours in a queue.
"""

from __future__ import annotations

import hashlib
import json
from math import ceil

from ...policy.policyset import TOPOLOGY_GATE
from ...policy.vocab import Action, GangBackend
from ..backends import (
    KAI_BATCH_MIN_MEMBER,
    KAI_REQUIRED_PLACEMENT,
    KAI_TOPOLOGY,
    KUEUE_REQUIRED_TOPOLOGY,
    TOPOLOGY_REQUESTS,
)
from ..concern import Concern
from ..context import Context
from ..decision import Source
from ..dra import pod_claims
from ..fit import Limit
from ..intent import gpu_request
from ..paths import Path
from ..plan import GATE, NoGang
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
COLOCATION_RISK = rule(
    "topology.colocation-risk", Action.note,
    "the cluster's scheduler cannot guarantee that the workers start together in one domain (a note: the platform's)",
    explain="measured with kube-scheduler 1.36: with required pod affinity the first worker picks its domain alone; "
            "when that domain has no room for all the workers, a native gang is never bound although another domain "
            "fits it, and without a gang the workers that fit start and hold their GPUs while the rest wait. So "
            "without a scheduler that places a gang per domain (the native gang with TopologyAwareWorkloadScheduling, "
            "Kueue's topology-aware scheduling, KAI with a Topology) trainadmit gates the gang's Pods "
            "(trainadmit.io/placement) and its elected reconciler writes one domain with room for all of them "
            "before lifting the gate (under coscheduling, Volcano or KAI their scheduler still forms the gang); the "
            "note is left for what nothing can hold in one domain (required pod affinity the platform chose, a kind "
            "whose groups gang apart, an elastic job or a gang of a minimum): the platform team fixes it "
            "(Platform.spec.featureGates, the gang backend), a workload only chooses to accept it (topology: any)")


def mutate(ctx: Context) -> None:
    """Colocate the workers at the requested level, with the mechanism the plan chose
    (``plan.plan_colocation``): the native gang's topology constraint (written by the gang concern with the
    gang), Kueue's TAS annotation, the placement gate (:func:`_placement_gate`), or a required pod affinity on the
    level's node label with the workload's own pods; warn where the method cannot guarantee the outcome (see
    :func:`_report_risk`)."""
    r, colocation = ctx.resolved, ctx.plan.colocation
    level = colocation.level
    if colocation.left_to:
        ctx.note(f"workers are not colocated at level {r.level_name} by trainadmit: left to {colocation.left_to}")
    if colocation.uncarried:
        ctx.note(f"workers are not colocated at level {r.level_name} by trainadmit: {colocation.uncarried}")
    if colocation.ungated:
        ctx.note(f"workers are colocated at level {r.level_name} by required pod affinity, not the placement gate: "
                 f"{colocation.ungated}")
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
    elif colocation.method == GATE:
        _placement_gate(ctx, level.nodeLabel, source)
    elif colocation.unavailable:
        key = ctx.policy.keys.topology
        ctx.report(COLOCATION_UNAVAILABLE, f'metadata.annotations["{key}"]',
                   f"workers are not colocated at level {r.level_name}: {colocation.unavailable}",
                   f"set {key}: any, or Platform.spec.gang.topologyMethod: podAffinity (required pod affinity, "
                   "which cannot guarantee one domain: topology.colocation-risk)")
    elif colocation.method == "kai":
        _kai(ctx, level.nodeLabel, source)
    elif colocation.by_gang:
        ctx.satisfied("topology")  # the gang concern writes the constraint with the gang


def placement_key(ctx: Context) -> str:
    """The name of the placement gate, and of the pod template annotation that describes the gang to the ungater."""
    return f"{ctx.policy.platform.intentPrefix}/placement"


def placement_value(ctx: Context, node_label: str) -> str:
    """The template annotation of the placement gate: the gang (``<ns>/<workload>``; without a name
    yet, "" and the ungater groups the Pods by their controller), the Pods it waits for, the level's node label
    and name, the pool's node selector. Compact JSON with sorted pool keys: the same object gives the same text."""
    r, w = ctx.resolved, ctx.workload
    value = {"gang": f"{ctx.namespace}/{w.name}" if w.name else "", "size": r.gpu_pods, "key": node_label,
             "level": r.level_name, "pool": dict(sorted((r.pool.nodeSelector if r.pool is not None else {}).items()))}
    return _COMPACT.encode(value)


# json.dumps(value, separators=(",", ":")) builds this encoder on every call: one, configured the same, encodes the same
_COMPACT = json.JSONEncoder(separators=(",", ":"))


def _placement_gate(ctx: Context, node_label: str, source: Source) -> None:
    """The placement gate on every GPU template: a scheduling gate of trainadmit's, and the annotation that tells the
    ungater (``cluster.placement``) the gang, its size and the level, so that it writes one domain with room for the
    whole gang into all of its Pods and lifts the gate from them together. Idempotent: a template that already
    carries the gate and an annotation keeps both."""
    key = placement_key(ctx)
    value = placement_value(ctx, node_label)
    for template in ctx.pool_templates:
        path = (*template.meta_path, "annotations", key)
        if ctx.patcher.get(path) is None:
            ctx.inject(path, value, "topology", source)
        else:
            ctx.satisfied("topology")
        gates = (*template.spec_path, "schedulingGates")
        present = ctx.patcher.get(gates) or []
        if any(isinstance(g, dict) and g.get("name") == key for g in present):
            ctx.satisfied("topology")
        else:
            ctx.inject_extend(gates, [({"name": key}, source)], "topology")


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


def _report_risk(ctx: Context, method: str) -> None:
    """Say (a note: the platform's to change, ``COLOCATION_RISK.explain``) where the colocation method cannot hold
    the gang's promise on the cluster the policy targets: one sentence of what will happen, and the one change
    the workload can make (accept it). Explicit ``topologyMethod: none`` is the platform's own choice and is not
    said."""
    r, platform, target = ctx.resolved, ctx.policy.platform, ctx.plan.target
    level, n, key = r.level_name, r.gpu_pods, ctx.policy.keys.topology
    where = f'metadata.annotations["{key}"]'
    accept = f"set {key}: any to ask for no {level}"
    per_domain = (f"a gang backend that places a gang per domain (the native gang with {TOPOLOGY_GATE}, Kueue's "
                  "topology-aware scheduling)")
    if method == "none" and platform.gang.topologyMethod == "auto":
        if ctx.plan.gang.why_not is NoGang.foreign:
            return  # the workload's own gang mechanism places it (a Kueue-managed JobSet: Kueue's topology)
        if target.backend is None:
            lacks, fix = "no gang scheduler", per_domain
        else:
            lacks, fix = f"no {TOPOLOGY_GATE}", f"declare {TOPOLOGY_GATE} in Platform.spec.featureGates once it runs"
        ctx.report(COLOCATION_RISK, where,
                   f"the {n} workers may span {level}s: this cluster cannot hold a gang in one {level} ({lacks})",
                   f"{accept}; platform team: {fix}")
    elif method == "podAffinity":  # required pod affinity: the first worker picks the domain alone
        if r.gang and target.backend is not None:
            what = f"the gang may never start if its first worker lands in a {level} too small for all {n}"
        else:
            what = (f"the workers that fit start and hold their GPUs while the rest wait, if the first lands in a "
                    f"{level} too small for all {n}")
        if target.backend is GangBackend.native and TOPOLOGY_GATE in target.gates:
            fix = "set Platform.spec.gang.topologyMethod: auto (the PodGroup's topology constraint)"
        elif target.backend is GangBackend.kai:
            fix = "set Platform.spec.gang.kaiTopology to the cluster's KAI Topology"
        else:
            fix = per_domain
        ctx.report(COLOCATION_RISK, where, f"{what} (required pod affinity)", f"{accept}; platform team: {fix}")


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


def _gpu_path(ctx: Context, resource: str, template: PodTemplate, claims: frozenset[str] = frozenset()) -> Path:
    """Where the template asks for its GPUs: its container limit or request (``intent.gpu_request``), else the
    first DRA claim holding GPUs."""
    path = gpu_request(template, resource) if resource else (*template.spec_path, "containers")
    if path[-1] == "containers":
        for claim in pod_claims(template.pod_spec):
            if claim.name in claims:
                return (*template.spec_path, "resourceClaims", claim.index)
    return path


def _largest_domain(ctx: Context, pool, level) -> tuple[int, bool]:
    """The nodes of the largest domain of ``level`` in the pool, and whether the cluster says so (else the policy's
    ``maxNodes``)."""
    known = ctx.cluster.largest_domain(pool, level)
    return (known, True) if known is not None else (level.maxNodes, False)


def limits(ctx: Context, view: Workload) -> list[Limit]:
    """Whole nodes for multi-node workers, one node for one Pod, one domain of the requested level for the gang."""
    r, pool = ctx.resolved, ctx.resolved.pool
    if pool is None or not r.gpus_per_pod:
        return []
    per, name = pool.gpu.perNode, r.pool_name
    out = [Limit(WHOLE_NODE, lambda s: s.gpu_pods <= 1 or all(g == per for g in s.per_pod),
                 f"multi-node workers of pool {name} take whole nodes of {per} GPUs"),
           Limit(SINGLE_NODE_FIT, lambda s: s.gpu_pods > 1 or all(g <= per for g in s.per_pod),
                 f"a node of pool {name} has {per} GPUs")]
    if r.level is not None:
        domain, _ = _largest_domain(ctx, pool, r.level)
        out.append(Limit(DOMAIN_FIT, lambda s: s.gpu_pods <= max(domain, 1),
                         f"the largest {r.level_name} of pool {name} has {domain} nodes"))
    return out


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
            fit = ctx.size_fit(view)
            ctx.report(WHOLE_NODE, gpu_path,
                       f"requests {gpus} GPUs per worker across {r.gpu_pods} workers; pool {name} has {per} "
                       "GPUs per node: multi-node workers must take whole nodes", fit.hint, fit.fix)
        if r.gpu_pods <= 1 and gpus > per:
            fit = ctx.size_fit(view)
            hint = fit.hint
            if not fit.counts and not fit.unfixable:  # the kind holds no count that could run more Pods
                hint += (f", or run {ceil(gpus / per)} Pods of {per} GPUs as one workload (an Indexed batch/v1 "
                         "Job)")
            ctx.report(SINGLE_NODE_FIT, gpu_path,
                       f"requests {gpus} GPUs in one pod; nodes of pool {name} have {per}: a pod cannot "
                       "span nodes", hint, fit.fix)
    nodes_needed = max(r.gpu_pods, 1)
    if r.level is not None and r.gpu_pods > 1:
        domain, known = _largest_domain(ctx, pool, r.level)
        if nodes_needed > domain:
            fit = ctx.size_fit(view)
            where = "in the cluster" if known else "by policy"
            ctx.report(DOMAIN_FIT, f'metadata.annotations["{ctx.policy.keys.topology}"]',
                       f"{r.gpu_pods} workers need {nodes_needed} nodes in one {r.level_name}, and the largest "
                       f"{r.level_name} of pool {name} has {domain} nodes ({where})",
                       fit.hint + _larger_level(ctx, view, pool, domain), fit.fix)


def _larger_level(ctx: Context, view: Workload, pool, domain: int) -> str:
    """The other fix of a domain too small: a larger level whose domain holds the largest shape every other size
    rule passes (with that shape's counts, when it is not the workload's own), as text after the size fix."""
    other = ctx.size_fit(view, without=DOMAIN_FIT.id)
    workers = other.shape.gpu_pods if other.shape is not None else 0
    if other.unfixable or workers <= domain:
        return ""  # the requested level is not what bounds it
    for level in pool.topology.levels:
        if _largest_domain(ctx, pool, level)[0] >= workers:
            return f", or set {ctx.policy.keys.topology}: {level.name}" + (f" and {other.changes}" if other.changes
                                                                          else "")
    return ""


CONCERN = Concern("topology", rules=(WHOLE_NODE, SINGLE_NODE_FIT, DOMAIN_FIT, COLOCATION_UNAVAILABLE, COLOCATION_RISK),
                  mutate=mutate, validate=validate, limits=limits,
                  # the KAI gang's minimum: whether the placement gate can wait for its gang (plan._gang_minimum)
                  reads=Reads(metadata=("labels", "annotations", "name"),
                              annotations=(*TOPOLOGY_REQUESTS, KAI_BATCH_MIN_MEMBER),
                              pod=("affinity", "resourceClaims", "schedulingGates"), container=("resources",)))
