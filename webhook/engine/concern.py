"""How a concern declares itself: its rules, its mutation and validation, what it reads, what it follows.

A concern (gang, placement, …) is the unit the registry orders. Besides its rules (``rule.py``) it
declares:

- ``reads``: what it reads of the object (``reads.Reads``); the engine runs it on the object cut down to
  what the concerns declare, so nothing else can change its answer. ``None``: it reads the whole object
  (the custom CEL rules) and runs on the object as received or as it will be stored.
- ``limits``: the bounds its size rules put on the workload's shape (``fit.Limit``): the one size fix of a decision
  passes all of them together (``fit.largest``), and every size rule's fix names it.
- ``after``: concerns whose writes its mutation reads (the preflight describes the container the others
  configured) or whose list it appends to; the registry runs mutations in an order that respects them,
  and any order that does gives the same decision (``tests/engine/test_concern_order.py``).

Concerns never pass state to each other: what several of them must agree on is in the ``Plan``, computed
before any mutation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ..grammars.lazydataclass import dataclass
from .reads import Reads
from .rule import RuleId

if TYPE_CHECKING:
    from .context import Context
    from .fit import Limit
    from .workloads import Workload

Mutation = Callable[["Context"], None]
Validation = Callable[["Context", "Workload"], None]
Limits = Callable[["Context", "Workload"], "Iterable[Limit]"]


@dataclass(frozen=True)
class Concern:
    """A family of injections and checks; the unit the registry orders."""

    name: str
    rules: tuple[RuleId, ...] = ()
    mutate: Mutation | None = None
    validate: Validation | None = None
    reads: Reads | None = None  # None: the whole object (safe for a rule; a mutation must declare)
    limits: Limits | None = None
    after: tuple[str, ...] = ()
