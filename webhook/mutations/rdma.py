"""RDMA: the pool's NIC resources on every GPU container, its Multus networks, and IPC_LOCK.

RDMA verbs pin memory, which needs CAP_IPC_LOCK (or an unlimited memlock rlimit, which a PodSpec
cannot set). The resource names come from the pool because they differ per cluster
(``rdma/rdma_shared_device_a``, ``rdma/ib``, ``nvidia.com/hostdev``...).
"""

from __future__ import annotations

from ..context import Context
from ..policy.models import Enforceable
from . import gpu_containers

MULTUS_NETWORKS = "k8s.v1.cni.cncf.io/networks"


def apply(ctx: Context) -> None:
    r, w = ctx.resolved, ctx.workload
    pool = r.pool
    if pool is None or pool.rdma is None:
        return
    rdma = pool.rdma
    source = f"Pool {r.pool_name}: spec.rdma"
    for ref in gpu_containers(ctx):
        base = w.container_path(ref)
        for resource, count in rdma.resources.items():
            for section in ("limits", "requests"):
                path = (*base, "resources", section, resource)
                current = ctx.patcher.get(path)
                if current is None or str(current) == str(count):
                    ctx.inject(path, current if current is not None else str(count), "rdma", source)
        if rdma.ipcLock:
            caps_path = (*base, "securityContext", "capabilities", "add")
            caps = ctx.patcher.get(caps_path) or []
            if "IPC_LOCK" not in caps:
                ctx.inject_append(caps_path, "IPC_LOCK", "rdma", source + ".ipcLock")
            else:
                ctx._note(caps_path, "rdma", source + ".ipcLock")
    if rdma.networks and gpu_containers(ctx):
        wanted = ",".join(rdma.networks)
        path = (*w.pod_meta_path, "annotations", MULTUS_NETWORKS)
        current = ctx.patcher.get(path)
        if current is None or current == wanted:
            ctx.inject(path, wanted, "rdma", source + ".networks")
        else:
            ctx.conflict(Enforceable.rdmaNetworks, path, current, wanted)
