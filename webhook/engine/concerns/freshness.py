"""The cluster view's freshness: old data must not size quotas or domains.

A live view that fell behind (its watch broke, the apiserver is slow) would answer with counts that are
no longer true. A decision that would use the view is made without it instead, and says so with
``cluster.view-stale`` (deny by default: retry; ``warn``: admit on the policy's own figures).
"""

from __future__ import annotations

from ...policy.vocab import Action
from ..clusterview import DiscoveryOnly
from ..concern import Concern
from ..context import Context
from ..reads import Reads
from ..rule import rule

VIEW_STALE = rule("cluster.view-stale", Action.deny,
                  "the live cluster view is older than the server's --cluster-max-age: the decision was made "
                  "without it (warn: admit with a warning)")


def use_fresh_view(ctx: Context) -> None:
    """Drop the cluster view from this decision when it is too old to be trusted, and report that (what the
    cluster is, its version and served APIs, is kept: it does not change with the view's age)."""
    stale = ctx.cluster.stale()
    if stale is not None:
        ctx.report(VIEW_STALE, "metadata", f"{stale}; decided without the cluster view",
                   "retry once the server's cluster view has caught up (its /readyz says when)")
        ctx.cluster = DiscoveryOnly(ctx.cluster)


CONCERN = Concern("cluster", rules=(VIEW_STALE,), reads=Reads())
