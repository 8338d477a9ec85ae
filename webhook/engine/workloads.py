"""Where the pod template lives in each kind trainadmit acts on, and what the apiserver defaults.

The CLI reads objects as users wrote them; the server receives them after the apiserver applied
its defaults. Every fact the engine reads about a workload goes through here, with the same
defaults the apiserver would apply, so that both paths reach the same decision.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ..grammars.quantity import as_count
from .paths import Path, as_dict, as_list, get_path

# batch/v1 Job defaulting (pkg/apis/batch/v1/defaults.go): parallelism 1; completions 1 only when
# both are unset; completionMode NonIndexed; suspend false.
JOB_TEMPLATE: Path = ("spec", "template")
POD_ROOT: Path = ()

HANDLED_KINDS = {("batch/v1", "Job"), ("v1", "Pod")}


@dataclass(frozen=True)
class ContainerRef:
    """One container of the pod spec, with where it sits (for patch paths and messages)."""

    group: str  # "containers" or "initContainers"
    index: int
    body: dict

    @property
    def name(self) -> str:
        name = self.body.get("name")
        return name if isinstance(name, str) else f"#{self.index}"

    @property
    def is_sidecar(self) -> bool:
        return self.group == "initContainers" and self.body.get("restartPolicy") == "Always"


class Workload:
    """A read-only view of a Job or Pod: identity, pod template location and scheduling facts.

    A view describes one state of one object: derived values are cached properties, computed once,
    so build a new view (``Context.current``) after the object changed."""

    def __init__(self, obj: dict):
        self.obj = obj
        self.kind: str = obj.get("kind", "")
        self.is_job = self.kind == "Job"
        self.template_root: Path = JOB_TEMPLATE if self.is_job else POD_ROOT
        self.pod_meta_path: Path = (*self.template_root, "metadata")
        self.pod_spec_path: Path = (*self.template_root, "spec")

    # ---- identity ---------------------------------------------------------------------------
    @cached_property
    def meta(self) -> dict:
        return as_dict(self.obj.get("metadata"))

    @property
    def name(self) -> str | None:
        name = self.meta.get("name")
        return name if isinstance(name, str) and name else None

    @property
    def generate_name(self) -> str | None:
        name = self.meta.get("generateName")
        return name if isinstance(name, str) and name else None

    @property
    def display_name(self) -> str:
        return self.name or (f"{self.generate_name}<generated>" if self.generate_name else "<unnamed>")

    @property
    def namespace(self) -> str | None:
        ns = self.meta.get("namespace")
        return ns if isinstance(ns, str) and ns else None

    @cached_property
    def labels(self) -> dict:
        return as_dict(self.meta.get("labels"))

    @cached_property
    def annotations(self) -> dict:
        return as_dict(self.meta.get("annotations"))

    @property
    def controller(self) -> dict | None:
        for ref in as_list(self.meta.get("ownerReferences")):
            if isinstance(ref, dict) and ref.get("controller") is True:
                return ref
        return None

    # ---- pod template -----------------------------------------------------------------------
    @cached_property
    def pod_spec(self) -> dict:
        return as_dict(get_path(self.obj, self.pod_spec_path))

    @cached_property
    def pod_meta(self) -> dict:
        return as_dict(get_path(self.obj, self.pod_meta_path))

    @cached_property
    def all_containers(self) -> list[ContainerRef]:
        """Init containers (sidecars included) and regular containers, in that order."""
        spec = self.pod_spec
        out = []
        for group in ("initContainers", "containers"):
            for index, body in enumerate(as_list(spec.get(group))):
                if isinstance(body, dict):
                    out.append(ContainerRef(group, index, body))
        return out

    @cached_property
    def main_containers(self) -> list[ContainerRef]:
        """The regular containers: the ones that run the training process."""
        return [ref for ref in self.all_containers if ref.group == "containers"]

    @cached_property
    def resource_names(self) -> list[str]:
        """Every resource name any container asks for (limits or requests), in first-seen order."""
        found: dict[str, None] = {}
        for ref in self.all_containers:
            resources = ref.body.get("resources")
            if not isinstance(resources, dict):
                continue
            for section in ("limits", "requests"):
                values = resources.get(section)
                if isinstance(values, dict):
                    found.update(dict.fromkeys(values))
        return list(found)

    def container_path(self, ref: ContainerRef) -> Path:
        return (*self.pod_spec_path, ref.group, ref.index)

    # ---- Job facts with apiserver defaults -----------------------------------------------------
    @property
    def parallelism(self) -> int:
        if not self.is_job:
            return 1
        value = get_path(self.obj, ("spec", "parallelism"))
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 1

    @property
    def completions(self) -> int | None:
        if not self.is_job:
            return 1
        spec = as_dict(self.obj.get("spec"))
        value = spec.get("completions")
        if value is None:
            return 1 if spec.get("parallelism") is None else None
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def completion_mode(self) -> str:
        mode = get_path(self.obj, ("spec", "completionMode"))
        return mode if isinstance(mode, str) else "NonIndexed"

    @property
    def scheduler_name(self) -> str | None:
        """The user's scheduler, or None when it is unset or the apiserver default."""
        name = self.pod_spec.get("schedulerName")
        return name if isinstance(name, str) and name and name != "default-scheduler" else None


def resource_count(container: dict, resource: str) -> tuple[int | None, int | None, bool]:
    """(limit, request, malformed) of a whole-number resource in one container.

    For extended resources Kubernetes copies a limit into an unset request, so a limit alone
    counts as both.
    """
    resources = as_dict(container.get("resources"))
    limits = as_dict(resources.get("limits"))
    requests = as_dict(resources.get("requests"))
    limit = request = None
    malformed = False
    if resource in limits:
        limit = as_count(limits[resource])
        malformed |= limit is None
    if resource in requests:
        request = as_count(requests[resource])
        malformed |= request is None
    return limit, request, malformed


def pod_resource_total(workload: Workload, resource: str) -> int:
    """Effective per-pod amount of a resource: max(regular + sidecars, largest init container)."""
    regular = 0
    largest_init = 0
    for ref in workload.all_containers:
        limit, request, _ = resource_count(ref.body, resource)
        amount = limit if limit is not None else (request or 0)
        if ref.group == "containers" or ref.is_sidecar:
            regular += amount
        else:
            largest_init = max(largest_init, amount)
    return max(regular, largest_init)
