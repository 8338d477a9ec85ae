"""Every concern of the engine, the order mutations run and rules report in, and every rule id.

The one place that lists the concerns. The engine runs ``MUTATIONS`` and ``VALIDATIONS`` in this order;
any other order that keeps each concern after the ones it declares in ``after`` gives the same decision
(``tests/engine/test_concern_order.py``), because concerns share nothing but the plan. ``RULES`` (id ->
declaration) is what the policy loader checks ``Platform.spec.rules`` against, what `check --explain`
cites and what the policy reference documents. ``READS`` is what the concerns that declare their reads
read together: the engine decides on the object cut down to it (``reads.Projection``).
"""

from __future__ import annotations

from ..policy.vocab import Action
from .concern import Concern
from .concerns import (
    capacity,
    custom,
    enforced,
    final_state,
    freshness,
    gang,
    gpu,
    hardware,
    intent,
    nccl,
    placement,
    preflight,
    priority,
    quota,
    rdma,
    reconciler,
    references,
    shape,
    storage,
    topology,
)
from .reads import Reads, union
from .rule import Resize, RuleId
from .workloads import WORKLOAD_READS

CONCERNS: tuple[Concern, ...] = (
    shape.CONCERN, intent.CONCERN, gpu.CONCERN, gang.CONCERN, placement.CONCERN, hardware.CONCERN, topology.CONCERN,
    rdma.CONCERN, nccl.CONCERN, storage.CONCERN, preflight.CONCERN, priority.CONCERN, quota.CONCERN, capacity.CONCERN,
    references.CONCERN, reconciler.CONCERN, freshness.CONCERN, enforced.CONCERN, final_state.CONCERN, custom.CONCERN,
)
MUTATIONS: tuple[Concern, ...] = tuple(c for c in CONCERNS if c.mutate is not None)
# rules on what the concerns declare they read, and rules on the whole object (custom CEL), which run last
VALIDATIONS: tuple[Concern, ...] = tuple(c for c in CONCERNS if c.validate is not None and c.reads is not None)
WHOLE_OBJECT_VALIDATIONS: tuple[Concern, ...] = tuple(c for c in CONCERNS if c.validate is not None and c.reads is None)
# what decides a template other workloads inherit (a TrainingRuntime): the concerns whose rules do not depend on
# a workload's size (its pool, placement, RDMA, NCCL values, whole nodes, references, the view's freshness;
# custom rules run on every object); never quota, capacity, gang, storage or what a mutation would have injected
TEMPLATE_CONCERNS = ("intent", "gpu", "placement", "topology", "rdma", "nccl", "references", "cluster")
TEMPLATE_VALIDATIONS: tuple[Concern, ...] = tuple(c for c in VALIDATIONS if c.name in TEMPLATE_CONCERNS)
# the order concerns are listed in the provenance annotation
INJECTING: tuple[str, ...] = tuple(c.name for c in MUTATIONS)
# what an UPDATE that resizes the workload runs again: the rules whose answer depends on its size
# (``rule(..., resize=...)``), through the validations of the concerns that declare them
RESIZE_RULES: dict[str, Resize] = {r.id: r.resize for c in CONCERNS for r in c.rules if r.resize is not None}
RESIZE_VALIDATIONS: tuple[Concern, ...] = tuple(c for c in VALIDATIONS if any(r.resize for r in c.rules))
# the bounds of the size rules, which the one size fix of a decision passes together (``Context.size_fit``)
SIZE_LIMITS = tuple(c.limits for c in CONCERNS if c.limits is not None)
TEMPLATE_LIMITS = tuple(c.limits for c in TEMPLATE_VALIDATIONS if c.limits is not None)
READS: Reads = union([WORKLOAD_READS, *(c.reads for c in CONCERNS if c.reads is not None)])


def _check(concerns: tuple[Concern, ...]) -> None:
    names = {c.name for c in concerns}
    for c in concerns:
        if c.mutate is not None and c.reads is None:
            raise RuntimeError(f"concern {c.name} mutates without declaring what it reads (Concern.reads)")
        for other in c.after:
            if other not in names:
                raise RuntimeError(f"concern {c.name} runs after {other}, which is not a concern")
    seen: set[str] = set()
    for c in MUTATIONS:  # the registry's own order must respect every ``after``
        missing = [o for o in c.after if o not in seen and any(m.name == o for m in MUTATIONS)]
        if missing:
            raise RuntimeError(f"concern {c.name} is listed before {', '.join(missing)}, which it runs after")
        seen.add(c.name)


def _rules() -> dict[str, RuleId]:
    out: dict[str, RuleId] = {}
    for concern in CONCERNS:
        for declared in concern.rules:
            if declared.id in out:
                raise RuntimeError(f"rule {declared.id} is declared twice: {out[declared.id].origin}, "
                                   f"{declared.origin}")
            out[declared.id] = declared
    return out


_check(CONCERNS)
RULES: dict[str, RuleId] = _rules()
RULE_DEFAULTS: dict[str, Action] = {rule_id: declared.default for rule_id, declared in RULES.items()}
