"""What the platform makes every workload of a kind go through: the notes (``Action.note``) that no workload can
remove, said once to the platform team rather than only to each user.

A note of the cluster (no gang backend served, a feature gate the policy does not declare, no scheduler that holds
a gang in one domain) reaches each user whose workload it concerns, as a warning kubectl shows with the prefix
"trainadmit note", and ``check --strict`` does not fail on it. The platform team, who can act on it, should learn
it once: ``platform_notes`` lists them for the policy and the cluster a server decides for, from the same target
(``engine.target.choose``) and colocation method (``plan.colocation_method``) the decisions use, for whatever
reports the server's view of the cluster (startup lines, ``/readyz``, a gauge: ``server.cluster_report``).
"""

from __future__ import annotations

from ..grammars.lazydataclass import dataclass
from ..policy import PolicySet
from ..policy.policyset import TOPOLOGY_GATE
from ..policy.vocab import Action
from .clusterview import ClusterView, NoCluster
from .concerns.gang import CLUSTER_SUPPORT, UNAVAILABLE
from .concerns.topology import COLOCATION_RISK
from .plan import colocation_method, plan_target
from .rule import RuleId
from .target import Target


@dataclass(frozen=True)
class PlatformNote:
    """One condition of the platform that workloads are told about: the rule that tells them, its action under the
    policy (a note unless the policy changed it), and what it means for the platform team."""

    rule: str
    action: Action
    message: str


def platform_notes(policy: PolicySet, cluster: ClusterView | None = None) -> tuple[PlatformNote, ...]:
    """The conditions of ``cluster`` (its discovery; none: what ``auto`` assumes) under ``policy`` that the
    note rules tell workloads about. A rule the policy turns off is left out."""
    return target_notes(policy, plan_target(policy, cluster or NoCluster()))


def target_notes(policy: PolicySet, target: Target) -> tuple[PlatformNote, ...]:
    """The notes of ``target`` (the cluster ``engine.target.choose`` made of the policy and a discovery)."""
    found: list[tuple[RuleId, str]] = []
    if target.backend is None and target.unavailable:
        found.append((UNAVAILABLE, f"gang workloads run without a gang: {target.unavailable}; {target.remedy}"))
    found += [(CLUSTER_SUPPORT, gap) for gap in target.gaps]
    method = colocation_method(policy, target)
    if method == "none" and policy.platform.gang.topologyMethod == "auto":
        lacks = "no gang backend" if target.backend is None else f"no {TOPOLOGY_GATE} in Platform.spec.featureGates"
        found.append((COLOCATION_RISK, f"multi-node workloads get no colocation at their topology level ({lacks}): "
                                       "their workers may span domains"))
    elif method == "podAffinity":
        found.append((COLOCATION_RISK, "multi-node workloads are colocated by required pod affinity, which places one "
                                       "Pod at a time: a gang may wait for good in a domain too small for it"))
    out = []
    for rule, message in found:
        action = policy.actions.get(rule.id, rule.default)
        if action is not Action.off:
            out.append(PlatformNote(rule.id, action, message))
    return tuple(out)
