"""GPU requests: whole numbers, limits equal to requests, and one GPU type per workload.

Kubernetes' "Schedule GPUs" page: GPUs are specified in limits; requests may be omitted (they take
the limit) or must equal it; requests without limits are invalid.
"""

from __future__ import annotations

from ...policy.vocab import Action
from ..concern import Concern
from ..context import Context
from ..decision import FieldFix, fix_text
from ..intent import gpu_request, unprovided
from ..paths import as_dict
from ..reads import Reads
from ..rule import rule
from ..workloads import PodTemplate, Workload, resource_count

SINGLE_TYPE = rule("gpu.single-type", Action.deny, "two GPU types in one workload, or not the pool's GPU type")
REQUESTS_LIMITS = rule("gpu.requests-limits", Action.deny, "GPU requests without limits, or unequal to them")
INVALID_COUNT = rule("gpu.invalid-count", Action.deny, "a GPU count that is not a whole number")


def validate(ctx: Context, view: Workload) -> None:
    r = ctx.resolved
    if len(r.gpu_resources) > 1:
        other = next((gpu_request(t, res) for res in r.gpu_resources[1:] for t in view.templates
                      if res in t.resource_names), (*view.templates[0].spec_path, "containers"))
        ctx.report(SINGLE_TYPE, other,
                   f"requests {' and '.join(r.gpu_resources)}: a training job runs on one GPU type",
                   f"remove {ctx.user_field(other)}: request only {r.gpu_resources[0]} in every container")
    if r.pool is not None and r.gpu_resource and r.gpu_resource != r.pool.gpu.resource:
        fitting = sorted(n for n, p in ctx.policy.pools.items() if p.gpu.resource == r.gpu_resource)
        ctx.report(SINGLE_TYPE, f'metadata.labels["{ctx.policy.keys.pool}"]',
                   f"pool {r.pool_name} provides {r.pool.gpu.resource}, but the containers request {r.gpu_resource}",
                   f"set {ctx.policy.keys.pool}: {fitting[0]} (a pool of {r.gpu_resource})" if fitting else
                   f"request {r.pool.gpu.resource}, the GPUs of pool {r.pool_name}")
    if r.pool is not None and r.gpu_classes:
        asked = unprovided(r.pool, None, r.gpu_requests)
        if asked is not None:
            offered = ", ".join(c.name for c in r.pool.gpu.deviceClasses) or "none"
            pools = sorted(n for n, p in ctx.policy.pools.items() if unprovided(p, None, r.gpu_requests) is None)
            ctx.report(SINGLE_TYPE, f'metadata.labels["{ctx.policy.keys.pool}"]',
                       f"pool {r.pool_name}'s GPUs are DRA devices of DeviceClass {offered}, but a claim asks for "
                       f"{asked}", f"set {ctx.policy.keys.pool}: {pools[0]} (a pool of {asked})" if pools else
                       "claim the pool's DeviceClass (with its selectors), or ask the platform team for a pool of "
                       f"{asked}")
    for template in view.templates:
        _counts(ctx, view, template)


def _counts(ctx: Context, view: Workload, template: PodTemplate) -> None:
    resources = ctx.resolved.gpu_resources
    if not resources:
        return
    for ref in template.all_containers:
        for resource in resources:
            limit, request, malformed = resource_count(ref.body, resource)
            if not malformed and (request is None or request == limit):
                continue  # nothing to report: no request (none of the resource, or a limit alone), or the limit's
            base = (*template.container_path(ref), "resources")
            limits, requests = (*base, "limits", resource), (*base, "requests", resource)
            if malformed:
                in_limits = resource in as_dict(as_dict(ref.body.get("resources")).get("limits"))
                bad = limits if limit is None and in_limits else requests
                ctx.report(INVALID_COUNT, bad, f"{resource} in container {ref.name} must be a whole number",
                           f"set {ctx.user_field(bad)}: a whole number such as 8")
            elif request is not None and limit is None:
                # the size fix may change this container's GPUs: its values, so the two fixes agree
                fix = ctx.agreeing(view, (FieldFix(ctx.patcher.route(limits), request),))
                ctx.report(REQUESTS_LIMITS, requests,
                           f"container {ref.name} requests {request} {resource} without a limit",
                           f"{fix_text(fix)} (GPUs belong in limits)", fix)
            elif request is not None and limit is not None and request != limit:
                fix = ctx.agreeing(view, (FieldFix(ctx.patcher.route(requests), limit),))
                ctx.report(REQUESTS_LIMITS, requests,
                           f"container {ref.name} requests {request} but limits {limit} {resource}",
                           f"{fix_text(fix)}, or remove it (the request takes the limit)", fix)


CONCERN = Concern("gpu", rules=(SINGLE_TYPE, REQUESTS_LIMITS, INVALID_COUNT), validate=validate,
                  reads=Reads(container=("name", "resources"), init_container=("name", "resources")))
