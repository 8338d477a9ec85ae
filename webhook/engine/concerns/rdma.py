"""RDMA: the pool's NIC resources on every GPU container (extended resources, or a DRA claim on the pool's
ResourceClaimTemplate), its Multus networks, and IPC_LOCK.

RDMA verbs pin memory, which needs CAP_IPC_LOCK (or an unlimited memlock rlimit, which a PodSpec
cannot set). The resource names come from the pool because they differ per cluster
(``rdma/rdma_shared_device_a``, ``rdma/ib``, ``nvidia.com/hostdev``...). A template that brings its own
network (its own NICs, DRA NIC claims, Multus or GKE networks, the host's network: ``network.brought_by``,
read into the plan) gets none of this: the user's choice stands, and the decision says so. NICs on a pool
without an RDMA fabric are refused: no node of the pool could ever satisfy them.
"""

from __future__ import annotations

from ...grammars.nccl import is_transport_variable
from ...grammars.quantity import as_count
from ...policy.vocab import Action, Enforceable
from ..concern import Concern
from ..context import Context
from ..decision import shared_source
from ..network import MULTUS_NETWORKS, POOL_NIC_CLAIM, Brought
from ..paths import as_dict, as_list
from ..reads import Reads
from ..rule import rule
from ..workloads import PatchedTemplates, PodTemplate, Workload, capable
from .enforced import conflict

POOL_WITHOUT_RDMA = rule("rdma.pool-without-rdma", Action.deny, "RDMA resources requested on a pool without RDMA")


def mutate(ctx: Context) -> None:
    pool = ctx.resolved.pool
    if pool is None:
        return
    for template in ctx.pool_templates:
        brought = ctx.plan.network_of(template)
        if brought is not None and brought.own_network:
            _kept(ctx, brought)
        elif pool.rdma is not None:
            _inject(ctx, pool.rdma, template)


def _kept(ctx: Context, brought: Brought) -> None:
    """Say that the template keeps the network it brought, and what of the pool's it therefore does not get."""
    pool = ctx.resolved.pool
    withheld = []
    if pool is not None and pool.rdma is not None:
        withheld.append(f"RDMA resources ({', '.join(pool.rdma.resources)})" if pool.rdma.resources else "")
        withheld.append(f"networks ({', '.join(pool.rdma.networks)})" if pool.rdma.networks else "")
        withheld.append("IPC_LOCK" if pool.rdma.ipcLock else "")
    transport = [n for n in (pool.nccl.env if pool is not None else {}) if is_transport_variable(n)]
    withheld.append(f"NCCL transport variables ({', '.join(transport)})" if transport else "")
    withheld = [w for w in withheld if w]
    if withheld:
        ctx.note(f"{brought.label} keeps its own network ({brought.describe()}): pool {ctx.resolved.pool_name}'s "
                 f"{', '.join(withheld)} not added")


NIC_CLAIM = POOL_NIC_CLAIM


def _inject(ctx: Context, rdma, template: PodTemplate) -> None:
    containers = ctx.gpu_containers(template)
    name = ctx.resolved.pool_name or ""
    if rdma.claimTemplate and containers:
        _nic_claim(ctx, rdma.claimTemplate, template, containers)
    for ref in containers:
        base = template.container_path(ref)
        for resource, count in rdma.resources.items():
            source = shared_source("Pool", name, ("spec", "rdma", "resources", resource))
            for section in ("limits", "requests"):
                path = (*base, "resources", section, resource)
                current = ctx.patcher.get(path)
                if current is None:  # as the policy declares it (1 or "1"): the apiserver canonicalizes both
                    ctx.inject(path, count, "rdma", source)
                elif as_count(current) == as_count(count):
                    ctx.satisfied("rdma")
        if rdma.ipcLock:
            caps_path = (*base, "securityContext", "capabilities", "add")
            if "IPC_LOCK" in (ctx.patcher.get(caps_path) or []):
                ctx.satisfied("rdma")
            else:
                source = shared_source("Pool", name, ("spec", "rdma", "ipcLock"))
                ctx.inject_extend(caps_path, [("IPC_LOCK", source)], "rdma")
    if rdma.networks and containers:
        wanted = ",".join(rdma.networks)
        path = (*template.meta_path, "annotations", MULTUS_NETWORKS)
        current = ctx.patcher.get(path)
        if current is None or current == wanted:
            ctx.inject(path, wanted, "rdma", shared_source("Pool", name, ("spec", "rdma", "networks")))
        else:
            conflict(ctx, Enforceable.rdmaNetworks, path, current, wanted)


def _nic_claim(ctx: Context, claim_template: str, template: PodTemplate, containers: list) -> None:
    """The pool's NICs as DRA devices (DRANET): the pool's ResourceClaimTemplate claimed by the Pod, and the
    claim listed by every GPU container (a device a container does not list is not exposed to it). A Pod that
    already claims that template keeps its own name for the claim."""
    w = ctx.workload
    if capable(w.adapter, PatchedTemplates) and "resourceClaims" in w.adapter.cannot_carry:
        return
    source = ctx.pool_source("spec", "rdma", "claimTemplate")
    claims_path = (*template.spec_path, "resourceClaims")
    present = [c for c in as_list(ctx.patcher.get(claims_path)) if isinstance(c, dict)]
    mine = next((c.get("name") for c in present if c.get("resourceClaimTemplateName") == claim_template), None)
    if mine is None:
        mine = NIC_CLAIM
        ctx.inject_extend(claims_path, [({"name": mine, "resourceClaimTemplateName": claim_template}, source)], "rdma")
    else:
        ctx.satisfied("rdma")
    for ref in containers:
        path = (*template.container_path(ref), "resources", "claims")
        if any(isinstance(c, dict) and c.get("name") == mine for c in as_list(ctx.patcher.get(path))):
            ctx.satisfied("rdma")
        else:
            ctx.inject_extend(path, [({"name": mine}, source)], "rdma")


def validate(ctx: Context, view: Workload) -> None:
    r = ctx.resolved
    if r.pool is None or r.pool.rdma is not None:
        return
    known = {name for p in ctx.policy.pools.values() if p.rdma for name in p.rdma.resources}
    rdma_pools = sorted(n for n, p in ctx.policy.pools.items() if p.rdma)
    keys = ctx.policy.keys
    for template in view.templates:
        for ref in template.all_containers:
            resources = as_dict(ref.body.get("resources"))
            for section in ("limits", "requests"):
                for res in sorted(as_dict(resources.get(section))):
                    if res not in known and not ctx.policy.is_nic_resource(res):
                        continue
                    path = (*template.container_path(ref), "resources", section, res)
                    fix = (f"set {keys.pool}: {rdma_pools[0]} (a pool with RDMA: {', '.join(rdma_pools)}) or remove "
                           f"{ctx.user_field(path)}" if rdma_pools else
                           f"remove {ctx.user_field(path)}: no pool of the platform has RDMA")
                    ctx.report(POOL_WITHOUT_RDMA, path,
                               f"container {ref.name} requests {res}, but pool {r.pool_name} has no RDMA fabric", fix)
                    break  # one report per resource (limits and requests name the same NIC)


# what a template brings for its network (read by the plan for this concern): its network annotations, NIC
# resources and DRA claims, the host's network, its NCCL transport variables (their names)
CONCERN = Concern("rdma", rules=(POOL_WITHOUT_RDMA,), mutate=mutate, validate=validate,
                  reads=Reads(metadata=("annotations",), annotations=(MULTUS_NETWORKS,),
                              pod=("hostNetwork", "resourceClaims"),
                              container=("name", "resources", "securityContext", "env"),
                              init_container=("name", "resources", "env")))
