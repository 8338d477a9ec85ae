"""A rule id and its declaration: the leaf every module that reports a rule imports.

Each module under ``concerns/`` declares its rules with ``rule(...)`` next to the code that reports them,
and the registry collects them. That one declaration is what the engine, the policy loader (which
overrides are valid), ``check --explain`` (where a rule is defined) and the generated policy reference
read, so they cannot drift. This module imports nothing of the engine, so anything may import it.
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path

from ..grammars.lazydataclass import dataclass
from ..policy.vocab import Action

_PACKAGE_PARENT = Path(__file__).resolve().parent.parent.parent


class Resize(StrEnum):
    """When a rule whose answer depends on the workload's size runs again on an UPDATE that resizes it (an
    UPDATE is validated, never mutated, and other rules ran when the object was created): ``grow``, when the
    workload grows (more Pods or GPUs: a shrink never breaks a limit); ``any``, on every resize (a gang's
    shape, a single Pod that must fit a node, whether the gang can follow)."""

    grow = "grow"
    any = "any"


@dataclass(frozen=True)
class RuleId:
    """One rule: its id, what it does by default, one line on when it fires, where it is declared, whether a
    resize runs it again (``resize``), and why it matters (``explain``: what `check --explain` adds to the rule's
    short message, so that the message a user reads in kubectl stays one sentence and its fix)."""

    id: str
    default: Action
    summary: str
    origin: str = ""  # "<package folder>/engine/concerns/topology.py:14", for --explain
    resize: Resize | None = None
    explain: str = ""

    def __str__(self) -> str:
        return self.id


def rule(rule_id: str, default: Action, summary: str, resize: Resize | None = None, explain: str = "") -> RuleId:
    """Declare a rule where it is reported; the declaration's file and line become its origin."""
    frame = sys._getframe(1)
    path = Path(frame.f_code.co_filename).resolve()
    try:
        shown = path.relative_to(_PACKAGE_PARENT).as_posix()
    except ValueError:  # pragma: no cover - a module outside the package
        shown = path.name
    return RuleId(rule_id, default, summary, f"{shown}:{frame.f_lineno}", resize, explain)
