"""Structural checks of the fields the engine reads or writes, before any mutation.

The apiserver only sends well-typed objects, but `check` reads hand-written YAML and the server
must survive fuzzed input. A wrong type (``env: {A: 1}``) becomes a denial that names the field,
instead of an exception in the middle of a mutation.

Counts are checked on every operation: every field the kind's adapter declares as a count (the templates'
scale fields, its own counts, the gang sizes its operators read: ``Adapter.count_fields``) must hold a
non-negative whole number. A templated manifest whose placeholder was never filled (``parallelism:
__NUM_NODES__``, ``replicas: $NUM_NODES``) or a negative count would otherwise be read as the kind's default,
and every rule would run on a guessed size.
"""

from __future__ import annotations

from typing import Any

from ...grammars.quantity import QuantityError, parse_quantity
from ...policy.vocab import Action
from ..concern import Concern
from ..paths import field_path, get_path
from ..reads import Reads
from ..rule import rule
from ..workloads import ResourcesOutsideTemplates, Workload, capable

MALFORMED = rule("object.malformed", Action.deny, "a field trainadmit reads or writes has the wrong type")
# the types of everything trainadmit reads or writes in the object's identity, its pod templates' metadata
# and pod specs, and every container (the kind's own fields are read whole, as every object's spec)
CONCERN = Concern("object", rules=(MALFORMED,), reads=Reads(
    object=("apiVersion", "kind", "metadata", "spec"),
    metadata=("name", "generateName", "namespace", "labels", "annotations"),
    pod=("containers", "initContainers", "volumes", "tolerations", "nodeSelector", "affinity", "schedulerName",
         "priorityClassName"),
    container=("name", "resources", "env", "volumeMounts", "securityContext"),
    init_container=("name", "resources", "env", "volumeMounts", "securityContext")))


def _shown(value: Any) -> str:
    """A value as the manifest has it: strings quoted, booleans as YAML writes them."""
    if isinstance(value, str):
        return f'"{value}"'
    return str(value).lower() if isinstance(value, bool) else str(value)


def _type_name(value: Any) -> str:
    return {dict: "a map", list: "a list", str: "a string", bool: "a boolean", int: "a number",
            float: "a number"}.get(type(value), "null" if value is None else type(value).__name__)


class _Checker:
    def __init__(self) -> None:
        self.problems: list[tuple[str, str]] = []

    def expect(self, value: Any, kind: type | tuple, path: str, what: str) -> bool:
        if value is None:
            return False
        if isinstance(value, bool) and kind is int:
            ok = False
        else:
            ok = isinstance(value, kind)
        if not ok:
            self.problems.append((path, f"must be {what}, got {_type_name(value)}"))
        return ok

    def string_map(self, value: Any, path: str) -> None:
        if self.expect(value, dict, path, "a map of strings"):
            for k, v in value.items():
                if not isinstance(v, str):
                    self.problems.append((f'{path}["{k}"]', f"must be a string, got {_type_name(v)}"))

    def list_of_maps(self, value: Any, path: str) -> list[tuple[int, dict]]:
        out = []
        if self.expect(value, list, path, "a list"):
            for i, item in enumerate(value):  # an item's path is made only for a problem
                if isinstance(item, dict):
                    out.append((i, item))
                else:
                    self.problems.append((f"{path}[{i}]", f"must be a map, got {_type_name(item)}"))
        return out

    def string(self, value: Any, path: str, suffix: str, index: int = 0) -> None:
        """``expect(value, str, path + suffix.format(index), "a string")``, the path made only for a problem."""
        if value is not None and not isinstance(value, str):
            self.problems.append((path + suffix.format(index), f"must be a string, got {_type_name(value)}"))

    def meta(self, value: Any, path: str) -> None:
        if self.expect(value, dict, path, "a map"):
            for key in ("labels", "annotations"):
                if value.get(key) is not None:
                    self.string_map(value[key], f"{path}.{key}")
            for key in ("name", "generateName", "namespace"):
                if value.get(key) is not None:
                    self.expect(value[key], str, f"{path}.{key}", "a string")

    def container(self, c: dict, path: str) -> None:
        self.string(c.get("name"), path, ".name")
        if c.get("resources") is not None:
            self.resources(c["resources"], f"{path}.resources")
        if c.get("env") is not None:
            for i, env in self.list_of_maps(c["env"], f"{path}.env"):
                # ``string`` called only when it may find a problem (most entries: a str name and value)
                name, value = env.get("name"), env.get("value")
                if name is not None and type(name) is not str:
                    self.string(name, path, ".env[{}].name", i)
                if value is not None and type(value) is not str:
                    self.string(value, path, ".env[{}].value", i)
        if c.get("volumeMounts") is not None:
            for i, m in self.list_of_maps(c["volumeMounts"], f"{path}.volumeMounts"):
                self.string(m.get("mountPath"), path, ".volumeMounts[{}].mountPath", i)
                self.string(m.get("name"), path, ".volumeMounts[{}].name", i)
        sc = c.get("securityContext")  # None is no problem: its paths are made only when it is set
        if sc is not None and self.expect(sc, dict, f"{path}.securityContext", "a map"):
            caps = sc.get("capabilities")
            if caps is not None and self.expect(caps, dict, f"{path}.securityContext.capabilities", "a map"):
                add = caps.get("add")
                if add is not None and self.expect(add, list, f"{path}.securityContext.capabilities.add", "a list"):
                    for i, cap in enumerate(add):
                        self.expect(cap, str, f"{path}.securityContext.capabilities.add[{i}]", "a string")

    def resources(self, res: Any, path: str) -> None:
        """ResourceRequirements: every limit and request a quantity (``nvidia.com/gpu: $GPU_PER_WORKER``, a placeholder
        never filled, is none: the apiserver refuses it, and trainadmit would count no GPUs)."""
        if not self.expect(res, dict, path, "a map"):
            return
        for section in ("limits", "requests"):
            if res.get(section) is not None and self.expect(res[section], dict, f"{path}.{section}", "a map"):
                for k, v in res[section].items():
                    if not isinstance(v, str | int | float) or isinstance(v, bool):
                        self.problems.append((f'{path}.{section}["{k}"]', f"must be a quantity, got {_type_name(v)}"))
                        continue
                    try:
                        parse_quantity(v)
                    except QuantityError:
                        self.problems.append((f'{path}.{section}["{k}"]', f"must be a quantity, got {_shown(v)}"))

    def pod_spec(self, spec: Any, path: str) -> None:
        if not self.expect(spec, dict, path, "a map"):
            return
        for group in ("containers", "initContainers"):
            for i, c in self.list_of_maps(spec.get(group), f"{path}.{group}"):
                self.container(c, f"{path}.{group}[{i}]")
        for i, v in self.list_of_maps(spec.get("volumes"), f"{path}.volumes"):
            self.string(v.get("name"), path, ".volumes[{}].name", i)
        self.list_of_maps(spec.get("tolerations"), f"{path}.tolerations")
        if spec.get("nodeSelector") is not None:
            self.string_map(spec["nodeSelector"], f"{path}.nodeSelector")
        self.expect(spec.get("affinity"), dict, f"{path}.affinity", "a map")
        for key in ("schedulerName", "priorityClassName"):
            if spec.get(key) is not None:
                self.expect(spec[key], str, f"{path}.{key}", "a string")


def shape_problems(workload: Workload) -> list[tuple[str, str]]:
    """(field path, problem) for every field of the wrong type that trainadmit would read or write."""
    obj, adapter = workload.obj, workload.adapter
    c = _Checker()
    c.meta(obj.get("metadata"), "metadata")
    c.expect(obj.get("spec"), dict, "spec", "a map")
    for path in adapter.required:  # the kind's own declarations: fields it needs, and their types
        if get_path(obj, path) is None:
            c.problems.append((field_path(path), f"a {workload.kind} needs a {path[-1]}"))
    for declared in adapter.field_types:
        c.expect(get_path(obj, declared.path), declared.kind, field_path(declared.path), declared.what)
    if c.problems:  # the object's own structure is broken: its templates and counts cannot be read
        return c.problems
    # every count and every quantity that cannot be read, in one answer (a placeholder left in a count and one in a
    # GPU limit are fixed in one edit, not one CI run each)
    for path in adapter.count_fields(obj):
        value = get_path(obj, path)
        if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
            c.problems.append((field_path(path), f"must be a non-negative whole number (a count), got {_shown(value)}"))
    if capable(adapter, ResourcesOutsideTemplates):  # a TrainJob's spec.trainer.resourcesPerNode
        for pattern in adapter.resource_patterns:
            if not any(part in ("*", "[]") for part in pattern) and get_path(obj, pattern) is not None:
                c.resources(get_path(obj, pattern), field_path(pattern))
    for template in workload.templates:
        if template.root:
            body = get_path(obj, template.root)
            where = field_path(template.root)
            if not c.expect(body, dict, where, "a map"):
                continue
            if body.get("metadata") is not None:
                c.meta(body["metadata"], f"{where}.metadata")
        c.pod_spec(get_path(obj, template.spec_path), field_path(template.spec_path))
    return c.problems
