"""What a decision leaves to trainadmit's elected reconciler, on a server where none runs.

Admission creates nothing (the workload may still be refused after the mutating webhook, or its create fail):
the PodGroups of the backends that need a standalone one come from the reconciler once the workload
is stored, and the placement gate's Pods are released only by it. On a server that runs without it (``serve``
without ``--reconcile``, or a reconciler that cannot hold its Lease or do its work: ``ClusterView.reconciler``)
such a workload is admitted and then waits, Pending, with no condition and no event saying why. So the decision
says it to whoever submits it, with what happens and what to run; ``reconciler.missing: deny`` refuses such
workloads instead. A view that cannot tell (``check``) says nothing.
"""

from __future__ import annotations

from ...policy.vocab import Action
from ..concern import Concern
from ..context import Context
from ..reads import Reads
from ..rule import rule
from ..workloads import Workload

GATE_METHOD = "gate"  # the colocation method whose scheduling gate only the elected reconciler lifts
MISSING = rule("reconciler.missing", Action.warn,
               "the workload needs what trainadmit's elected reconciler makes (its PodGroup, the lifting of its "
               "placement gate) and the server says none runs: admitted, its Pods wait until one does "
               "(deny: refused)")


def needs(ctx: Context) -> list[str]:
    """What of this decision only the reconciler makes happen, as phrases ("" when nothing)."""
    out = [f"its {c.get('kind')} {(c.get('metadata') or {}).get('name')} ({c.get('apiVersion')})"
           for c in ctx.companions]
    colocation = getattr(ctx.plan, "colocation", None)
    if getattr(colocation, "method", None) == GATE_METHOD:
        out.append(f"the release of its Pods' scheduling gate {ctx.policy.platform.intentPrefix}/placement")
    return out


def validate(ctx: Context, view: Workload) -> None:
    wanted = needs(ctx)
    if not wanted:
        return
    why = ctx.cluster.reconciler()
    if why is None:
        return
    pods = ctx.resolved.pods if ctx.resolved is not None else 0
    ctx.report(MISSING, "metadata",
               f"{' and '.join(wanted)} come{'s' if len(wanted) == 1 else ''} from trainadmit's reconciler, and none "
               f"runs ({why}): admitted, its {pods} Pods wait Pending until one runs (it then completes workloads "
               "already stored)",
               "platform team: run trainadmit serve --reconcile (deploy/ does, Lease-elected), or set rule "
               "reconciler.missing: deny to refuse such workloads meanwhile")


CONCERN = Concern("reconciler", rules=(MISSING,), validate=validate, reads=Reads())
