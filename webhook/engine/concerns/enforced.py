"""Enforced fields: a user value that differs from the policy's is the user's, unless the platform
enforces the field (``Platform.spec.enforce``); then it is a denial, never a silent overwrite.

Every mutation that finds a user value where it would write one calls ``conflict``; the rule is
declared once, here.
"""

from __future__ import annotations

from ...policy.vocab import Action, Enforceable
from ..concern import Concern
from ..context import Context
from ..paths import Path
from ..reads import Reads
from ..rule import rule

ENFORCED_CONFLICT = rule("enforced.conflict", Action.deny,
                         "a user value differs from one the platform enforces (Platform.spec.enforce)")


def enforced(ctx: Context, item: Enforceable) -> bool:
    return item in ctx.policy.enforced


def conflict(ctx: Context, item: Enforceable, path: Path, user_value: object, policy_value: object) -> None:
    """A user value differs from the policy's: a denial if enforced, otherwise the user wins."""
    if enforced(ctx, item):
        ctx.report(ENFORCED_CONFLICT, path, f"the platform enforces {item.value}; this object sets {user_value!r}",
                   f"set {ctx.user_field(path)}: {policy_value!r} (or leave it out: the platform sets it)")


CONCERN = Concern("enforced", rules=(ENFORCED_CONFLICT,), reads=Reads())
