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
        for name, value in r.pool.nccl.env.items():
            env = ctx.patcher.get(env_path) or []
            found = next((i for i, e in enumerate(env) if isinstance(e, dict) and e.get("name") == name), None)
            if found is None:
                ctx.inject_append(env_path, {"name": name, "value": value}, "nccl", f"{source}.{name}")
                continue
            entry = env[found]
            if entry.get("value") == value and "valueFrom" not in entry:
                ctx._note((*env_path, found), "nccl", f"{source}.{name}")
            else:
                user = entry.get("value", "<valueFrom>")
                ctx.conflict(Enforceable.ncclEnv, (*env_path, found, "value"), user, value)
