"""What the engine is asked: one object, and the admission request around it."""

from __future__ import annotations

from dataclasses import field
from typing import Any

from ..grammars.lazydataclass import dataclass


@dataclass(frozen=True)
class Request:
    """One admission (or one `check` object): the object, the operation, the old object on UPDATE,
    who asks, and whether it is a dry run. ``phase`` is ``mutate`` or ``validate``: the webhook that
    asks (``check`` uses ``deciding_phase``); ``audit``: a stored object judged as a CREATE, as ``mutate`` is,
    that also says what it lacks (``final.not-admitted``). ``generated_name``: the name a CREATE of an object
    with only ``generateName`` gets if its decision names it (``engine.naming``; the server draws one per request,
    as the apiserver would); "" names it ``<generateName>xxxxx``, the same in every run (``check``)."""

    obj: Any
    operation: str = "CREATE"
    old: Any = None
    namespace: str | None = None
    user: dict = field(default_factory=dict)
    dry_run: bool = False
    phase: str = "mutate"
    generated_name: str = ""

    @property
    def effective_namespace(self) -> str | None:
        """The object's own namespace when it names one, else the request's (a create in the request's)."""
        meta = self.obj.get("metadata") if isinstance(self.obj, dict) else None
        own = meta.get("namespace") if isinstance(meta, dict) else None
        return own if isinstance(own, str) and own else self.namespace


def deciding_phase(operation: str) -> str:
    """The webhook whose answer decides ``operation`` in a cluster, for `trainadmit check`, which answers
    for both at once: a CREATE is decided by ``/mutate`` (it mutates, then validates the result, which
    is what ``/validate`` then sees), an UPDATE by ``/validate`` (``/mutate`` never touches an UPDATE)."""
    return "validate" if operation == "UPDATE" else "mutate"
