"""The pure engine: (request, policy set, cluster view) -> Decision.

Layers below: ``policy`` (what the platform declared) and ``grammars``. Nothing here does I/O
except ``load_policy``, which reads a policy directory with the engine's rule ids."""

from __future__ import annotations

from pathlib import Path

from ..policy import PolicyError, PolicyProblem, PolicySet
from .decide import decide, match
from .decision import Decision, Injection, Source, Violation
from .registry import RULE_DEFAULTS, RULES
from .request import Request
from .workloads import HANDLED_KINDS


def load_policy(directory: str | Path) -> PolicySet:
    """Load a policy directory, checking what names the engine's own facts against them: rule-action
    overrides against the declared rules, custom rules' kinds against the handled kinds."""
    from ..policy.loader import load_policy_dir  # pydantic: not for a set from the policy cache

    policy = load_policy_dir(directory, RULES)
    problems = []
    for name, spec in sorted(policy.rules.items()):
        for i, kind in enumerate(spec.kinds):
            if kind not in HANDLED_KINDS:
                ref = policy.sources.get(("Rule", name))
                problems.append(PolicyProblem(ref.file if ref else str(directory), ref.document if ref else None,
                                              f"spec.kinds[{i}]",
                                              f"{kind!r} is not a kind trainadmit handles; one of "
                                              f"{', '.join(sorted(HANDLED_KINDS))}", ref.line if ref else None))
    if problems:
        raise PolicyError(problems)
    return policy


__all__ = ["RULES", "RULE_DEFAULTS", "Decision", "Injection", "Request", "Source", "Violation", "decide",
           "load_policy", "match"]
