"""Hardware and driver: the node facts a pool requires, as required node affinity; a gang that too few
nodes with those facts can hold is refused.

GPU feature discovery and the GPU and network operators publish what a node has in its labels: GPU
count, driver and CUDA major version, RDMA capability, NIC firmware class. A pool's nodeSelector says
which nodes belong to it; ``requiredNodeLabels`` says what each of them must still have for a training
job to perform (a node whose driver is too old, or whose GPU count dropped to 7 because a GPU fell off
the bus, must not get a worker). Every GPU pod template gets the requirements as required node-affinity
expressions, ANDed into each term the user wrote (the user's terms keep their OR). With a cluster view,
a gang larger than the nodes that meet them would wait forever: it is refused, naming the labels too
few nodes carry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...policy.vocab import Action
from ..concern import Concern
from ..context import Context
from ..decision import Source
from ..fit import Limit
from ..paths import Path, as_dict, field_path
from ..reads import Reads
from ..rule import Resize, rule
from ..workloads import PodTemplate, Workload
from .placement import CONTRADICTION
from .shape import MALFORMED

if TYPE_CHECKING:  # types only: the engine runs on cached policy records too (policy.cache)
    from ...policy.models import PoolSpec

MATCHING_NODES = rule("hardware.matching-nodes", Action.deny,
                      "a gang needs more nodes than the pool has with its required node labels (cluster view)",
                      Resize.grow)

REQUIRED = ("affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")


def mutate(ctx: Context) -> None:
    pool = ctx.resolved.pool
    if pool is None or not pool.requiredNodeLabels:
        return
    wanted = [(req.as_k8s(), ctx.pool_source("spec", "requiredNodeLabels", i))
              for i, req in enumerate(pool.requiredNodeLabels)]
    for template in ctx.pool_templates:
        _require(ctx, template, wanted)


def _malformed(ctx: Context, template: PodTemplate) -> bool:
    """A field on the way to the node-affinity terms that is not a map or list: a denial naming it
    (the object cannot be patched there), never an exception."""
    path: Path = template.spec_path
    node: object = template.pod_spec
    for key in REQUIRED:
        path, node = (*path, key), as_dict(node).get(key)
        if node is not None and not isinstance(node, dict):
            ctx.report(MALFORMED, field_path(path), "must be a map", "fix the field's type")
            return True
    terms = as_dict(node).get("nodeSelectorTerms")
    if terms is None:
        return False
    if not isinstance(terms, list) or not all(isinstance(t, dict) for t in terms):
        ctx.report(MALFORMED, field_path((*path, "nodeSelectorTerms")), "must be a list of maps",
                   "fix the field's type")
        return True
    for i, term in enumerate(terms):
        if term.get("matchExpressions") is not None and not isinstance(term["matchExpressions"], list):
            ctx.report(MALFORMED, field_path((*path, "nodeSelectorTerms", i, "matchExpressions")), "must be a list",
                       "fix the field's type")
            return True
    return False


def _require(ctx: Context, template: PodTemplate, wanted: list[tuple[dict, Source]]) -> None:
    if _malformed(ctx, template):
        return
    terms_path = (*template.spec_path, *REQUIRED, "nodeSelectorTerms")
    terms = ctx.patcher.get(terms_path)
    if not terms:  # no required node affinity yet: one term holding the pool's expressions
        ctx.inject(terms_path, [{"matchExpressions": [e for e, _ in wanted]}], "hardware",
                   ctx.pool_source("spec", "requiredNodeLabels"))
        return
    for i, term in enumerate(terms):
        existing = term.get("matchExpressions") or []
        missing = [(e, source) for e, source in wanted if e not in existing]
        if len(missing) < len(wanted):
            ctx.satisfied("hardware")
        ctx.inject_extend((*terms_path, i, "matchExpressions"), missing, "hardware")


def validate(ctx: Context, view: Workload) -> None:
    pool = ctx.resolved.pool
    if pool is None or not pool.requiredNodeLabels:
        return
    for template in ctx.pool_templates_in(view):
        _selector_contradictions(ctx, pool, template)
    _enough_nodes(ctx, pool, view)


def _selector_contradictions(ctx: Context, pool: PoolSpec, template: PodTemplate) -> None:
    selector = as_dict(template.pod_spec.get("nodeSelector"))
    for req in pool.requiredNodeLabels:
        if req.key in selector and isinstance(selector[req.key], str) and not req.matches(selector):
            ctx.report(CONTRADICTION, field_path((*template.spec_path, "nodeSelector", req.key)),
                       f"nodeSelector {req.key}={selector[req.key]} contradicts pool {ctx.resolved.pool_name}, whose "
                       f"nodes must have {req}", "remove it: the pool chooses the nodes")


def limits(ctx: Context, view: Workload) -> list[Limit]:
    """No more workers than the pool has nodes with its required node labels (cluster view)."""
    r, pool = ctx.resolved, ctx.resolved.pool
    if pool is None or not pool.requiredNodeLabels or not r.gpus_per_pod:
        return []
    matching = ctx.cluster.pool_nodes_matching(pool, pool.requiredNodeLabels)
    if matching is None:
        return []
    return [Limit(MATCHING_NODES, lambda s: max(s.gpu_pods, 1) <= matching,
                  f"{matching} nodes of pool {r.pool_name} have its required node labels")]


def _enough_nodes(ctx: Context, pool: PoolSpec, view: Workload) -> None:
    """Refused only where some of the pool's nodes lack a label it requires: a pool whose every node has them is
    only too small, which ``quota.pool-capacity`` says, and no node is to be brought up to labels it has."""
    r = ctx.resolved
    if not r.gpus_per_pod:
        return
    needed = max(r.gpu_pods, 1)
    matching = ctx.cluster.pool_nodes_matching(pool, pool.requiredNodeLabels)
    total = ctx.cluster.pool_nodes(pool)
    if matching is None or matching >= needed or (total is not None and matching >= total):
        return
    counts = [(req, ctx.cluster.pool_nodes_matching(pool, [req])) for req in pool.requiredNodeLabels]
    lacking = [(req, n) for req, n in counts if n is not None and (total is None or n < total)]
    short = [(req, n) for req, n in lacking if n < needed] or sorted(lacking, key=lambda item: item[1])[:1]
    held = "; ".join(f"{req} holds on {n}" for req, n in short)
    fit = ctx.size_fit(view)
    lack = total - matching if total is not None else 0
    others = ("the other node" if lack == 1 else f"the other {lack} nodes") if total is not None else "more nodes"
    ctx.report(MATCHING_NODES, f'metadata.labels["{ctx.policy.keys.pool}"]',
               f"needs {needed} node{'s' if needed != 1 else ''} of pool {r.pool_name} with its required node "
               f"labels, and {matching} of its {total if total is not None else '?'} nodes have them ({held})",
               (f"{fit.hint}, or " if fit.fix else "")
               + f"ask the platform team to bring {others} up to {', '.join(str(req) for req, _ in short)}", fit.fix)


CONCERN = Concern("hardware", rules=(MATCHING_NODES,), mutate=mutate, validate=validate, limits=limits,
                  reads=Reads(pod=("affinity", "nodeSelector")))
