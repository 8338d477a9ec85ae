"""Provenance is never trusted from the object: who may write trainadmit's provenance annotation on a kind it
does not decide.

A LeaderWorkerSet's StatefulSets are made by the LWS controller from the LWS's templates, which trainadmit
decided; their Pods (made by the StatefulSet controller) carry the provenance annotation
(``trainadmit.io/applied``) and are left alone as already decided (``decide.made_by_controller``). That is safe
only if nobody else can make such a StatefulSet: anyone may write that annotation into a StatefulSet's pod
template. So a StatefulSet (any ``Owner`` with ``decided=False``) whose pod template carries the annotation is
refused (``final.forged-provenance``) unless the request comes from the controller of a kind that makes it
(``Adapter.intermediate_owners``: the LWS controller, or a user ``Platform.spec.controllers`` names for that kind).
An UPDATE that leaves the pod template as it was passes (a label on a StatefulSet an LWS made, a rollout restart
annotation elsewhere). The validating webhook is sent exactly these requests (``authoring.webhooks``).

Invariant: a Pod is left alone as "made from a template trainadmit decided" only when its StatefulSet's template
was written by an LWS controller identity.

What is stored says the same by a different witness (``vouched``): audit and the reports judge a stored Pod of a
StatefulSet as already decided only when that StatefulSet is itself controlled by a LeaderWorkerSet (the leaders'
StatefulSet), or by a Pod that is (a group's leader, which LWS makes the owner of its workers' StatefulSet). A
StatefulSet forged before the webhooks or the fence existed has neither, and its Pods are decided one by one.
Both read which kinds vouch for a StatefulSet from one place (``vouching``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..policy import PolicySet
from ..policy.vocab import Action
from .decision import Violation
from .paths import get_path
from .request import Request
from .rule import rule
from .workloads import ADAPTERS, OWNER_BY_KIND, Owner

FORGED = rule("final.forged-provenance", Action.deny,
              "a StatefulSet whose pod template carries trainadmit's provenance annotation, written by anyone but the "
              "controller of a kind trainadmit decided (LeaderWorkerSet): its Pods would skip both webhooks")
TEMPLATE_META = ("spec", "template", "metadata")


def vouching(owner: Owner) -> list[tuple[str, tuple[str, ...]]]:
    """The kinds whose controllers make objects of ``owner``'s kind from a template trainadmit decided:
    (their ``Platform.spec.controllers`` key, their declared controller users)."""
    return [(a.resource, a.controllers) for a in ADAPTERS if any(o.resource == owner.resource
                                                                 for o in a.intermediate_owners)]


def controller_ref(obj: Any) -> dict | None:
    """``obj``'s controller ownerReference, or None."""
    refs = get_path(obj, ("metadata", "ownerReferences"))
    for ref in refs if isinstance(refs, list) else ():
        if isinstance(ref, dict) and ref.get("controller") is True:
            return ref
    return None


def vouched(obj: Any, owner_of: Callable[[dict], Any], depth: int = 2) -> bool:
    """Whether the stored ``obj`` (of a kind trainadmit does not decide: a StatefulSet) was made by the controller of
    a kind that makes it from a template trainadmit decided: its controller ownerReference names such a kind (a
    LeaderWorkerSet), or a Pod whose own controller is an object vouched for (LWS makes each group's workers'
    StatefulSet owned by the group's leader Pod). ``owner_of(ref)``: the stored object a controller ownerReference
    names (None when it is not stored or not known: then not vouched for)."""
    owner = undecided_owner(obj)
    ref = controller_ref(obj)
    if owner is None or ref is None or depth < 0:
        return False
    from .workloads import adapter_for

    if (ref.get("apiVersion"), ref.get("kind")) == ("v1", "Pod"):
        return _leader_vouched(owner_of(ref), owner_of, depth)
    adapter = adapter_for(ref.get("apiVersion"), ref.get("kind"))
    return adapter is not None and adapter.resource in {resource for resource, _ in vouching(owner)}


def _leader_vouched(leader: Any, owner_of: Callable[[dict], Any], depth: int) -> bool:
    """A Pod owning a StatefulSet is a group's leader when its own StatefulSet is vouched for."""
    ref = controller_ref(leader)
    if not isinstance(leader, dict) or ref is None:
        return False
    return vouched(owner_of(ref), owner_of, depth - 1)


def makers(policy: PolicySet, owner: Owner) -> list[str]:
    """The users allowed to write the provenance annotation into ``owner``'s kind's pod templates."""
    users: list[str] = []
    for resource, declared in vouching(owner):
        users += [*declared, *policy.platform.controllers.get(resource, ())]
    return list(dict.fromkeys(users))


def undecided_owner(obj: Any) -> Owner | None:
    """The ``Owner`` declaration of ``obj``'s kind when it is one trainadmit does not decide (a StatefulSet)."""
    if not isinstance(obj, dict):
        return None
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return None
    owner = OWNER_BY_KIND.get((api_version, kind))
    return owner if owner is not None and not owner.decided else None


def forged(policy: PolicySet, request: Request) -> Violation | None:
    """The refusal of a forged provenance annotation in ``request``, or None."""
    owner = undecided_owner(request.obj)
    if owner is None or request.operation not in ("CREATE", "UPDATE"):
        return None
    key = policy.keys.applied
    annotations = get_path(request.obj, (*TEMPLATE_META, "annotations"))
    if not isinstance(annotations, dict) or key not in annotations:
        return None
    if request.operation == "UPDATE" and isinstance(request.old, dict) and \
            get_path(request.old, ("spec", "template")) == get_path(request.obj, ("spec", "template")):
        return None
    user = request.user.get("username") if isinstance(request.user, dict) else None
    allowed = makers(policy, owner)
    if isinstance(user, str) and user in allowed:
        return None
    action = policy.actions.get(FORGED.id, FORGED.default)
    if action is Action.off:
        return None
    return Violation(FORGED.id, action, f"spec.template.metadata.annotations[{key}]",
                     f"{key} says the {owner.kind}'s Pods come from a template trainadmit decided, and only "
                     f"{', '.join(allowed) or 'no user'} may write it; written by {user or 'an unknown user'}, its "
                     "Pods would skip trainadmit's webhooks",
                     f"remove the {key} annotation from the pod template (its Pods are then decided one by one), or "
                     "create a LeaderWorkerSet")


__all__ = ["FORGED", "controller_ref", "forged", "makers", "undecided_owner", "vouched", "vouching"]
