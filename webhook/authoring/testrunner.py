"""`trainadmit policy test`: YAML test suites next to the policies, run through the real engine.

A suite (``*.test.yaml`` anywhere under the policy directory, or any YAML under ``tests/``; other
documents under ``tests/`` are fixture data the cases may reference):

    apiVersion: trainadmit.io/v1alpha1
    kind: PolicyTest
    metadata: {name: bundled}
    cases:
    - name: a 4-node H100 job is admitted with a gang
      file: ../examples/llama-pretrain.yaml      # or object: {...}, or review: {AdmissionReview}
      namespace: team-nlp                       # optional; operation, phase, userInfo likewise
      expect:
        allowed: true
        denials: []                             # exact set of denying rule ids
        warnings: [custom.owner-label]          # exact set of warning rule ids
        messages: ["whole nodes"]               # regexes, each must match some violation
        fields: {spec.scheduling.schedulingPolicy.gang.minCount: 4}   # in the mutated object
        mutated: {file: llama.mutated.yaml}     # or inline: the whole mutated object

A directory without tests is a failure unless ``allow_empty``: a green run must mean tested.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape, quoteattr

import yaml

from ..engine import Request, decide, load_policy
from ..policy import PolicyError


@dataclass
class CaseResult:
    suite: str
    name: str
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures


def discover(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*.y*ml")
                  if p.is_file() and (p.name.endswith((".test.yaml", ".test.yml")) or "tests" in
                                      p.relative_to(directory).parts[:-1]))


def _field(obj: Any, dotted: str) -> Any:
    cur = obj
    for part in re.findall(r'\["([^"]+)"\]|([^.\[\]]+)|\[(\d+)\]', dotted):
        key = part[0] or part[1]
        if part[2]:
            idx = int(part[2])
            if not isinstance(cur, list) or idx >= len(cur):
                return "<missing>"
            cur = cur[idx]
        elif isinstance(cur, dict) and key in cur:
            cur = cur[key]
        else:
            return "<missing>"
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


def _load_case_object(case: dict, base: Path) -> tuple[Any, dict]:
    extra: dict = {}
    if "review" in case:
        req = case["review"]["request"]
        extra = {"operation": req.get("operation", "CREATE"), "namespace": req.get("namespace"),
                 "old": req.get("oldObject"), "user": req.get("userInfo") or {}}
        return req.get("object"), extra
    if "file" in case:
        docs = [d for d in yaml.safe_load_all((base / case["file"]).read_text()) if d is not None]
        return docs[int(case.get("document", 1)) - 1], extra
    return case.get("object"), extra


def run_case(policy, suite: str, case: dict, base: Path) -> CaseResult:
    result = CaseResult(suite, str(case.get("name", "<unnamed>")))
    started = time.perf_counter()
    try:
        obj, extra = _load_case_object(case, base)
        request = Request(obj, operation=case.get("operation", extra.get("operation", "CREATE")),
                          old=case.get("oldObject", extra.get("old")),
                          namespace=case.get("namespace", extra.get("namespace")),
                          user=case.get("userInfo", extra.get("user", {})), phase=case.get("phase", "mutate"))
        decision = decide(policy, request)
    except Exception as exc:
        result.failures.append(f"could not run: {type(exc).__name__}: {exc}")
        return result
    expect = case.get("expect") or {}
    if "matched" in expect and decision.matched != expect["matched"]:
        result.failures.append(f"matched is {decision.matched}, expected {expect['matched']} ({decision.reason})")
    if "allowed" in expect and decision.allowed != expect["allowed"]:
        got = "; ".join(v.text() for v in decision.denials) or "no denials"
        result.failures.append(f"allowed is {decision.allowed}, expected {expect['allowed']} ({got})")
    for key, got in (("denials", decision.denials), ("warnings", decision.warnings)):
        if key in expect:
            want, have = sorted(set(expect[key] or [])), sorted({v.rule for v in got})
            if want != have:
                result.failures.append(f"{key} are {have}, expected {want}")
    texts = [v.text() for v in decision.violations]
    for pattern in expect.get("messages") or []:
        if not any(re.search(pattern, t) for t in texts):
            result.failures.append(f"no violation matches /{pattern}/ (got: {texts or 'none'})")
    if "mutated" in expect:
        want = expect["mutated"]
        if isinstance(want, dict) and set(want) == {"file"}:
            want = next(d for d in yaml.safe_load_all((base / want["file"]).read_text()) if d is not None)
        got = decision.mutated if decision.mutated is not None else obj
        if got != want:
            differing = sorted(k for k in set(_leaves(got)) | set(_leaves(want))
                               if _leaves(got).get(k) != _leaves(want).get(k))
            result.failures.append(f"mutated object differs at {', '.join(differing[:5])}"
                                   + (" …" if len(differing) > 5 else ""))
    for path, want in (expect.get("fields") or {}).items():
        got = _field(decision.mutated if decision.mutated is not None else obj, path)
        if got != want:
            result.failures.append(f"{path} is {got!r}, expected {want!r}")
    result.seconds = time.perf_counter() - started
    return result


def run(directory: str | Path) -> tuple[list[CaseResult], list[str]]:
    """(case results, suite-level errors)."""
    root = Path(directory)
    errors: list[str] = []
    try:
        policy = load_policy(root)
    except PolicyError as exc:
        return [], [f"policy does not load: {p}" for p in exc.problems]
    results: list[CaseResult] = []
    for path in discover(root):
        try:
            docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        except yaml.YAMLError as exc:
            errors.append(f"{path}: not valid YAML: {exc}")
            continue
        strict = path.name.endswith((".test.yaml", ".test.yml"))
        for doc in docs:
            if not isinstance(doc, dict) or doc.get("kind") != "PolicyTest":
                if strict:  # other YAML under tests/ is fixture data for the cases
                    kind = doc.get("kind") if isinstance(doc, dict) else doc
                    errors.append(f"{path}: expected kind PolicyTest, got {kind!r}")
                continue
            suite = f"{path.relative_to(root)}:{(doc.get('metadata') or {}).get('name', '')}"
            for case in doc.get("cases") or []:
                results.append(run_case(policy, suite, case, path.parent))
    return results, errors


def junit(results: list[CaseResult], errors: list[str]) -> str:
    failures = sum(not r.ok for r in results) + len(errors)
    lines = ['<?xml version="1.0" encoding="UTF-8"?>',
             f'<testsuite name="trainadmit-policy" tests="{len(results) + len(errors)}" failures="{failures}">']
    for r in results:
        lines.append(f'  <testcase classname={quoteattr(r.suite)} name={quoteattr(r.name)} time="{r.seconds:.4f}">')
        for f in r.failures:
            lines.append(f"    <failure message={quoteattr(f)}>{escape(f)}</failure>")
        lines.append("  </testcase>")
    for e in errors:
        lines.append(f'  <testcase classname="suite" name={quoteattr(e[:80])}>'
                     f'<failure message={quoteattr(e)}/></testcase>')
    lines.append("</testsuite>")
    return "\n".join(lines) + "\n"
