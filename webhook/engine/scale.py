"""A ``/scale`` UPDATE as the resize it is.

`kubectl scale pytorchjob … --replicas=40` sends an UPDATE of ``pytorchjobs/scale`` whose object is an
``autoscaling/v1`` Scale (``spec.replicas``), not the workload: the CRD's scale subresource writes that number to
its ``specReplicasPath`` (``Adapter.scale_path``). The workload as it will be stored is the stored one with that
field set; the decision is then the UPDATE's (``decide._non_create``: the resize rules), so `kubectl scale` and
`kubectl patch` of the same field get the same answer. Pure: the caller brings the stored workload.
"""

from __future__ import annotations

import copy
from typing import Any

from .paths import get_path
from .request import Request
from .workloads import ADAPTERS, Adapter

SCALE_KINDS: tuple[Adapter, ...] = tuple(a for a in ADAPTERS if a.scale_path is not None)


def scalable(group: str, plural: str) -> Adapter | None:
    """The handled kind served at ``group``/``plural`` whose CRD has a scale subresource."""
    return next((a for a in SCALE_KINDS if a.group == group and a.plural == plural), None)


def replicas_of(scale: Any) -> int | None:
    value = get_path(scale, ("spec", "replicas")) if isinstance(scale, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def scaled(adapter: Adapter, stored: dict, replicas: int) -> dict:
    """``stored`` with its scale subresource's field set to ``replicas``."""
    out = copy.deepcopy(stored)
    path = adapter.scale_path or ()
    node: Any = out
    for part in path[:-1]:
        nxt = node.get(part) if isinstance(node, dict) else None
        if not isinstance(nxt, dict):
            nxt = {}
            node[part] = nxt
        node = nxt
    node[path[-1]] = replicas
    return out


def scale_request(adapter: Adapter, stored: dict, scale: Any, namespace: str | None, user: dict,
                  dry_run: bool) -> Request | None:
    """The UPDATE of the workload that the ``/scale`` UPDATE amounts to (None: the Scale names no replicas)."""
    replicas = replicas_of(scale)
    if replicas is None:
        return None
    return Request(scaled(adapter, stored, replicas), "UPDATE", stored, namespace, user, dry_run, "validate")


__all__ = ["SCALE_KINDS", "replicas_of", "scalable", "scale_request", "scaled"]
