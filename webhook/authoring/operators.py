"""The README's operator table, generated from the workload adapters: per kind, where trainadmit writes
each concern and which key the kind's operator reads for each gang backend."""

from __future__ import annotations

from ..engine.paths import Path, field_path
from ..engine.workloads import (
    ADAPTERS,
    NATIVE_JOB_SCHEDULING,
    NATIVE_POD_GROUP,
    Adapter,
    Gang,
    GangMethod,
    InheritedTemplate,
    capable,
)
from ..engine.workloads.pod import PodAdapter

BEGIN = "<!-- BEGIN GENERATED OPERATOR TABLE (trainadmit.authoring.operators) -->"
END = "<!-- END GENERATED OPERATOR TABLE -->"
BACKENDS = ("native", "coscheduling", "volcano", "kueue")

_TEMPLATES = {
    "native": "every gang template `spec.schedulingGroup.podGroupName` + PodGroup `scheduling.k8s.io/v1beta1`",
    "coscheduling": "every gang template label `scheduling.x-k8s.io/pod-group` + schedulerName + PodGroup "
                    "`scheduling.x-k8s.io/v1alpha1`",
    "volcano": "every gang template annotation `scheduling.k8s.io/group-name` + schedulerName + PodGroup "
               "`scheduling.volcano.sh/v1beta1`",
}


def _path(path: Path) -> str:
    return f"`{field_path(path)}`"


def _pattern(path: Path) -> str:
    return "`" + ".".join("*" if p == "*" else "[]" if p == "[]" else str(p) for p in path).replace(".[]", "[]") + "`"


def _gang(adapter: Adapter, backend: str) -> str:
    """The cell of one backend column; native shows both modes where the kind has a gang field of its own."""
    if backend != "native":
        return _method(adapter.gang(backend), backend)
    own = adapter.gangs.get(NATIVE_JOB_SCHEDULING)
    pod_group = _method(adapter.gang(NATIVE_POD_GROUP), backend)
    return f"{_method(own, backend)} (`pod-group` mode: {pod_group})" if own is not None else pod_group


def _method(gang: Gang, backend: str) -> str:
    if gang.method is GangMethod.spec and gang.path is not None:
        where = _path((*gang.path, "schedulingPolicy", "gang", "minCount"))
        return f"{where} (its controller builds Workload + PodGroup)"
    if gang.method is GangMethod.templates:
        return _TEMPLATES[backend] + " (reconciler)"
    if gang.method is GangMethod.kueue:
        where = _path(gang.suspend) if gang.suspend else "no suspend (Kueue gates the Pods)"
        return f"label `kueue.x-k8s.io/queue-name` + {where}"
    if gang.method is GangMethod.fields and gang.fields is not None:
        f = gang.fields
        parts = [f"size {_path(f.size)}" if f.size else "", f"queue {_path(f.queue)}" if f.queue else "",
                 f"priority {_path(f.priority)}" if f.priority else "",
                 f"{_path(f.switch[0])}: \"{f.switch[1]}\"" if f.switch else "",
                 "schedulerName on templates" if gang.scheduler_name else ""]
        return "; ".join(p for p in parts if p) + f" — read by {f.reads}"
    return f"— ({gang.reason})"


def operator_table_markdown() -> str:
    lines = [BEGIN, "",
             "| kind | pod templates (GPU-side injections go to the templates whose Pods request GPUs) | "
             + " | ".join(BACKENDS) + " | its Pods and child objects are recognised by |",
             "|---|---|" + "---|" * len(BACKENDS) + "---|"]
    for adapter in ADAPTERS:
        if isinstance(adapter, PodAdapter) or capable(adapter, InheritedTemplate):  # runtimes: not workloads
            continue
        kind = f"{adapter.kind} (`{', '.join(adapter.api_versions)}`)"
        templates = ", ".join(_pattern(p) for p in adapter.template_patterns)
        labels = ", ".join(f"`{x}`" for x in adapter.child_labels())
        children = "controller ownerReference" + (f"; operator labels {labels}" if labels else "")
        gangs = " | ".join(_gang(adapter, b) for b in BACKENDS)
        lines.append(f"| {kind} | {templates} | {gangs} | {children} |")
    lines += ["", END]
    return "\n".join(lines) + "\n"
