"""Custom rules written by the platform team in CEL, evaluated like a ValidatingAdmissionPolicy.

Variables: ``object`` (the object as it will be stored: mutated for `check`/`/mutate`, received for
`/validate`), ``oldObject`` (UPDATE), ``request`` (operation, namespace, name, userInfo, dryRun,
kind) and ``params`` (the rule's own values). A rule applies when its kinds, operations,
namespaces and every match condition agree; each validation that is false is one violation with
the rule's action. An expression that errors, or whose cost bound exceeds the budget, is a
violation too (the apiserver's ``failurePolicy: Fail`` semantics), with the reason in the message.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from ..cel import CelError, Program, activation, compile_expression, largest_collection
from ..context import Context
from ..workloads import Workload


@dataclass
class CompiledValidation:
    program: Program
    message: str | None
    message_program: Program | None
    path: str
    hint: str


@dataclass
class CompiledRule:
    name: str
    spec: object  # RuleSpec
    conditions: list[tuple[str, Program]]
    validations: list[CompiledValidation]
    variables: list[tuple[str, Program]]

    def __post_init__(self) -> None:
        programs = [p for _, p in self.conditions] + [p for _, p in self.variables]
        programs += [v.program for v in self.validations]
        programs += [v.message_program for v in self.validations if v.message_program]
        self.rule_id = f"custom.{self.name}"
        # decided once, at policy load: only expressions with comprehensions need the object's largest
        # collection for their cost bound, and only rules that name managedFields get them
        self.needs_size = any(p.depth for p in programs)
        self.reads_managed_fields = any("managedFields" in p.source for p in programs)


def _without_managed_fields(obj: dict | None, rules: list[CompiledRule]) -> dict | None:
    """``metadata.managedFields`` is often the largest part of an object the apiserver sends, and
    converting the object into CEL values is most of a rule's cost; leave it out unless a rule
    names it."""
    if not isinstance(obj, dict):
        return obj
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or "managedFields" not in meta:
        return obj
    if any(r.reads_managed_fields for r in rules):
        return obj
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


def compile_rules(rules: dict) -> tuple[list[CompiledRule], list[tuple[str, str, str]]]:
    """Compile every expression; problems are (rule name, field path, message)."""
    compiled, problems = [], []
    for name in sorted(rules):
        spec = rules[name]
        named: dict[str, list[tuple[str, Program]]] = {"variables": [], "matchConditions": []}
        ok = True
        for field, items in named.items():
            for i, item in enumerate(getattr(spec, field)):
                try:
                    items.append((item.name, compile_expression(item.expression)))
                except CelError as exc:
                    problems.append((name, f"spec.{field}[{i}].expression", str(exc)))
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
            compiled.append(CompiledRule(name, spec, named["matchConditions"], validations, named["variables"]))
    return compiled, problems


def check(ctx: Context, view: Workload, operation: str = "CREATE", old: dict | None = None,
          user: dict | None = None, dry_run: bool = False) -> None:
    rules = ctx.policy.compiled_rules
    if not rules:
        return
    namespace = ctx.namespace
    data = {
        "object": _without_managed_fields(view.obj, rules), "oldObject": _without_managed_fields(old, rules),
        "request": {"operation": operation, "namespace": namespace, "name": view.name or "",
                    "userInfo": user or {}, "dryRun": dry_run,
                    "kind": {"group": "batch" if view.is_job else "", "version": "v1", "kind": view.kind}},
        "params": {},
    }
    largest = None
    activations: dict[int, object] = {}  # one CEL activation per distinct params object
    for rule in rules:
        spec = rule.spec
        if view.kind not in spec.kinds or operation not in spec.operations:
            continue
        if spec.namespaces is not None and not any(fnmatch.fnmatchcase(namespace or "", p) for p in spec.namespaces):
            continue
        if largest is None and rule.needs_size:
            largest = max(largest_collection(view.obj), largest_collection(old) if old else 0)
        act = activations.get(id(spec.params))
        if act is None:
            act = activations[id(spec.params)] = activation({**data, "params": spec.params})
        try:
            size = largest or 0
            if not all(program.evaluate(act, size) is True for _, program in rule.conditions):
                continue
            if rule.variables:  # evaluated in order, each seeing the ones before it
                values: dict[str, object] = {}
                base = {**data, "params": spec.params}
                for var_name, program in rule.variables:
                    values[var_name] = program.evaluate(activation({**base, "variables": values}), size)
                act = activation({**base, "variables": values})
            for v in rule.validations:
                if v.program.evaluate(act, size) is True:
                    continue
                message = v.message or ""
                if v.message_program is not None:
                    try:
                        produced = v.message_program.evaluate(act, size)
                        message = produced if isinstance(produced, str) and produced else message
                    except CelError:
                        pass
                ctx.report(rule.rule_id, v.path or "object", message or f"failed: {v.program.source}", v.hint)
        except CelError as exc:
            ctx.report(rule.rule_id, "object", f"rule {rule.name} could not be evaluated: {exc}",
                       "fix the rule, or guard fields that may be absent with has()")
