"""NCCL values users set: documented syntax (deny) and debugging-only variables (warn)."""

from __future__ import annotations

from ..context import Context, field_path
from ..nccl import DEBUGGING_VARS, check_nccl_value
from ..workloads import Workload


def check(ctx: Context, view: Workload) -> None:
    pool_env = ctx.resolved.pool.nccl.env if ctx.resolved.pool else {}
    for ref in view.containers():
        env = ref.body.get("env")
        if not isinstance(env, list):
            continue
        for i, entry in enumerate(env):
            if not isinstance(entry, dict):
                continue
            name, value = entry.get("name"), entry.get("value")
            if not isinstance(name, str) or not name.startswith("NCCL_") or not isinstance(value, str):
                continue
            if pool_env.get(name) == value:
                continue  # the pool's own values were checked when the policy loaded
            path = field_path((*view.container_path(ref), "env", i))
            problem = check_nccl_value(name, value)
            if problem is not None:
                rule = "nccl.syntax" if problem.severity == "error" else "nccl.syntax-warning"
                ctx.report(rule, path, f"{name}={value!r} in container {ref.name}: {problem.message}",
                           "see the NCCL environment variable reference")
            if name in DEBUGGING_VARS:
                ctx.report("nccl.debugging-variable", path,
                           f"NCCL documents {name} as a debugging variable, not for production runs",
                           "remove it once the problem it works around is understood")
