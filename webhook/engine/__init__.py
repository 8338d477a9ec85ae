"""The pure engine: (request, policy set, cluster view) -> Decision.

Layers below: ``policy`` (what the platform declared) and ``grammars``. Nothing here does I/O
except ``load_policy``, which reads a policy directory with the engine's rule ids."""

from __future__ import annotations

from pathlib import Path

from ..policy import PolicySet, load_policy_dir
from .decide import decide, match
from .decision import Decision, Injection, Source, Violation
from .registry import RULE_DEFAULTS, RULES
from .request import Request


def load_policy(directory: str | Path) -> PolicySet:
    """Load a policy directory, checking rule-action overrides against the engine's declared rules."""
    return load_policy_dir(directory, RULES)


__all__ = ["RULES", "RULE_DEFAULTS", "Decision", "Injection", "Request", "Source", "Violation", "decide",
           "load_policy", "match"]
