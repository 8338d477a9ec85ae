"""`trainadmit policy test`: the YAML test suites next to the policies, run through the real engine.

The suite format is `authoring.suite` (strict: a typo'd key is an error, every case states the
decision it expects). A directory without tests is a failure unless ``--allow-empty``: a green run
must mean tested. Quantity fields compare as quantities, as the apiserver stores them: a pool that
declares ``rdma/ib: 1`` injects ``1`` and the cluster shows ``"1"``; a test expecting either passes.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape, quoteattr

import yaml

from ..engine import RULES, Request, decide, load_policy
from ..grammars.quantity import QuantityError, parse_quantity
from ..policy import PolicySet
from .suite import Case, load_suites

MISSING = "<missing>"
# Paths whose values are resource quantities: container resources, pod overhead, emptyDir size limits.
_QUANTITY_PATH = re.compile(r"(^|\.)(limits|requests|overhead)(\.|\[)|(^|\.)sizeLimit$")


@dataclass
class CaseResult:
    suite: str
    name: str
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures


def known_rules(policy: PolicySet) -> set[str]:
    """Rule ids a suite may expect: the engine's and the policy's custom ones."""
    return set(RULES) | {f"custom.{name}" for name in policy.rules}


def same_value(path: str, got: Any, want: Any) -> bool:
    """Equal, or, at a quantity path, the same quantity ("1" and 1, "1Gi" and "1024Mi")."""
    if got == want and type(got) is type(want):
        return True
    if _QUANTITY_PATH.search(path) and not isinstance(got, bool) and not isinstance(want, bool):
        try:
            return parse_quantity(got) == parse_quantity(want)
        except QuantityError:
            return False
    return got == want and not isinstance(got, bool) and not isinstance(want, bool)


def _field(obj: Any, dotted: str) -> Any:
    cur = obj
    for part in re.findall(r'\["([^"]+)"\]|([^.\[\]]+)|\[(\d+)\]', dotted):
        key = part[0] or part[1]
        if part[2]:
            idx = int(part[2])
            if not isinstance(cur, list) or idx >= len(cur):
                return MISSING
            cur = cur[idx]
        elif isinstance(cur, dict) and key in cur:
            cur = cur[key]
        else:
            return MISSING
    return cur


def _leaves(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict) and obj:
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_leaves(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(obj, list) and obj:
        out = {}
        for i, v in enumerate(obj):
            out.update(_leaves(v, f"{prefix}[{i}]"))
        return out
    return {prefix: obj}


def _yaml_documents(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _load_case_object(case: Case, base: Path) -> tuple[Any, dict]:
    extra: dict = {}
    if case.review is not None:
        req = case.review["request"]
        extra = {"operation": req.get("operation", "CREATE"), "namespace": req.get("namespace"),
                 "old": req.get("oldObject"), "user": req.get("userInfo") or {}}
        return req.get("object"), extra
    if case.file is not None:
        docs = _yaml_documents(base / case.file)
        if case.document > len(docs):
            raise ValueError(f"{case.file} has {len(docs)} document(s), the case asks for document {case.document}")
        return docs[case.document - 1], extra
    return case.object, extra


def run_case(policy: PolicySet, suite: str, case: Case, base: Path) -> CaseResult:
    result = CaseResult(suite, case.name)
    started = time.perf_counter()
    try:
        obj, extra = _load_case_object(case, base)
        request = Request(obj, operation=case.operation or extra.get("operation", "CREATE"),
                          old=case.oldObject if case.oldObject is not None else extra.get("old"),
                          namespace=case.namespace or extra.get("namespace"),
                          user=case.userInfo if case.userInfo is not None else extra.get("user", {}),
                          phase=case.phase)
        decision = decide(policy, request)
    except Exception as exc:
        result.failures.append(f"could not run: {type(exc).__name__}: {exc}")
        return result
    expect = case.expect
    if expect.matched is not None and decision.matched != expect.matched:
        result.failures.append(f"matched is {decision.matched}, expected {expect.matched} ({decision.reason})")
    if decision.allowed != expect.allowed:
        got = "; ".join(v.text() for v in decision.denials) or "no denials"
        result.failures.append(f"allowed is {decision.allowed}, expected {expect.allowed} ({got})")
    for key, violations in (("denials", decision.denials), ("warnings", decision.warnings),
                            ("notes", decision.notes)):
        wanted = getattr(expect, key)
        if wanted is not None:
            want, have = sorted(set(wanted)), sorted({v.rule for v in violations})
            if want != have:
                result.failures.append(f"{key} are {have}, expected {want}")
    texts = [v.text() for v in decision.violations]
    for pattern in expect.messages:
        if not any(re.search(pattern, t) for t in texts):
            result.failures.append(f"no violation matches /{pattern}/ (got: {texts or 'none'})")
    mutated = decision.mutated if decision.mutated is not None else obj
    if expect.mutated is not None:
        want = expect.mutated
        if set(want) == {"file"}:
            want = _yaml_documents(base / want["file"])[0]
        got_leaves, want_leaves = _leaves(mutated), _leaves(want)
        differing = sorted(k for k in set(got_leaves) | set(want_leaves)
                           if not same_value(k, got_leaves.get(k, MISSING), want_leaves.get(k, MISSING)))
        if differing:
            result.failures.append(f"mutated object differs at {', '.join(differing[:5])}"
                                   + (" …" if len(differing) > 5 else ""))
    for path, want in expect.fields.items():
        got = _field(mutated, path)
        if not same_value(path, got, want):
            result.failures.append(f"{path} is {got!r}, expected {want!r}")
    result.seconds = time.perf_counter() - started
    return result


def run(directory: str | Path) -> tuple[list[CaseResult], list[str]]:
    """(case results, suite-level errors: file:line, field, message and fix).

    A policy that does not load runs no test: ``PolicyError`` (every load problem) is raised, for the caller
    to report as what it is, not as failed tests."""
    root = Path(directory)
    policy = load_policy(root)
    suites, problems = load_suites(root, known_rules(policy))
    errors = [f"{p}" + (f" (fix: {p.fix})" if p.fix else "") for p in problems if p.is_error]
    results = [run_case(policy, suite.display, loaded.case, loaded.base) for suite in suites for loaded in suite.cases]
    return results, errors


def _suite_name(error: str) -> str:
    """A suite error's test name: its file and line (``file:line``), whole; the message says the rest."""
    where = error.split(" ", 1)[0].rstrip(":")
    return where or error


def junit(results: list[CaseResult], errors: list[str]) -> str:
    """The JUnit report: a case per test (``failure`` when it failed), a case per suite error (``error``:
    the suite could not be read, nothing was tested). Names are never cut."""
    failures = sum(not r.ok for r in results)
    lines = ['<?xml version="1.0" encoding="UTF-8"?>',
             f'<testsuite name="trainadmit-policy" tests="{len(results) + len(errors)}" failures="{failures}" '
             f'errors="{len(errors)}">']
    for r in results:
        lines.append(f'  <testcase classname={quoteattr(r.suite)} name={quoteattr(r.name)} time="{r.seconds:.4f}">')
        for f in r.failures:
            lines.append(f"    <failure message={quoteattr(f)}>{escape(f)}</failure>")
        lines.append("  </testcase>")
    for e in errors:
        lines.append(f'  <testcase classname="suite" name={quoteattr(_suite_name(e))}>'
                     f'<error message={quoteattr(e)}>{escape(e)}</error></testcase>')
    lines.append("</testsuite>")
    return "\n".join(lines) + "\n"


def junit_load_error(directory: str, problems: list[str]) -> str:
    """The JUnit report of a policy that does not load: one case in error, naming every load problem."""
    text = "\n".join(problems)
    message = f"the policy in {directory} does not load ({len(problems)} error{'s' if len(problems) != 1 else ''})"
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            '<testsuite name="trainadmit-policy" tests="1" failures="0" errors="1">\n'
            f'  <testcase classname="policy" name={quoteattr(directory)}>'
            f'<error message={quoteattr(message)}>{escape(text)}</error></testcase>\n'
            "</testsuite>\n")
