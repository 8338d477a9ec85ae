"""Render decisions for people (text) and for machines (JSON, YAML, JSON patch)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import yaml

from ..engine import Decision
from ..engine.workloads import Adapter, Workload
from .inputs import Item

if TYPE_CHECKING:
    from ..authoring.explain import Explainer


def identity(item: Item) -> str:
    view = Workload(item.obj if isinstance(item.obj, dict) else {}, Adapter())  # identity only
    return f"{view.kind or '?'} {view.namespace or item.namespace or 'default'}/{view.display_name}"


def record(item: Item, decision: Decision) -> dict[str, Any]:
    """The machine-readable decision for one object (the `-o json` element, and the parity unit)."""
    out = {"source": item.source, "document": item.index, "object": identity(item)}
    out.update(decision.as_dict())
    out.pop("companions", None)
    if decision.companions:
        out["companions"] = decision.companions
    return out


def text(item: Item, decision: Decision, explainer: Explainer | None = None) -> str:
    head = f"{item.source}#{item.index}: {identity(item)}: "
    if not decision.matched:
        return head + f"not matched ({decision.reason})"
    s = decision.summary
    lines = []
    if decision.allowed:
        detail = ""
        if s.get("gpuResource"):
            detail = (f" (pool {s.get('pool')}, {s.get('pods')} × {s.get('gpusPerPod')} {s.get('gpuResource')}, "
                      f"gang {s.get('gang')}, topology {s.get('topology') or '-'}, "
                      f"priority {s.get('priority') or '-'})")
        lines.append(head + "ADMITTED" + detail)
        if decision.patch:
            concerns = sorted({i.concern for i in decision.injections})
            lines.append(f"  injected {', '.join(concerns)} ({len(decision.patch)} patch operations)")
    else:
        lines.append(head + f"DENIED ({len(decision.denials)} problem{'s' if len(decision.denials) != 1 else ''})")
        for v in decision.denials:
            lines.append(f"  ✗ [{v.rule}] {v.path}: {v.message}")
            if v.hint:
                lines.append(f"    fix: {v.hint}")
    for v in decision.warnings:
        lines.append(f"  ! warning [{v.rule}] {v.path}: {v.message}" + (f" ({v.hint})" if v.hint else ""))
    if decision.unverified:  # no cluster view: what the Pods need that nobody checked (see --cluster)
        lines.append(f"  ? not verified without a cluster view: {', '.join(decision.unverified)}")
    if explainer is not None:
        for inj in decision.injections:
            ref = explainer.injection(inj.source)
            lines.append(f"    {inj.path}  <- {inj.source}" + (f"  ({ref})" if ref else ""))
        for v in decision.violations:
            lines.append(f"    [{v.rule}] {explainer.rule(v.rule)}")
    for comp in decision.companions:
        meta = comp.get("metadata", {})
        lines.append(f"  reconciler creates {comp.get('kind')} {meta.get('namespace')}/{meta.get('name')} "
                     f"({comp.get('apiVersion')})")
    return "\n".join(lines)


def to_yaml(objects: list[Any]) -> str:
    return yaml.safe_dump_all(objects, sort_keys=False, default_flow_style=False, width=120)


def to_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=False, ensure_ascii=False)
