"""Priority: the tier's PriorityClass on every template (and, for a workload Kueue manages, its
WorkloadPriorityClass label). A TrainJob's runtime patches cannot carry a PriorityClass.

A bare Pod reaches webhooks after the Priority admission plugin already resolved
``spec.priority`` from the class it had (0 for none), and nothing resolves it again. So for Pods
trainadmit sets ``priority`` and ``preemptionPolicy`` from the tier together with the class name;
for Jobs the pods are created later from the template and resolved normally.
"""

from __future__ import annotations

from ...policy.vocab import Enforceable, GangBackend
from ..backends import KUEUE_PRIORITY
from ..concern import Concern
from ..context import Context
from ..decision import Source
from ..reads import Reads
from ..workloads import GangMethod, PatchedTemplates, capable
from .enforced import conflict


def mutate(ctx: Context) -> None:
    r, w = ctx.resolved, ctx.workload
    if r.tier is None or not (r.gpu_resource or r.gpu_classes):
        return
    name, tier = r.tier
    carried = not (capable(w.adapter, PatchedTemplates) and "priorityClassName" in w.adapter.cannot_carry)
    for template in w.templates if carried else ():  # one priority for the whole job
        path = (*template.spec_path, "priorityClassName")
        current = ctx.patcher.get(path)
        if current is None or current == "" or current == tier.className:
            ctx.inject(path, tier.className, "priority", Source("PriorityTier", name, ("spec", "className")))
            if not template.root:  # a bare Pod
                ctx.inject((*template.spec_path, "priority"), tier.value, "priority",
                           Source("PriorityTier", name, ("spec", "value")))
                ctx.inject((*template.spec_path, "preemptionPolicy"), tier.preemptionPolicy, "priority",
                           Source("PriorityTier", name, ("spec", "preemptionPolicy")))
        else:
            conflict(ctx, Enforceable.priorityClassName, path, current, tier.className)
    kueue = w.adapter.gang(GangBackend.kueue.value).method is GangMethod.kueue
    if ctx.plan.target.backend is GangBackend.kueue and tier.kueuePriorityClass and kueue:
        label = ("metadata", "labels", KUEUE_PRIORITY)
        if ctx.patcher.get(label):
            ctx.satisfied("priority")
        else:
            ctx.inject(label, tier.kueuePriorityClass, "priority",
                       Source("PriorityTier", name, ("spec", "kueuePriorityClass")))


CONCERN = Concern("priority", mutate=mutate, reads=Reads(pod=("priorityClassName", "priority", "preemptionPolicy")))
