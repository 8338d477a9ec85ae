"""The policy reference in Markdown, generated from the models (docs/policies.md embeds it)."""

from __future__ import annotations

import typing

from pydantic import BaseModel

from ..engine import RULES
from ..policy.models import DOCUMENT_KINDS
from ..policy.vocab import RETIRED_RULES
from .suite import Case

BEGIN = "<!-- BEGIN GENERATED REFERENCE (trainadmit policy reference) -->"
END = "<!-- END GENERATED REFERENCE -->"


def _type(annotation) -> str:
    origin = typing.get_origin(annotation)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if origin is typing.Annotated:
        return _type(args[0])
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in typing.get_args(annotation))
    if origin in (list,):
        return f"list of {_type(args[0])}"
    if origin in (dict,):
        return f"map {_type(args[0])} → {_type(args[1])}"
    if origin is not None and args:  # Union / Optional
        return " or ".join(_type(a) for a in args)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"[{annotation.__name__}](#{annotation.__name__.lower()})"
    if isinstance(annotation, type) and hasattr(annotation, "__members__"):
        return " \\| ".join(f"`{m.value}`" for m in annotation)  # type: ignore[attr-defined]
    return getattr(annotation, "__name__", str(annotation))


def _default(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, BaseModel):
        return "(see its fields)"
    if hasattr(value, "value") and not isinstance(value, str | int | float | bool):
        value = value.value
    if isinstance(value, list):
        value = [getattr(v, "value", v) for v in value]
    return f"`{value!r}`".replace("|", "\\|")


def _models(model: type[BaseModel], seen: list) -> None:
    if model in seen:
        return
    seen.append(model)
    for field in model.model_fields.values():
        for arg in [field.annotation, *typing.get_args(field.annotation)]:
            for inner in [arg, *typing.get_args(arg)]:
                if isinstance(inner, type) and issubclass(inner, BaseModel):
                    _models(inner, seen)


def reference_markdown() -> str:
    seen: list = []
    for model in DOCUMENT_KINDS.values():
        _models(model.model_fields["spec"].annotation, seen)  # type: ignore[arg-type]
    lines = [BEGIN, ""]
    for kind, model in DOCUMENT_KINDS.items():
        spec = model.model_fields["spec"].annotation
        lines.append(f"- `kind: {kind}` → `spec`: [{spec.__name__}](#{spec.__name__.lower()})")  # type: ignore[union-attr]
    lines.append("- `kind: PolicyTest` (a test suite: `metadata.name`, `cases`) → each of `cases`: [Case](#case)")
    _models(Case, seen)
    lines.append("")
    for model in seen:
        lines += [f"### {model.__name__}", ""]
        doc = (model.__doc__ or "").strip().splitlines()
        if doc and not doc[0].startswith("Base:"):
            lines += [doc[0], ""]
        lines += ["| field | type | default | description |", "|---|---|---|---|"]
        for name, field in model.model_fields.items():
            if field.is_required():
                default = "required"
            else:
                value = field.default_factory() if field.default_factory is not None else field.default
                default = _default(value)
            desc = (field.description or "").replace("|", "\\|")
            lines.append(f"| `{name}` | {_type(field.annotation)} | {default} | {desc} |")
        lines.append("")
    lines += _rules_table()
    lines.append(END)
    return "\n".join(lines) + "\n"


def _rules_table() -> list[str]:
    """Every built-in rule, from the engine's registry: what `Platform.spec.rules` may override."""
    lines = ["### Built-in rules", "",
             "Ids for `Platform.spec.rules` (`deny`, `warn`, `note` or `off`: a note admits and is not counted by "
             "`check --strict`); custom rules are `custom.<Rule name>`.", "",
             "| rule | default | fires when |", "|---|---|---|"]
    for rule_id in sorted(RULES):
        declared = RULES[rule_id]
        summary = declared.summary.replace("|", "\\|")
        lines.append(f"| `{rule_id}` | {declared.default.value} | {summary} |")
    lines += ["", "Retired ids: still accepted in `Platform.spec.rules` (an override has no effect), never reported.",
              "", "| rule | why |", "|---|---|"]
    lines += [f"| `{rule_id}` | {why.replace('|', chr(92) + '|')} |" for rule_id, why in sorted(RETIRED_RULES.items())]
    lines.append("")
    return lines
