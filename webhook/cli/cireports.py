"""Reports CI systems read: JUnit XML (test result views) and SARIF 2.1.0 (code-review annotations).

JUnit: one ``testcase`` per object (named by its file, document and identity), a ``failure`` per
denial (and per warning with --strict; otherwise warnings go to the case's ``system-out``, as notes always do), a
``skipped`` for an object no policy matches, an ``error`` case per input that could not be decided.

SARIF: one ``result`` per violation, ``level`` error for a denial, warning for a warning, note for a note, located
at the file and line of the offending field (``locate.Locator``) and, logically, at the object and
field; the rules that fired are the driver's ``rules``; inputs that could not be decided are
``toolExecutionNotifications`` and make ``executionSuccessful`` false. The schema is OASIS's
(tests/fixtures/sarif: the test validates every report against it).

Both hold only their results (a few strings per violation) until ``close`` writes the document:
the objects themselves are not kept.
"""

from __future__ import annotations

import os
from typing import IO, Any
from xml.sax.saxutils import escape, quoteattr

from .. import __version__
from ..engine import RULES, Decision
from ..policy.vocab import Action
from .inputs import STDIN_NAME, Item
from .locate import Locator
from .render import Options, identity, to_json

SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
INFORMATION_URI = "https://github.com/trainadmit/trainadmit"


def _uri(source: str) -> str:
    """A file as SARIF wants it: relative to the working directory when inside it, '/' separated."""
    path = os.path.relpath(source) if not os.path.isabs(source) or source.startswith(os.getcwd()) else source
    return path.replace(os.sep, "/")


class JunitOutput:
    def __init__(self, out: IO[str], options: Options | None = None):
        self.out, self.options = out, options or Options()
        self.cases: list[str] = []
        self.failures = self.errors = self.skipped = 0
        self.locator = Locator()

    def add(self, item: Item, decision: Decision) -> None:
        failed = self.options.failed(decision)
        if self.options.quiet and not failed:
            return
        name = f"{item.label}: {identity(item, self.options.namespace)}"
        line = self.locator.line(item, "") if item.source != STDIN_NAME else None
        where = f' file={quoteattr(item.source)}' + (f' line="{line}"' if line else "")
        body: list[str] = []
        if not decision.matched:
            self.skipped += 1
            body.append(f"    <skipped message={quoteattr('not matched: ' + decision.reason)}/>")
        failing = decision.denials + (decision.warnings if self.options.strict else [])
        for v in failing:
            at = self.locator.line(item, v.path)
            text = v.text() + (f"\n{item.source}:{at}" if at else "")
            body.append(f"    <failure type={quoteattr(v.rule)} message={quoteattr(v.text())}>{escape(text)}</failure>")
        if failed:
            self.failures += 1
        said = [f"warning {v.text()}" for v in decision.warnings if not self.options.strict]
        said += [f"note {v.text()}" for v in decision.notes]  # never a failure, --strict or not
        if said:
            body.append(f"    <system-out>{escape(chr(10).join(said))}</system-out>")
        case = f'  <testcase classname={quoteattr(item.source)} name={quoteattr(name)}{where}'
        self.cases.append(case + (">\n" + "\n".join(body) + "\n  </testcase>" if body else "/>"))

    def problem(self, message: str, source: str | None, line: int | None = None,
                column: int | None = None) -> None:
        """An error case named by where the input stops (``FILE:LINE:COL``, or the file), whole; the message
        is the error's."""
        self.errors += 1
        name = (source or "input") + (f":{line}:{column}" if line is not None and column is not None else "")
        where = f' file={quoteattr(source)}' + (f' line="{line}"' if line else "") if source else ""
        self.cases.append(f'  <testcase classname={quoteattr(source or "input")} name={quoteattr(name)}{where}>\n'
                          f'    <error message={quoteattr(message)}>{escape(message)}</error>\n  </testcase>')

    def close(self, summary: str) -> None:
        self.out.write('<?xml version="1.0" encoding="UTF-8"?>\n<testsuites>\n'
                       f'<testsuite name="trainadmit check" tests="{len(self.cases)}" failures="{self.failures}" '
                       f'errors="{self.errors}" skipped="{self.skipped}">\n')
        for case in self.cases:
            self.out.write(case + "\n")
        self.out.write(f"<system-out>{escape(summary)}</system-out>\n</testsuite>\n</testsuites>\n")


SARIF_LEVELS = {Action.deny: "error", Action.warn: "warning", Action.note: "note", Action.off: "none"}


class SarifOutput:
    def __init__(self, out: IO[str], options: Options | None = None):
        self.out, self.options = out, options or Options()
        self.results: list[dict[str, Any]] = []
        self.rules: dict[str, int] = {}
        self.notifications: list[dict[str, Any]] = []
        self.locator = Locator()

    def _rule_index(self, rule_id: str) -> int:
        if rule_id not in self.rules:
            self.rules[rule_id] = len(self.rules)
        return self.rules[rule_id]

    def add(self, item: Item, decision: Decision) -> None:
        if self.options.quiet and not self.options.failed(decision):
            return
        warnings = decision.warnings if (not self.options.quiet or self.options.strict) else []
        notes = decision.notes if not self.options.quiet else []  # SARIF's own level "note"
        for v in decision.denials + warnings + notes:
            what = identity(item, self.options.namespace)
            location: dict[str, Any] = {"logicalLocations": [{"fullyQualifiedName": f"{what}: {v.path}",
                                                              "kind": "member"}]}
            line = self.locator.line(item, v.path)
            if item.source != STDIN_NAME:
                physical: dict[str, Any] = {"artifactLocation": {"uri": _uri(item.source)}}
                if line:
                    physical["region"] = {"startLine": line}
                location["physicalLocation"] = physical
            message = f"{what}: {v.path}: {v.message}" + (f" (fix: {v.hint})" if v.hint else "")
            self.results.append({"ruleId": v.rule, "ruleIndex": self._rule_index(v.rule),
                                 "level": SARIF_LEVELS[v.action],
                                 "message": {"text": message}, "locations": [location]})

    def problem(self, message: str, source: str | None, line: int | None = None,
                column: int | None = None) -> None:
        note: dict[str, Any] = {"level": "error", "message": {"text": message}}
        if source and source != STDIN_NAME:
            physical: dict[str, Any] = {"artifactLocation": {"uri": _uri(source)}}
            if line is not None:
                physical["region"] = {"startLine": line, **({"startColumn": column} if column else {})}
            note["locations"] = [{"physicalLocation": physical}]
        self.notifications.append(note)

    def _rule(self, rule_id: str) -> dict[str, Any]:
        declared = RULES.get(rule_id)
        text = declared.summary if declared is not None else f"custom rule {rule_id.removeprefix('custom.')}"
        rule: dict[str, Any] = {"id": rule_id, "shortDescription": {"text": text}}
        if declared is not None:
            rule["defaultConfiguration"] = {"level": SARIF_LEVELS[declared.default]}
        return rule

    def close(self, summary: str) -> None:
        driver = {"name": "trainadmit", "version": __version__, "informationUri": INFORMATION_URI,
                  "rules": [self._rule(rule_id) for rule_id in self.rules]}
        invocation: dict[str, Any] = {"executionSuccessful": not self.notifications}
        if self.notifications:
            invocation["toolExecutionNotifications"] = self.notifications
        log = {"$schema": SARIF_SCHEMA, "version": "2.1.0",
               "runs": [{"tool": {"driver": driver}, "invocations": [invocation], "results": self.results}]}
        self.out.write(to_json(log) + "\n")


def lint_sarif(directory: str, findings: list, unreadable: bool) -> str:
    """`policy lint -o sarif`: a result per finding (level error or warning) at its file and line under the
    policy directory; a file that could not be read is a ``toolExecutionNotification`` and makes
    ``executionSuccessful`` false. Findings have no rule ids of their own: each result's ruleId is the
    finding's severity (``policy.error``, ``policy.warning``), and the field it is about is in the message."""
    results: list[dict[str, Any]] = []
    notifications: list[dict[str, Any]] = []
    rules: dict[str, int] = {}
    for f in findings:
        physical: dict[str, Any] = {"artifactLocation": {"uri": _uri(os.path.join(directory, f.file))
                                                         if f.file != directory else _uri(directory)}}
        if f.line:
            physical["region"] = {"startLine": f.line, **({"startColumn": f.column} if f.column else {})}
        text = (f"{f.field}: " if f.field else "") + f.message + (f" (fix: {f.fix})" if f.fix else "")
        if f.unreadable:
            notifications.append({"level": "error", "message": {"text": text}, "locations": [
                {"physicalLocation": physical}]})
            continue
        rule_id = f"policy.{f.severity}"
        index = rules.setdefault(rule_id, len(rules))
        results.append({"ruleId": rule_id, "ruleIndex": index, "level": "error" if f.is_error else "warning",
                        "message": {"text": text}, "locations": [{"physicalLocation": physical}]})
    texts = {"policy.error": "a policy problem that stops the policy from loading",
             "policy.warning": "a policy setting that loads but cannot be what was meant"}
    driver = {"name": "trainadmit policy lint", "version": __version__, "informationUri": INFORMATION_URI,
              "rules": [{"id": r, "shortDescription": {"text": texts[r]},
                         "defaultConfiguration": {"level": r.removeprefix("policy.")}} for r in rules]}
    invocation: dict[str, Any] = {"executionSuccessful": not unreadable}
    if notifications:
        invocation["toolExecutionNotifications"] = notifications
    log = {"$schema": SARIF_SCHEMA, "version": "2.1.0",
           "runs": [{"tool": {"driver": driver}, "invocations": [invocation], "results": results}]}
    return to_json(log) + "\n"
