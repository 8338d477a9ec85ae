"""One stored workload judged under a policy: denied now, would be configured differently, or compliant.

The decision is the engine's own (``engine.decide``, the function `check` and the server answer
from), asked as a CREATE of the stored object: what would happen if it were submitted now. So:

- **denied**: the decision denies it (its denials name the rules, as `check` prints them);
- **changes**: it is admitted, and the mutation would still set fields the stored object lacks or
  holds otherwise (each with the policy setting behind it, as `check --explain` shows them). Mutation
  is idempotent, so a workload admitted under the same policy has none; one created while the webhook
  was absent, or under an older policy that injected less, has some, and the warning
  ``final.not-admitted`` saying so (``deny``: it is denied instead), so that its report result is not a pass;
- **compliant**: admitted, nothing to set. Only trainadmit's provenance annotation may differ (it
  names the generation that configured the object);
- **skipped**: no decision applies (not a GPU workload, an exempt namespace, or a child, which is
  judged through its parent exactly as admission judges it).

A stored Pod of a StatefulSet that carries trainadmit's provenance annotation is a child of a LeaderWorkerSet only
when that StatefulSet is one (``engine.provenance.vouched``: controlled by a LeaderWorkerSet, or by a group's
leader Pod that is): the caller's ``owners`` finds the stored StatefulSet (and leader). Otherwise, a StatefulSet
forged before the webhooks or the fence existed, or one ``owners`` cannot find, its Pods are decided one by one.

A value an older policy generation injected and the current one would set differently counts as the
object's own (the engine cannot tell it from a user's choice) unless the field is enforced, where it
is a denial (``enforced.conflict``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ..engine import Decision, Request, decide
from ..engine.clusterview import ClusterView
from ..engine.decide import controller_user
from ..engine.decision import Injection, Source
from ..engine.paths import field_path, get_path
from ..engine.provenance import controller_ref, vouched
from ..engine.workloads import OWNER_BY_KIND
from ..policy import PolicySet


class Status(StrEnum):
    denied = "denied"
    changes = "changes"
    compliant = "compliant"
    skipped = "skipped"


@dataclass(frozen=True)
class Change:
    """One field the policy would set: where, the value it would have, what the stored object holds."""

    path: str  # field path, as messages write them
    value: Any
    stored: Any  # None: the stored object lacks it
    concern: str
    source: str  # the policy setting behind it
    setting: Source | None = field(default=None, compare=False)  # the same, for `--explain`-style file:line

    def text(self, limit: int = 160) -> str:
        mark = "+" if self.stored is None else "~"
        value = _short(self.value, limit)
        was = f" (now {_short(self.stored, limit // 2)})" if self.stored is not None else ""
        return f"{mark} {self.path} = {value}{was}  <- {self.source}"

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "value": self.value, "stored": self.stored, "concern": self.concern,
                "source": self.source}


def _short(value: Any, limit: int) -> str:
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class Verdict:
    """The judgement of one stored object."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str
    status: Status
    decision: Decision
    changes: list[Change] = field(default_factory=list)
    applied_generation: str | None = None  # the generation whose provenance the stored object carries

    @property
    def identity(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"

    @property
    def reference(self) -> dict[str, str]:
        """The workload as an ObjectReference (a report result's resource)."""
        out = {"apiVersion": self.api_version, "kind": self.kind, "namespace": self.namespace, "name": self.name}
        if self.uid:
            out["uid"] = self.uid
        return out

    def as_dict(self) -> dict[str, Any]:
        d = self.decision
        return {"object": self.identity, "apiVersion": self.api_version, "uid": self.uid, "status": self.status.value,
                "reason": d.reason if self.status is Status.skipped else "",
                "violations": [v.as_dict() for v in d.denials], "warnings": [v.as_dict() for v in d.warnings],
                "changes": [c.as_dict() for c in self.changes], "appliedGeneration": self.applied_generation,
                "generation": d.generation}


def _applied_generation(obj: dict, policy: PolicySet) -> str | None:
    raw = get_path(obj, ("metadata", "annotations", policy.keys.applied))
    try:
        value = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return None
    generation = value.get("generation") if isinstance(value, dict) else None
    return generation if isinstance(generation, str) else None


def changes_of(stored: dict, decision: Decision) -> list[Change]:
    """What the mutation set, field by field, against what the stored object holds there."""
    mutated = decision.mutated if decision.mutated is not None else stored
    out = []
    for injection in decision.injections:
        out.append(_change(stored, mutated, injection))
    return out


def _change(stored: dict, mutated: dict, injection: Injection) -> Change:
    location = injection.location
    return Change(field_path(location), get_path(mutated, location), get_path(stored, location),
                  injection.concern, str(injection.source), injection.source)


# (namespace, a controller ownerReference) -> the stored object it names, or None when it is not stored or not known
Owners = Callable[[str, dict], "dict | None"]


def stored_creator(obj: Any, namespace: str, owners: Owners | None) -> dict:
    """The user a stored object is asked as: its controller's (a stored child was made by it; its creator is not
    stored), except for the child of a StatefulSet no LeaderWorkerSet made, which is asked as nobody's, and so
    decided as what it is (a forged provenance annotation is not trusted from the object)."""
    ref = controller_ref(obj)
    owner = OWNER_BY_KIND.get((ref.get("apiVersion"), ref.get("kind"))) if ref is not None else None  # type: ignore
    if ref is None or owner is None or owner.decided:
        return controller_user(obj)
    found = owners(namespace, ref) if owners is not None else None
    if found is None or not vouched(found, lambda r: owners(namespace, r) if owners is not None else None):
        return {}
    return controller_user(obj)


def judge(policy: PolicySet, obj: Any, cluster: ClusterView | None = None, namespace: str | None = None,
          owners: Owners | None = None) -> Verdict:
    """The verdict on one stored object (``namespace`` for an object that names none). ``owners``: the stored
    StatefulSets (and Pods) a Pod's controller may name, to tell a LeaderWorkerSet's from a forged one."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    ns = str(meta.get("namespace") or namespace or "default")
    # asked as its controller would ask (``stored_creator``); as a stored object, so that what it lacks is a result
    # of its own (final.not-admitted), not a pass
    decision = decide(policy, Request(obj, operation="CREATE", namespace=ns, user=stored_creator(obj, ns, owners),
                                      phase="audit"), cluster)
    verdict = Verdict(str(obj.get("apiVersion", "")) if isinstance(obj, dict) else "",
                      str(obj.get("kind", "")) if isinstance(obj, dict) else "", ns,
                      str(meta.get("name") or meta.get("generateName") or "<unnamed>"), str(meta.get("uid") or ""),
                      Status.skipped, decision)
    if not decision.matched:
        return verdict
    verdict.applied_generation = _applied_generation(obj, policy)
    if not decision.allowed:
        verdict.status = Status.denied
        return verdict
    verdict.changes = changes_of(obj, decision)
    verdict.status = Status.changes if verdict.changes else Status.compliant
    return verdict


__all__ = ["Change", "Owners", "Status", "Verdict", "changes_of", "judge", "stored_creator"]
