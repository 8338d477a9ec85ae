"""NCCL: the pool's NCCL variables on every GPU container (user-set values are kept unless enforced)."""

from __future__ import annotations

from ..context import Context
from ..policy.models import Enforceable
from . import gpu_containers


def apply(ctx: Context) -> None:
    r, w = ctx.resolved, ctx.workload
    if r.pool is None or not r.pool.nccl.env:
        return
    source = f"Pool {r.pool_name}: spec.nccl.env"
    for ref in gpu_containers(ctx):
        env_path = (*w.container_path(ref), "env")
        env = ctx.patcher.get(env_path) or []
        index = {e.get("name"): i for i, e in enumerate(env) if isinstance(e, dict)}
        missing = []
        for name, value in r.pool.nccl.env.items():
            found = index.get(name)
            if found is None:
                missing.append(({"name": name, "value": value}, f"{source}.{name}"))
                continue
            entry = env[found]
            if entry.get("value") == value and "valueFrom" not in entry:
                ctx._note((*env_path, found), "nccl", f"{source}.{name}")
            else:
                user = entry.get("value", "<valueFrom>")
                ctx.conflict(Enforceable.ncclEnv, (*env_path, found, "value"), user, value)
        ctx.inject_extend(env_path, missing, "nccl")
