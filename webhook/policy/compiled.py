"""Custom rules compiled once per policy generation: CEL programs ready to evaluate.

Compilation belongs to the policy (a syntax error is a policy error, found when the set loads, with
the field that holds it); evaluation belongs to the engine (``engine.concerns.custom``). Keeping the
two apart is what lets the engine import the policy and never the other way round.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..grammars.cel import CelError, Program, compile_expression

if TYPE_CHECKING:  # types only: a cached policy set holds plain records (cache)
    from .models import RuleSpec


@dataclass(frozen=True)
class CompiledValidation:
    program: Program
    message: str | None
    message_program: Program | None
    path: str
    hint: str


@dataclass(frozen=True)
class CompiledRule:
    name: str
    spec: RuleSpec
    conditions: tuple[tuple[str, Program], ...]
    validations: tuple[CompiledValidation, ...]
    variables: tuple[tuple[str, Program], ...]
    rule_id: str = field(init=False)
    # decided once, at policy load: only expressions with comprehensions need the object's largest
    # collection for their cost bound, and only rules that name managedFields get them
    needs_size: bool = field(init=False)
    reads_managed_fields: bool = field(init=False)

    def __post_init__(self) -> None:
        programs = [p for _, p in self.conditions] + [p for _, p in self.variables]
        programs += [v.program for v in self.validations]
        programs += [v.message_program for v in self.validations if v.message_program]
        object.__setattr__(self, "rule_id", f"custom.{self.name}")
        object.__setattr__(self, "needs_size", any(p.depth for p in programs))
        object.__setattr__(self, "reads_managed_fields", any("managedFields" in p.source for p in programs))


def compile_rules(rules: dict[str, RuleSpec]) -> tuple[list[CompiledRule], list[tuple[str, str, str]]]:
    """Compile every expression; problems are (rule name, field path, message)."""
    compiled, problems = [], []
    for name in sorted(rules):
        spec = rules[name]
        named: dict[str, list[tuple[str, Program]]] = {"variables": [], "matchConditions": []}
        ok = True
        for field_name, items in named.items():
            for i, item in enumerate(getattr(spec, field_name)):
                try:
                    items.append((item.name, compile_expression(item.expression)))
                except CelError as exc:
                    problems.append((name, f"spec.{field_name}[{i}].expression", str(exc)))
                    ok = False
        validations = []
        for i, v in enumerate(spec.validations):
            try:
                program = compile_expression(v.expression)
                message_program = compile_expression(v.messageExpression) if v.messageExpression else None
            except CelError as exc:
                problems.append((name, f"spec.validations[{i}].expression", str(exc)))
                ok = False
                continue
            validations.append(CompiledValidation(program, v.message, message_program, v.path, v.hint))
        if ok:
            compiled.append(CompiledRule(name, spec, tuple(named["matchConditions"]), tuple(validations),
                                         tuple(named["variables"])))
    return compiled, problems
