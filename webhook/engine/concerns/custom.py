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
from functools import lru_cache

from ...grammars.cel import CelError, activation, largest_collection
from ...policy.compiled import CompiledRule
from ...policy.vocab import Action
from ..concern import Concern
from ..context import Context
from ..paths import get_path
from ..rule import RuleId
from ..workloads import Workload


@lru_cache(maxsize=1024)
def _rule_id(rule_id: str, action: str) -> RuleId:
    """The RuleId of a custom rule: its id and action come from the policy, not from a declaration."""
    return RuleId(rule_id, Action(action), "a custom CEL Rule of the policy set", "")


def _without_managed_fields(obj: dict | None, rules: tuple[CompiledRule, ...]) -> dict | None:
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


def _largest(rule: CompiledRule, obj: dict, old: dict | None) -> int:
    """The largest collection a rule's comprehensions could iterate: in the subtrees it reads."""
    if rule.reads is None:
        return max(largest_collection(obj), largest_collection(old) if old else 0)
    return max((largest_collection(get_path(obj, path)) for path in rule.reads), default=0)


def validate(ctx: Context, view: Workload) -> None:
    rules = ctx.policy.compiled_rules
    if not rules:
        return
    request = ctx.request
    operation, user, dry_run = request.operation, request.user, request.dry_run
    old = request.old if operation == "UPDATE" and isinstance(request.old, dict) else None
    namespace = ctx.namespace
    data = {
        "object": _without_managed_fields(view.obj, rules), "oldObject": _without_managed_fields(old, rules),
        "request": {"operation": operation, "namespace": namespace, "name": view.name or "",
                    "userInfo": user or {}, "dryRun": dry_run,
                    "kind": {"group": view.adapter.group, "version": view.api_version.rsplit("/", 1)[-1],
                             "kind": view.kind}},
        "params": {},
    }
    activations: dict[int, object] = {}  # one CEL activation per distinct params object
    sizes: dict[tuple | None, int] = {}  # largest collection per set of read paths
    for rule in rules:
        spec = rule.spec
        if view.kind not in spec.kinds or operation not in spec.operations:
            continue
        if spec.namespaces is not None and not any(fnmatch.fnmatchcase(namespace or "", p) for p in spec.namespaces):
            continue
        if rule.needs_size:  # rules reading the same subtrees share the walk (most read the whole object)
            key = rule.reads
            if key not in sizes:
                sizes[key] = _largest(rule, view.obj, old)
            size = sizes[key]
        else:
            size = 0
        act = activations.get(id(spec.params))
        if act is None:
            act = activations[id(spec.params)] = activation({**data, "params": spec.params})
        try:
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
                ctx.report(_rule_id(rule.rule_id, spec.action), v.path or "object",
                           message or f"failed: {v.program.source}", v.hint)
        except CelError as exc:
            ctx.report(_rule_id(rule.rule_id, spec.action), "object", f"rule {rule.name} could not be evaluated: {exc}",
                       "fix the rule, or guard fields that may be absent with has()")


# reads whatever its expressions name: it runs on the whole object (reads=None)
CONCERN = Concern("custom", validate=validate, reads=None)
