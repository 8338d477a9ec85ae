"""The policy words the engine reads, without pydantic: actions, enforceable fields, gang backends.

The pydantic models (``models``) validate policy documents; the engine only needs these enums and
the plain values the models hold. Keeping them here lets a process that decides with a cached,
already validated policy set (``trainadmit check``, see ``cache``) run without importing pydantic,
which costs more than everything else such a run does. ``models`` re-exports every name.
"""

from __future__ import annotations

from enum import StrEnum


class GangBackend(StrEnum):
    native = "native"
    coscheduling = "coscheduling"
    volcano = "volcano"
    kueue = "kueue"


class Action(StrEnum):
    deny = "deny"
    warn = "warn"
    off = "off"


class Enforceable(StrEnum):
    """Fields a policy can own outright: a different user value is then a denial."""

    schedulerName = "schedulerName"
    priorityClassName = "priorityClassName"
    nodeSelector = "nodeSelector"
    ncclEnv = "ncclEnv"
    shm = "shm"
    queue = "queue"
    rdmaNetworks = "rdmaNetworks"


class LevelLookup:
    """``Topology.level``: shared by the pydantic model and the cached record of it."""

    def level(self, name: str):
        return next((lv for lv in self.levels if lv.name == name), None)  # type: ignore[attr-defined]
