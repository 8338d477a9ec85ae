"""What the engine is asked: one object, and the admission request around it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Request:
    """One admission (or one `check` object): the object, the operation, the old object on UPDATE,
    who asks, and whether it is a dry run. ``phase`` is ``mutate`` or ``validate``: the webhook that
    asks (``check`` decides as ``/mutate`` does)."""

    obj: Any
    operation: str = "CREATE"
    old: Any = None
    namespace: str | None = None
    user: dict = field(default_factory=dict)
    dry_run: bool = False
    phase: str = "mutate"
