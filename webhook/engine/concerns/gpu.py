"""GPU requests: whole numbers, limits equal to requests, and one GPU type per workload.

Kubernetes' "Schedule GPUs" page: GPUs are specified in limits; requests may be omitted (they take
the limit) or must equal it; requests without limits are invalid.
"""

from __future__ import annotations

from ...policy.vocab import Action
from ..concern import Concern
from ..context import Context
from ..paths import field_path
from ..reads import Reads
from ..rule import rule
from ..workloads import PodTemplate, Workload, resource_count
from .intent import unprovided

SINGLE_TYPE = rule("gpu.single-type", Action.deny, "two GPU types in one workload, or not the pool's GPU type")
REQUESTS_LIMITS = rule("gpu.requests-limits", Action.deny, "GPU requests without limits, or unequal to them")
INVALID_COUNT = rule("gpu.invalid-count", Action.deny, "a GPU count that is not a whole number")


def validate(ctx: Context, view: Workload) -> None:
    r = ctx.resolved
    if len(r.gpu_resources) > 1:
        ctx.report(SINGLE_TYPE, field_path((*view.templates[0].spec_path, "containers")),
                   f"requests {' and '.join(r.gpu_resources)}: a training job runs on one GPU type",
                   f"request only {r.gpu_resources[0]} in every container")
    if r.pool is not None and r.gpu_resource and r.gpu_resource != r.pool.gpu.resource:
        ctx.report(SINGLE_TYPE, f'metadata.labels["{ctx.policy.keys.pool}"]',
                   f"pool {r.pool_name} provides {r.pool.gpu.resource}, but the containers request {r.gpu_resource}",
                   "pick a pool for that GPU type or request the pool's resource")
    if r.pool is not None and r.gpu_classes:
        asked = unprovided(r.pool, None, r.gpu_requests)
        if asked is not None:
            offered = ", ".join(c.name for c in r.pool.gpu.deviceClasses) or "none"
            ctx.report(SINGLE_TYPE, f'metadata.labels["{ctx.policy.keys.pool}"]',
                       f"pool {r.pool_name}'s GPUs are DRA devices of DeviceClass {offered}, but a claim asks for "
                       f"{asked}", "pick the pool of that DeviceClass, or claim the pool's (with its selectors)")
    for template in view.templates:
        _counts(ctx, template)


def _counts(ctx: Context, template: PodTemplate) -> None:
    for ref in template.all_containers:
        for resource in ctx.resolved.gpu_resources:
            limit, request, malformed = resource_count(ref.body, resource)
            path = field_path((*template.container_path(ref), "resources"))
            if malformed:
                ctx.report(INVALID_COUNT, path, f"{resource} in container {ref.name} must be a whole number",
                           "set a whole number such as 8")
            elif request is not None and limit is None:
                ctx.report(REQUESTS_LIMITS, path,
                           f"container {ref.name} requests {request} {resource} without a limit",
                           f"set limits {resource}: {request} (GPUs belong in limits)")
            elif request is not None and limit is not None and request != limit:
                ctx.report(REQUESTS_LIMITS, path,
                           f"container {ref.name} requests {request} but limits {limit} {resource}",
                           f"make both {limit}")


CONCERN = Concern("gpu", rules=(SINGLE_TYPE, REQUESTS_LIMITS, INVALID_COUNT), validate=validate,
                  reads=Reads(container=("name", "resources"), init_container=("name", "resources")))
