"""Every concern of the engine, in the order mutations run and rules report, and every rule id.

The one place that lists the concerns. The engine runs ``MUTATIONS`` and ``VALIDATIONS`` in this
order; ``RULES`` (id -> declaration) is what the policy loader checks ``Platform.spec.rules``
against, what `check --explain` cites and what the policy reference documents.
"""

from __future__ import annotations

from ..policy.vocab import Action
from . import clusterview, context, final_state, intent, shape
from .concern import Concern, RuleId
from .concerns import (
    capacity,
    custom,
    gang,
    gpu,
    hardware,
    nccl,
    placement,
    preflight,
    priority,
    quota,
    rdma,
    references,
    storage,
    topology,
)

CONCERNS: tuple[Concern, ...] = (
    shape.CONCERN, intent.CONCERN, gpu.CONCERN, gang.CONCERN, placement.CONCERN, hardware.CONCERN, topology.CONCERN,
    rdma.CONCERN, nccl.CONCERN, storage.CONCERN, preflight.CONCERN, priority.CONCERN, quota.CONCERN, capacity.CONCERN,
    references.CONCERN, clusterview.CONCERN, context.CONCERN, final_state.CONCERN, custom.CONCERN,
)
MUTATIONS: tuple[Concern, ...] = tuple(c for c in CONCERNS if c.mutate is not None)
VALIDATIONS: tuple[Concern, ...] = tuple(c for c in CONCERNS if c.validate is not None)
# the order concerns are listed in the provenance annotation
INJECTING: tuple[str, ...] = tuple(c.name for c in MUTATIONS)


def _rules() -> dict[str, RuleId]:
    out: dict[str, RuleId] = {}
    for concern in CONCERNS:
        for declared in concern.rules:
            if declared.id in out:
                raise RuntimeError(f"rule {declared.id} is declared twice: {out[declared.id].origin}, "
                                   f"{declared.origin}")
            out[declared.id] = declared
    return out


RULES: dict[str, RuleId] = _rules()
RULE_DEFAULTS: dict[str, Action] = {rule_id: declared.default for rule_id, declared in RULES.items()}
