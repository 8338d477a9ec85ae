"""One module per concern; each ``apply(ctx)`` adds what its policy setting prescribes.

Order matters only for readability of the patch; every mutation is idempotent on its own (it
checks what is already there), so the set is idempotent as a whole.
"""

from __future__ import annotations

from ..context import Context
from ..workloads import ContainerRef, resource_count


def gpu_containers(ctx: Context) -> list[ContainerRef]:
    """Regular containers that request the workload's GPU resource: the ones that run NCCL."""
    cached = ctx.cache.get("gpu_containers")
    if cached is not None:
        return cached
    resource = ctx.resolved.gpu_resource
    out = []
    if resource is not None:
        for ref in ctx.workload.containers(include_init=False):
            limit, request, _ = resource_count(ref.body, resource)
            if (limit or request or 0) > 0:
                out.append(ref)
    ctx.cache["gpu_containers"] = out
    return out
