"""What trainadmit applied (the provenance annotation), and the /validate check that it survived.

The validating webhook sees the object after every mutating webhook and after the apiserver decoded
it. Re-running the mutations on a scratch copy shows what is missing: if trainadmit had mutated it
(the ``applied`` annotation of this policy generation) and something it injected is gone, another
webhook or the apiserver removed it (the apiserver silently drops fields whose feature gate is off);
a gang that another webhook removed is denied with the reason, since the Job would otherwise run without
one. A native gang field the apiserver dropped means the cluster does not have it (another version, the
Workload API off): that is the case ``gang.unavailable`` decides (a note: the Pods run without the gang, saying
why; deny: refused), as it does at /mutate when the cluster view shows it first.
"""

from __future__ import annotations

from ...policy.vocab import Action
from ..applied import applied_value, read_applied
from ..concern import Concern
from ..context import Context
from ..paths import pointer
from ..provenance import FORGED
from ..reads import INTENT_KEYS, Reads
from ..rule import rule
from .gang import MEMBERSHIP_LOST, UNAVAILABLE

NOT_MUTATED = rule("final.not-mutated", Action.deny,
                   "/validate sees an object trainadmit's mutating webhook never processed")
INJECTION_LOST = rule("final.injection-lost", Action.deny,
                      "/validate: fields trainadmit injected are missing from the object about to be stored")
NOT_ADMITTED = rule("final.not-admitted", Action.warn,
                    "audit and reports: a stored workload the policy would still change: created while the webhooks "
                    "were away (or skipped it), or under a policy that set less (deny: reported as a failure)")
CONCERN = Concern("final", rules=(NOT_MUTATED, INJECTION_LOST, NOT_ADMITTED, FORGED),
                  reads=Reads(annotations=(INTENT_KEYS,)))

_GANG_LOSS = {
    "coscheduling": ("the scheduling.x-k8s.io/pod-group label", "another mutating webhook removed it"),
    "volcano": ("the scheduling.volcano.sh/group-min-member annotation", "another mutating webhook removed it"),
    "kueue": ("the kueue.x-k8s.io/queue-name label or suspend: true", "another mutating webhook changed it"),
    "kai": ("the kai.scheduler/queue label or schedulerName kai-scheduler", "another mutating webhook changed it"),
}


def _native_loss(ctx: Context, backend: str, where: str) -> None:
    """The apiserver dropped the native gang field: the cluster does not have it, and the message says which
    fact of the cluster that is, by the version the decision was made for."""
    target = ctx.plan.target
    version = f"{target.version[0]}.{target.version[1]}"
    if backend == "native/job-scheduling":
        what = "spec.scheduling"
        why = ("Kubernetes " + version + " has no Job.spec.scheduling (it first exists in 1.37)"
               if target.version < (1, 37) else "the apiserver drops Job.spec.scheduling while feature gate "
               "WorkloadWithJob or GenericWorkload is off (both off by default in 1.37)")
    else:
        what = "schedulingGroup"
        why = (f"the apiserver drops schedulingGroup while its Workload API is off (feature gate GenericWorkload "
               f"and {target.podgroup_api} in --runtime-config)")
    if target.assumed:
        why += f"; {target.assumed}"
        hint = "run trainadmit serve with --cluster-live, so that auto chooses from what the cluster serves"
    else:
        hint = ("enable it on the cluster, or set Platform.spec.gang to what the cluster serves (backend: auto "
                "chooses it)")
    ctx.report(UNAVAILABLE, where,
               f"its Pods may start one by one: the apiserver dropped the {backend} gang trainadmit injected ({what}): "
               f"{why}", f"platform team: {hint}")


def record_provenance(ctx: Context, concern_order: tuple[str, ...]) -> None:
    """Set the ``applied`` annotation on the object (and its pod templates) naming the concerns that wrote
    something into it, and what the decision left to the user or to another component (``Context.notes``).
    A concern that found the object already as the policy wants it wrote nothing and is not named, unless an
    earlier pass of this policy generation wrote it (the annotation of that pass lists it): mutating a mutated
    object changes nothing."""
    written = {i.concern for i in ctx.injections}
    earlier = read_applied(ctx.workload.obj, ctx.policy)
    if earlier is not None and earlier.get("generation") == ctx.policy.generation:
        listed = earlier.get("injected")
        if isinstance(listed, list):
            written.update(c for c in listed if isinstance(c, str))
    concerns = tuple(c for c in concern_order if c in written)
    if not concerns and not ctx.notes:
        return
    r = ctx.resolved
    value = applied_value(ctx.policy.generation, r.pool_name, ctx.plan.gang.mechanism,
                          r.level_name if ctx.plan.colocation.applies else None, concerns,
                          tuple(sorted(ctx.notes)))
    key = ctx.policy.keys.applied
    ctx.patcher.set(("metadata", "annotations", key), value)
    for template in ctx.workload.templates:  # the Pods carry it too: they were decided with their parent
        if template.root:
            ctx.patcher.set((*template.meta_path, "annotations", key), value)


def check(ctx: Context, concern_order: tuple[str, ...]) -> None:
    """Report what re-running the mutations on the received object had to inject again."""
    missing = [(pointer(i.location), i.concern) for i in ctx.injections]
    if not missing:
        return
    applied = read_applied(ctx.workload.obj, ctx.policy)
    order = {c: i for i, c in enumerate(concern_order)}
    concerns = sorted({c for _, c in missing}, key=lambda c: order.get(c, len(order)))
    if applied is None:
        ctx.report(NOT_MUTATED, "metadata.annotations",
                   f"trainadmit's mutating webhook did not process this object (it would set: {', '.join(concerns)})",
                   "check that the trainadmit MutatingWebhookConfiguration is installed and its service is up")
        return
    if applied.get("generation") != ctx.policy.generation:
        return  # the policy changed between the two webhook calls: the rules below still apply
    gang_lost = [p for p, c in missing if c == "gang"]
    backend = ctx.plan.gang.backend
    if gang_lost and backend and backend.startswith("native/"):
        _native_loss(ctx, backend, gang_lost[0])
    elif gang_lost and backend:
        what, why = _GANG_LOSS.get(backend, (", ".join(gang_lost), "something removed it"))
        ctx.report(MEMBERSHIP_LOST, gang_lost[0],
                   f"the {backend} gang membership trainadmit injected ({what}) is not in the object the apiserver "
                   f"is about to store: {why}; the Job would start without a gang",
                   "find the webhook that removes it, or change Platform.spec.gang.backend")
    other = [p for p, c in missing if c != "gang"]
    if other:
        ctx.report(INJECTION_LOST, other[0],
                   f"fields trainadmit injected are missing in the final object ({', '.join(other[:5])}"
                   f"{', …' if len(other) > 5 else ''}); another webhook or the apiserver removed them", "")


def stored(ctx: Context, concern_order: tuple[str, ...]) -> None:
    """Audit (a stored object asked as a CREATE): what the mutation would still set means the object did not get
    it at admission, so it runs without it (a Job without its gang or its pool's toleration may never start).
    Mutation is idempotent: a workload admitted under this policy sets nothing, and is not reported."""
    if not ctx.injections:
        return
    order = {c: i for i, c in enumerate(concern_order)}
    concerns = sorted({i.concern for i in ctx.injections}, key=lambda c: order.get(c, len(order)))
    fields = f"{len(ctx.injections)} field{'s' if len(ctx.injections) != 1 else ''} the policy sets"
    applied = read_applied(ctx.workload.obj, ctx.policy)
    generation = applied.get("generation") if applied is not None else None
    if applied is None:
        why = "it was not admitted through trainadmit's webhooks (created while they were away, or skipped)"
    else:
        why = f"it was admitted under policy generation {generation}, which set less"
    ctx.report(NOT_ADMITTED, "metadata", f"{why}: it lacks {fields} ({', '.join(concerns)}) and runs without them",
               "re-create it so that admission configures it (trainadmit audit lists each field it lacks)")
