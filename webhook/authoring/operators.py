"""The operator tables of docs/workloads.md, generated from the workload adapters: per kind, where trainadmit writes
each concern and which key the kind's operator reads for each gang backend; and what a resize does."""

from __future__ import annotations

from ..engine.paths import Path, field_path
from ..engine.workloads import (
    ADAPTERS,
    NATIVE_JOB_SCHEDULING,
    NATIVE_POD_GROUP,
    Adapter,
    Follow,
    Gang,
    GangMethod,
    InheritedTemplate,
    capable,
)
from ..engine.workloads.pod import PodAdapter

BEGIN = "<!-- BEGIN GENERATED OPERATOR TABLE (trainadmit.authoring.operators) -->"
END = "<!-- END GENERATED OPERATOR TABLE -->"
RESIZE_BEGIN = "<!-- BEGIN GENERATED RESIZE TABLE (trainadmit.authoring.operators) -->"
RESIZE_END = "<!-- END GENERATED RESIZE TABLE -->"
BACKENDS = ("native", "coscheduling", "volcano", "kueue", "kai")

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
             + " | ".join(BACKENDS) + " | its Pods and child objects are left to it when |",
             "|---|---|" + "---|" * len(BACKENDS) + "---|"]
    for adapter in ADAPTERS:
        if isinstance(adapter, PodAdapter) or capable(adapter, InheritedTemplate):  # runtimes: not workloads
            continue
        kind = f"{adapter.kind} (`{', '.join(adapter.api_versions)}`)"
        templates = ", ".join(_pattern(p) for p in adapter.template_patterns)
        labels = ", ".join(f"`{x}`" for x in adapter.child_labels())
        users = " or ".join(f"`{u}`" for u in adapter.controllers)
        children = f"controller ownerReference, created by {users}"
        for owner in adapter.intermediate_owners:
            children += (f"; a {owner.kind}'s Pods created by {' or '.join(f'`{u}`' for u in owner.users)} with "
                         "the provenance annotation")
        children += f"; operator labels {labels}" if labels else ""
        gangs = " | ".join(_gang(adapter, b) for b in BACKENDS)
        lines.append(f"| {kind} | {templates} | {gangs} | {children} |")
    lines += ["", END]
    return "\n".join(lines) + "\n"


def _count_fields(adapter: Adapter) -> str:
    """The kind's count fields as patterns: its templates' scale fields, its own counts, its gangs' sizes."""
    patterns: dict[str, None] = {}
    for pattern in adapter.template_patterns:
        for spec in _example_scales(adapter, pattern):
            patterns[spec] = None
    patterns.update(dict.fromkeys(_path(p) for p in adapter.counts))
    for gang in adapter.gangs.values():
        size = gang.size_path
        if size is not None and not (len(size) >= 2 and size[-2] in ("labels", "annotations")):
            patterns[_path(size)] = None
    return ", ".join(patterns) or "—"


def _example_scales(adapter: Adapter, pattern: Path) -> list[str]:
    """The scale fields of the templates at ``pattern``, found on a skeleton object with one template there."""
    obj: dict = {"apiVersion": adapter.api_versions[0], "kind": adapter.kind, "spec": {"trainer": {}}}
    cur: object = obj
    parts = list(pattern) if pattern else []
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        nxt: object = {"spec": {"containers": []}} if last else ([] if parts[i + 1] == "[]" else {})
        if part == "[]":
            assert isinstance(cur, list)
            cur.append(nxt)
        else:
            key = "Worker" if part == "*" else part
            assert isinstance(cur, dict)
            nxt = cur.setdefault(key, nxt)
        cur = nxt
    out = []
    for spec in adapter.templates(obj):
        if spec.scale is not None and spec.root and _matches(spec.root, pattern):
            out += [_pattern(tuple("[]" if isinstance(x, int) else ("*" if x == "Worker" else x) for x in p))
                    for p in spec.scale.all]
    return out


def _matches(root: Path, pattern: Path) -> bool:
    return len(root) == len(pattern) and all(q in ("*", "[]") or p == q for p, q in zip(root, pattern, strict=True))


def _follows(adapter: Adapter, backend: str) -> str:
    """The cell of one backend column of the resize table; native shows both modes where the kind has a gang
    field of its own."""
    if backend == "native" and NATIVE_JOB_SCHEDULING in adapter.gangs:
        return (f"{_follow(adapter, NATIVE_JOB_SCHEDULING)} (`pod-group` mode: "
                f"{_follow(adapter, NATIVE_POD_GROUP)})")
    return _follow(adapter, adapter.backend_id(backend, "pod-group"))


def _follow(adapter: Adapter, backend_id: str) -> str:
    gang = adapter.gang(backend_id)
    follow = gang.follow
    if follow is None:
        return "— (no gang)"
    if follow is Follow.reconciler:
        text = "the reconciler patches its PodGroup to the new size"
        if backend_id == NATIVE_POD_GROUP:
            text += " (`scheduling.k8s.io/v1beta1`, 1.37; on 1.36 `v1alpha2` cannot change: refused)"
        return text
    if follow is Follow.size_field and gang.size_path is not None:
        return (f"the same change must set {_path(gang.size_path)} to the new size: {adapter.operator} sizes the "
                "gang from it")
    if follow is Follow.operator:
        return f"{adapter.operator} updates its gang from the new counts"
    if follow is Follow.requeue:
        return "Kueue recreates the Workload at the new size and queues it again"
    return f"refused: {gang.resize_reason}; recreate it"


def resize_table_markdown() -> str:
    lines = [RESIZE_BEGIN, "",
             "| kind | count fields (each a non-negative whole number) | " + " | ".join(BACKENDS) + " |",
             "|---|---|" + "---|" * len(BACKENDS)]
    for adapter in ADAPTERS:
        if isinstance(adapter, PodAdapter) or capable(adapter, InheritedTemplate):  # runtimes: never resized
            continue
        kind = f"{adapter.kind} (`{', '.join(adapter.api_versions)}`)"
        cells = " | ".join(_follows(adapter, b) for b in BACKENDS)
        lines.append(f"| {kind} | {_count_fields(adapter)} | {cells} |")
    lines += ["", RESIZE_END]
    return "\n".join(lines) + "\n"
