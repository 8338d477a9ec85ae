"""RDMA: NIC resources only make sense on a pool with an RDMA fabric (the Job could never be placed)."""

from __future__ import annotations

from ..context import Context, field_path
from ..workloads import Workload, as_dict


def check(ctx: Context, view: Workload) -> None:
    """RDMA resources only make sense on a pool with an RDMA fabric."""
    r = ctx.resolved
    if r.pool is None or r.pool.rdma is not None:
        return
    known = {name for p in ctx.policy.pools.values() if p.rdma for name in p.rdma.resources}
    rdma_pools = sorted(n for n, p in ctx.policy.pools.items() if p.rdma)
    for ref in view.containers():
        limits = as_dict(as_dict(ref.body.get("resources")).get("limits"))
        requests = as_dict(as_dict(ref.body.get("resources")).get("requests"))
        for res in {*limits, *requests}:
            if res in known or res.startswith("rdma/"):
                ctx.report("rdma.pool-without-rdma", field_path((*view.container_path(ref), "resources")),
                           f"container {ref.name} requests {res}, but pool {r.pool_name} has no RDMA fabric",
                           f"use an RDMA pool ({', '.join(rdma_pools) or 'none defined'}) or remove {res}")
