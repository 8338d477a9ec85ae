"""Custom rules compiled once per policy generation: CEL programs ready to evaluate.

Compilation belongs to the policy (a syntax error is a policy error, found when the set loads, with
the field that holds it); evaluation belongs to the engine (``engine.concerns.custom``). Keeping the
two apart is what lets the engine import the policy and never the other way round.
"""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING

from ..grammars.cel import CelError, Program, compile_expression, object_reads
from ..grammars.lazydataclass import dataclass

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
    # the object paths its expressions read (None: the whole object); its cost bound measures these
    reads: tuple[tuple[str, ...], ...] | None = field(init=False)

    @property
    def programs(self) -> list[Program]:
        """Every compiled expression of the rule."""
        programs = [p for _, p in self.conditions] + [p for _, p in self.variables]
        programs += [v.program for v in self.validations]
        programs += [v.message_program for v in self.validations if v.message_program]
        return programs

    def __post_init__(self) -> None:
        programs = self.programs
        object.__setattr__(self, "rule_id", f"custom.{self.name}")
        object.__setattr__(self, "needs_size", any(p.depth for p in programs))
        object.__setattr__(self, "reads_managed_fields", any("managedFields" in p.source for p in programs))
        found = object_reads([p.source for p in programs])
        object.__setattr__(self, "reads", found[0] if found is not None else None)


def compile_rules(rules: dict[str, RuleSpec]) -> tuple[list[CompiledRule], list[tuple[str, tuple, str]]]:
    """Compile every expression; problems are (rule name, field location, message), every one of them."""
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
                    problems.append((name, ("spec", field_name, i, "expression"), str(exc)))
                    ok = False
        validations = []
        for i, v in enumerate(spec.validations):
            programs: dict[str, Program | None] = {"expression": None, "messageExpression": None}
            for key, source in (("expression", v.expression), ("messageExpression", v.messageExpression)):
                if source is None:
                    continue
                try:
                    programs[key] = compile_expression(source)
                except CelError as exc:
                    problems.append((name, ("spec", "validations", i, key), str(exc)))
                    ok = False
            program = programs["expression"]
            if program is not None:
                validations.append(CompiledValidation(program, v.message, programs["messageExpression"], v.path,
                                                      v.hint))
        if ok:
            compiled.append(CompiledRule(name, spec, tuple(named["matchConditions"]), tuple(validations),
                                         tuple(named["variables"])))
    return compiled, problems
