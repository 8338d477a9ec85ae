"""Render decisions for people (text) and for machines (JSON, YAML, JSON patch)."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from .decision import Decision
from .inputs import Item
from .workloads import Workload


def identity(item: Item) -> str:
    view = Workload(item.obj if isinstance(item.obj, dict) else {})
    return f"{view.kind or '?'} {view.namespace or item.namespace or 'default'}/{view.display_name}"


def record(item: Item, decision: Decision) -> dict[str, Any]:
    """The machine-readable decision for one object (the `-o json` element, and the parity unit)."""
    out = {"source": item.source, "document": item.index, "object": identity(item)}
    out.update(decision.as_dict())
    out.pop("companions", None)
    if decision.companions:
        out["companions"] = decision.companions
    return out


_DOC = re.compile(r"^(Platform|Pool|Dataset|CheckpointClass|PriorityTier|Quota|Rule)[ .](\S+?)(:|$|\s)")
_BUILTIN_MODULES = {"intent": "intent.py", "topology": "rules/topology.py", "quota": "rules/quota.py",
                    "gang": "rules/topology.py", "gpu": "rules/gpu.py", "rdma": "rules/rdma.py",
                    "placement": "rules/placement.py", "nccl": "rules/nccl.py", "storage": "rules/storage.py",
                    "enforced": "context.py", "final": "engine.py", "object": "shape.py"}


def explainer(policy) -> tuple:
    """Functions that name where an injected value or a rule comes from, as file:line."""
    platform = policy.sources.get(("Platform", policy.platform_doc.metadata.name))

    def where(kind: str, name: str) -> str:
        ref = policy.sources.get((kind, name))
        return f"{ref.file}:{ref.line}" if ref else "?"

    def injection(source: str) -> str:
        m = _DOC.match(source)
        if not m:
            return ""
        if m.group(1) == "Platform":
            return f"{platform.file}:{platform.line}" if platform else ""
        return where(m.group(1), m.group(2))

    def rule(rule_id: str) -> str:
        if rule_id.startswith("custom."):
            return f"Rule {rule_id[7:]} at {where('Rule', rule_id[7:])}"
        module = _BUILTIN_MODULES.get(rule_id.split(".")[0], "engine.py")
        override = f"; action set in {platform.file}" if platform and rule_id in policy.platform.rules else ""
        return f"built-in rule in webhook/{module}{override}"

    return injection, rule


def text(item: Item, decision: Decision, explain: bool = False, sources: tuple | None = None) -> str:
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
    if explain:
        injection_ref, rule_ref = sources if sources else (lambda s: "", lambda r: "")
        seen = set()
        for inj in decision.injections:
            key = (inj.path, inj.source)
            if key in seen:
                continue
            seen.add(key)
            ref = injection_ref(inj.source)
            lines.append(f"    {inj.path}  <- {inj.source}" + (f"  ({ref})" if ref else ""))
        for v in decision.violations:
            lines.append(f"    [{v.rule}] defined by {rule_ref(v.rule)}")
    for comp in decision.companions:
        meta = comp.get("metadata", {})
        lines.append(f"  reconciler creates {comp.get('kind')} {meta.get('namespace')}/{meta.get('name')} "
                     f"({comp.get('apiVersion')})")
    return "\n".join(lines)


def to_yaml(objects: list[Any]) -> str:
    return yaml.safe_dump_all(objects, sort_keys=False, default_flow_style=False, width=120)


def to_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=False, ensure_ascii=False)
