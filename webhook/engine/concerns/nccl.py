"""NCCL: the pool's NCCL variables on every GPU container, and the values users set checked.

User-set values are kept unless the policy enforces NCCL env; a value outside NCCL's documented
grammar is denied (or warned), and NCCL's "debugging" variables are warned about in production Jobs.
A template that brings its own network (the plan's ``network_of``) gets none of the pool's transport
variables (``grammars.nccl.is_transport_variable``: HCAs, interfaces, the net plugin…), which name the
pool's NICs, not the ones it brought; the others (``NCCL_DEBUG``…) it still gets.
"""

from __future__ import annotations

from ...grammars.nccl import DEBUGGING_VARS, VARIABLE_PREFIX, check_nccl_value, is_transport_variable
from ...policy.vocab import Action, Enforceable
from ..concern import Concern
from ..context import Context
from ..decision import Source, shared_source
from ..reads import Reads
from ..rule import rule
from ..workloads import PodTemplate, Workload, env_named
from .enforced import conflict

SYNTAX = rule("nccl.syntax", Action.deny, "an NCCL value outside NCCL's documented grammar")
SYNTAX_WARNING = rule("nccl.syntax-warning", Action.warn, "an NCCL value that is valid but likely not what was meant")
DEBUGGING_VARIABLE = rule("nccl.debugging-variable", Action.warn,
                          "an NCCL variable documented for debugging only, in a production Job")


def mutate(ctx: Context) -> None:
    r = ctx.resolved
    if r.pool is None or not r.pool.nccl.env:
        return
    everything = r.pool.nccl.env
    others = {name: value for name, value in everything.items() if not is_transport_variable(name)}
    for template in ctx.pool_templates:
        _inject(ctx, others if ctx.plan.own_network(template) else everything, template)


def _inject(ctx: Context, wanted: dict[str, str], template: PodTemplate) -> None:
    pool = ctx.resolved.pool_name or ""
    for ref in ctx.gpu_containers(template):
        env_path = (*template.container_path(ref), "env")
        env = ctx.patcher.get(env_path) or []
        # the last entry of each wanted name (the user's value the container ends up with); others are not looked up
        index = {name: i for i, e in enumerate(env) if isinstance(e, dict) and (name := e.get("name")) in wanted}
        missing: list[tuple[object, Source]] = []
        for name, value in wanted.items():
            found = index.get(name)
            if found is None:
                source = shared_source("Pool", pool, ("spec", "nccl", "env", name))
                missing.append(({"name": name, "value": value}, source))
                continue
            entry = env[found]
            if entry.get("value") == value and "valueFrom" not in entry:
                ctx.satisfied("nccl")
            else:
                user = entry.get("value", "<valueFrom>")
                conflict(ctx, Enforceable.ncclEnv, (*env_path, found, "value"), user, value)
        ctx.inject_extend(env_path, missing, "nccl")


def validate(ctx: Context, view: Workload) -> None:
    pool_env = ctx.resolved.pool.nccl.env if ctx.resolved.pool else {}
    for template in view.templates:
        _check(ctx, pool_env, template)


def _check(ctx: Context, pool_env: dict[str, str], template: PodTemplate) -> None:
    for ref in template.all_containers:
        for i, entry, name in env_named(ref.body.get("env"), VARIABLE_PREFIX):
            value = entry.get("value")
            if not isinstance(value, str):
                continue
            if pool_env.get(name) == value:
                continue  # the pool's own values were checked when the policy loaded
            path = (*template.container_path(ref), "env", i)
            problem = check_nccl_value(name, value)
            if problem is not None:
                found = SYNTAX if problem.severity == "error" else SYNTAX_WARNING
                ctx.report(found, path, f"{name}={value!r} in container {ref.name}: {problem.message}",
                           f"fix {ctx.user_field((*path, 'value'))} (see NCCL's environment variable reference)")
            if name in DEBUGGING_VARS:
                ctx.report(DEBUGGING_VARIABLE, path,
                           f"NCCL documents {name} as a debugging variable, not for production runs",
                           f"remove {ctx.user_field(path)} once the problem it works around is understood")


CONCERN = Concern("nccl", rules=(SYNTAX, SYNTAX_WARNING, DEBUGGING_VARIABLE), mutate=mutate, validate=validate,
                  reads=Reads(container=("env",), init_container=("env",), env_values=("NCCL_*",)))
