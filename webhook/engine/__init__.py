"""The pure engine: (request, policy set, cluster view) -> Decision.

Layers below: ``policy`` (what the platform declared) and ``grammars``. Nothing here does I/O
except ``load_policy``, which reads a policy directory with the engine's rule ids."""

from __future__ import annotations

from pathlib import Path

from ..policy import PolicySet
from .decide import decide, match
from .decision import Decision, Injection, Source, Violation
from .registry import RULE_DEFAULTS, RULES
from .request import Request
from .workloads import HANDLED_KINDS


def load_policy(directory: str | Path) -> PolicySet:
    """Load a policy directory, checking what names the engine's own facts against them: rule-action
    overrides against the declared rules, custom rules' kinds against the handled kinds."""
    from ..policy.loader import load_policy_dir  # pydantic: not for a set from the policy cache

    return load_policy_dir(directory, RULES, HANDLED_KINDS)


__all__ = ["RULES", "RULE_DEFAULTS", "Decision", "Injection", "Request", "Source", "Violation", "decide",
           "load_policy", "match"]
