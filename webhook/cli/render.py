"""Render decisions for people (text) and for machines (JSON, YAML, JSON patch).

Each output is written object by object as the objects are decided (``Output.add``), so that
`check` holds one object at a time however many it reads; the bytes are those of rendering the
whole list at the end (``json.dumps(..., indent=2)``, ``yaml.dump_all``), which is what the
tests compare them with.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from ..engine import Decision
from ..engine.workloads import Adapter, Workload
from . import fastjson, fastyaml
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


def to_json(value: Any) -> str:
    """``json.dumps(value, indent=2, ensure_ascii=False)``: the same text (``fastjson``)."""
    return fastjson.dumps(value)


def patch_element(item: Item, decision: Decision) -> dict[str, Any]:
    """The `-o patch` element: where the object came from, the verdict and the JSON patch."""
    return {"source": item.source, "document": item.index, "object": identity(item), "allowed": decision.allowed,
            "patch": decision.patch}


YAML_OPTIONS = {"sort_keys": False, "default_flow_style": False, "width": 120}
# YAML ends a comment at any of its line breaks; a reason or name from the object could hold one
_YAML_BREAKS = {ord(c): f"\\u{ord(c):04x}" for c in "\n\r\x85\u2028\u2029"}


class TextOutput:
    """A paragraph per object, then the summary line."""

    def __init__(self, out: IO[str], explainer: Explainer | None = None):
        self.out, self.explainer = out, explainer

    def add(self, item: Item, decision: Decision) -> None:
        self.out.write(text(item, decision, self.explainer) + "\n")

    def close(self, summary: str) -> None:
        self.out.write(summary + "\n")


class JsonOutput:
    """A JSON array written element by element: the bytes of ``to_json`` of the whole list.

    ``json.dumps`` never writes a raw line break inside a string, so indenting every line of an
    element by two spaces puts it one level deeper, exactly as the list's encoder would."""

    def __init__(self, out: IO[str], element: Callable[[Item, Decision], Any]):
        self.out, self.element, self.count = out, element, 0

    def add(self, item: Item, decision: Decision) -> None:
        self.out.write(("[\n  " if self.count == 0 else ",\n  ")
                       + to_json(self.element(item, decision)).replace("\n", "\n  "))
        self.count += 1

    def close(self, summary: str) -> None:
        self.out.write("\n]\n" if self.count else "[]\n")


class YamlOutput:
    """The objects as they will be stored (mutated, with the reconciler's companions), one YAML
    stream: the bytes of ``yaml.dump_all`` of them all with libyaml's dumper. An object no policy
    matches is preceded by a comment line saying so (the text output's line for it); denials go
    to stderr, as the stream carries only objects."""

    def __init__(self, out: IO[str], err: IO[str] | None = None):
        self.out, self.err = out, err if err is not None else sys.stderr
        self.dumper = fastyaml.open_dumper(out, **YAML_OPTIONS)

    def add(self, item: Item, decision: Decision) -> None:
        if not decision.matched:
            self.out.write("# " + text(item, decision).translate(_YAML_BREAKS) + "\n")
        self.dumper.represent(decision.mutated if decision.mutated is not None else item.obj)
        for companion in decision.companions:
            self.dumper.represent(companion)
        if not decision.allowed:
            print(f"{item.source}#{item.index}: {decision.denial_message()}", file=self.err)

    def close(self, summary: str) -> None:
        try:
            self.dumper.close()
        finally:
            self.dumper.dispose()
