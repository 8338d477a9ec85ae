"""The policy words the engine reads, without pydantic: actions, enforceable fields, gang backends,
and the few policy-value methods the engine calls (mixins of the models).

The pydantic models (``models``) validate policy documents; the engine only needs these enums, the
plain values the models hold and these methods. Keeping them here lets a process that decides with
a cached, already validated policy set (``trainadmit check``, see ``cache``) run without importing
pydantic, which costs more than everything else such a run does: the cache's records of a model get
the model's mixins from here. ``models`` re-exports every name.
"""

from __future__ import annotations

from enum import StrEnum


class GangBackend(StrEnum):
    """A policy's gang backend; ``auto`` is the policy's word for "the first the cluster serves" (``engine.target``
    resolves it: a decision's backend is never ``auto``)."""

    auto = "auto"
    native = "native"
    coscheduling = "coscheduling"
    volcano = "volcano"
    kueue = "kueue"
    kai = "kai"


class Action(StrEnum):
    """What a rule that fires does. ``deny`` refuses; ``warn`` admits and tells the user what to change;
    ``note`` admits and tells the user what will happen because of the platform (a condition of the cluster or
    the policy no change to the workload removes: ``check --strict`` does not fail on it, and the AdmissionResponse
    carries it as a warning that starts with "trainadmit note"); ``off`` says nothing."""

    deny = "deny"
    warn = "warn"
    note = "note"
    off = "off"


# Rule ids the engine no longer reports, with why: ``Platform.spec.rules`` may still name them (a policy written
# for an earlier release keeps loading; the override has no effect), and the policy reference lists them.
RETIRED_RULES: dict[str, str] = {
    "gang.name-required": "retired: the mutating webhook names a generateName workload itself, as the apiserver "
                          "would, before naming its PodGroup (engine.naming), so it is never refused for it",
}


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


def label_integer(text: str) -> int | None:
    """A label value as the scheduler reads it for Gt/Lt (a 64-bit decimal integer), else None."""
    try:
        value = int(text, 10)
    except (TypeError, ValueError):
        return None
    return value if -(2 ** 63) <= value < 2 ** 63 else None


class NodeLabelMatch:
    """``NodeLabelRequirement.matches`` and ``as_k8s``: shared by the pydantic model and its cached record
    (no annotations here: pydantic would read them as fields)."""

    def matches(self, labels: dict) -> bool:
        """Whether a node with these labels meets the requirement, as the scheduler decides it."""
        value = labels.get(self.key)
        if value is None:
            return False
        if self.operator == "Exists":
            return True
        if self.operator == "In":
            return value in self.values
        number, bound = label_integer(value), label_integer(self.values[0])
        if number is None or bound is None:
            return False
        return number > bound if self.operator == "Gt" else number < bound

    def as_k8s(self) -> dict:
        """The NodeSelectorRequirement of a pod's required node affinity."""
        out: dict = {"key": self.key, "operator": self.operator}
        if self.values:
            out["values"] = list(self.values)
        return out

    def __str__(self) -> str:
        """As messages name it (``hardware.matching-nodes``), from the model or from its cached record alike."""
        if self.operator == "Exists":
            return f"{self.key} (any value)"
        if self.operator == "In":
            return f"{self.key}={'|'.join(self.values)}"
        return f"{self.key} {'>' if self.operator == 'Gt' else '<'} {self.values[0]}"
