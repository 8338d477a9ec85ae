"""RDMA: the pool's NIC resources on every GPU container, its Multus networks, and IPC_LOCK.

RDMA verbs pin memory, which needs CAP_IPC_LOCK (or an unlimited memlock rlimit, which a PodSpec
cannot set). The resource names come from the pool because they differ per cluster
(``rdma/rdma_shared_device_a``, ``rdma/ib``, ``nvidia.com/hostdev``...). RDMA resources on a pool
without an RDMA fabric are refused: no node of the pool could ever satisfy them.
"""

from __future__ import annotations

from ...grammars.quantity import as_count
from ...policy.vocab import Action, Enforceable
from ..concern import Concern
from ..context import Context
from ..paths import as_dict, field_path
from ..reads import Reads
from ..rule import rule
from ..workloads import PodTemplate, Workload
from .enforced import conflict

MULTUS_NETWORKS = "k8s.v1.cni.cncf.io/networks"

POOL_WITHOUT_RDMA = rule("rdma.pool-without-rdma", Action.deny, "RDMA resources requested on a pool without RDMA")


def mutate(ctx: Context) -> None:
    pool = ctx.resolved.pool
    if pool is None or pool.rdma is None:
        return
    for template in ctx.pool_templates:
        _inject(ctx, pool.rdma, template)


def _inject(ctx: Context, rdma, template: PodTemplate) -> None:
    containers = ctx.gpu_containers(template)
    for ref in containers:
        base = template.container_path(ref)
        for resource, count in rdma.resources.items():
            source = ctx.pool_source("spec", "rdma", "resources", resource)
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
                ctx.inject_extend(caps_path, [("IPC_LOCK", ctx.pool_source("spec", "rdma", "ipcLock"))], "rdma")
    if rdma.networks and containers:
        wanted = ",".join(rdma.networks)
        path = (*template.meta_path, "annotations", MULTUS_NETWORKS)
        current = ctx.patcher.get(path)
        if current is None or current == wanted:
            ctx.inject(path, wanted, "rdma", ctx.pool_source("spec", "rdma", "networks"))
        else:
            conflict(ctx, Enforceable.rdmaNetworks, path, current, wanted)


def validate(ctx: Context, view: Workload) -> None:
    r = ctx.resolved
    if r.pool is None or r.pool.rdma is not None:
        return
    known = {name for p in ctx.policy.pools.values() if p.rdma for name in p.rdma.resources}
    rdma_pools = sorted(n for n, p in ctx.policy.pools.items() if p.rdma)
    for template in view.templates:
        for ref in template.all_containers:
            resources = as_dict(ref.body.get("resources"))
            for res in sorted({*as_dict(resources.get("limits")), *as_dict(resources.get("requests"))}):
                if res in known or res.startswith("rdma/"):
                    ctx.report(POOL_WITHOUT_RDMA, field_path((*template.container_path(ref), "resources")),
                               f"container {ref.name} requests {res}, but pool {r.pool_name} has no RDMA fabric",
                               f"use an RDMA pool ({', '.join(rdma_pools) or 'none defined'}) or remove {res}")


CONCERN = Concern("rdma", rules=(POOL_WITHOUT_RDMA,), mutate=mutate, validate=validate,
                  reads=Reads(metadata=("annotations",), annotations=(MULTUS_NETWORKS,),
                              container=("resources", "securityContext"), init_container=("resources",)))
