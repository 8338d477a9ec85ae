"""Policy test suites as strict models: a typo'd key is an error with its file and line, never a test
that silently asserts nothing.

A suite (``*.test.yaml`` anywhere under the policy directory, or any YAML under ``tests/``; other
documents under ``tests/`` are fixture data the cases may reference):

    apiVersion: trainadmit.io/v1alpha1
    kind: PolicyTest
    metadata: {name: bundled}
    cases:
    - name: a 4-node H100 job is admitted with a gang
      file: jobs/llama-pretrain.yaml            # or object: {...}, or review: {AdmissionReview}
      namespace: team-nlp                       # optional; operation, phase, userInfo likewise
      expect:
        allowed: true                           # required: the decision
        denials: []                             # exact set of denying rule ids
        warnings: [custom.owner-label]          # exact set of warning rule ids
        messages: ["whole nodes"]               # regexes, each must match some violation
        fields: {spec.scheduling.schedulingPolicy.gang.minCount: 4}   # in the mutated object
        mutated: {file: llama.mutated.yaml}     # or inline: the whole mutated object

Cases are validated one by one, so that one bad case does not hide the mistakes of the others, and
files are resolved relative to the suite. Both `policy test` and `policy lint` read suites here.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..grammars.syntax import yaml_problem
from ..policy.files import SUITE_SUFFIXES, is_suite_path
from ..policy.loader import PolicyProblem, compose_documents, field_line, field_path, schema_problems, sort_key
from ..policy.models import API_VERSION

SUITE_KIND = "PolicyTest"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Expect(_Strict):
    """What a case asserts about the decision: at least whether the object is allowed."""

    allowed: bool = Field(description="The decision: true admitted (warnings allowed), false denied. Required: a "
                          "case that asserts nothing passes whatever the policy does.")
    matched: bool | None = Field(None, description="Whether the policy applies at all (false: the object is left "
                                 "alone).")
    denials: list[str] | None = Field(None, description="Exactly these denying rule ids ([] for none).")
    warnings: list[str] | None = Field(None, description="Exactly these warning rule ids ([] for none).")
    notes: list[str] | None = Field(None, description="Exactly these note rule ids ([] for none): what the platform "
                                    "makes happen, which --strict does not fail on.")
    messages: list[str] = Field(default_factory=list, description="Regular expressions; each must match the text "
                                "of some violation.")
    fields: dict[str, Any] = Field(default_factory=dict, description="Dotted paths in the mutated object and their "
                                   "expected values; quantities compare as quantities (1 equals \"1\").")
    mutated: dict[str, Any] | None = Field(None, description="The whole mutated object, or {file: name} of a YAML "
                                           "file next to the suite.")

    @field_validator("messages")
    @classmethod
    def _regexes(cls, v: list[str]) -> list[str]:
        bad = []
        for pattern in v:
            try:
                re.compile(pattern)
            except re.error as exc:
                bad.append(f"/{pattern}/: {exc}")
        if bad:
            raise ValueError("not a regular expression: " + "; ".join(bad))
        return v


class Case(_Strict):
    """One object sent through the engine (exactly one of object, file, review) and what must come out."""

    name: str = Field(min_length=1, description="What the case shows; printed with PASS or FAIL.")
    object: dict[str, Any] | None = Field(None, description="The object, as a user writes it.")
    file: str | None = Field(None, description="A YAML file with the object, relative to the suite.")
    document: int = Field(1, ge=1, description="Which document of file (1 = the first).")
    review: dict[str, Any] | None = Field(None, description="A whole AdmissionReview, as the apiserver sends it.")
    namespace: str | None = Field(None, description="Namespace when the object names none.")
    operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"] | None = Field(None, description="Default CREATE.")
    oldObject: dict[str, Any] | None = Field(None, description="The object before an UPDATE.")
    userInfo: dict[str, Any] | None = Field(None, description="The requesting user (exemptUsers, exemptGroups).")
    phase: Literal["mutate", "validate"] = Field("mutate", description="Which webhook decides.")
    expect: Expect = Field(description="What the decision must be.")

    @model_validator(mode="after")
    def _one_object(self) -> Case:
        given = [k for k in ("object", "file", "review") if getattr(self, k) is not None]
        if len(given) != 1:
            found = ", ".join(given) or "none"
            raise ValueError(f"a case sends exactly one object: set one of object, file or review (found {found})")
        if self.review is not None and not isinstance(self.review.get("request"), dict):
            raise ValueError("review must be an AdmissionReview with a request")
        return self


class SuiteMetadata(_Strict):
    name: str = Field(min_length=1, description="Shown with each case's result.")


class SuiteHeader(_Strict):
    """A suite without its cases, which are checked one by one."""

    apiVersion: Literal["trainadmit.io/v1alpha1"]
    kind: Literal["PolicyTest"]
    metadata: SuiteMetadata
    cases: list[Any] = Field(min_length=1, description="At least one case: a suite without cases tests nothing.")


@dataclass(frozen=True)
class LoadedCase:
    case: Case
    base: Path  # files are relative to the suite


@dataclass(frozen=True)
class Suite:
    display: str  # "tests/b200.test.yaml:b200"
    cases: tuple[LoadedCase, ...]


def discover(directory: Path) -> list[Path]:
    """Suite files (``policy.files.is_suite_path``: the same rule keeps them out of the policy)."""
    return sorted(p for p in directory.rglob("*") if is_suite_path(p.relative_to(directory)) and p.is_file())


def _file_problems(case: Case, base: Path, root: Path, display: str, document: int, node: Any, prefix: tuple,
                   line: int) -> list[PolicyProblem]:
    """A file a case names must exist; outside the policy directory it breaks when the directory is copied."""
    out = []
    refs = [(("file",), case.file)]
    mutated = case.expect.mutated
    if mutated is not None and set(mutated) == {"file"}:
        refs.append((("expect", "mutated", "file"), mutated["file"]))
    for loc, name in refs:
        if not isinstance(name, str):
            continue
        path = (base / name).resolve()
        at = field_line(node, (*prefix, *loc)) or line
        if not path.is_file():
            out.append(PolicyProblem(display, document, field_path((*prefix, *loc)), f"file {name} does not exist",
                                     at, fix=f"paths are relative to the suite's folder ({base})"))
        elif not path.is_relative_to(root.resolve()):
            out.append(PolicyProblem(display, document, field_path((*prefix, *loc)),
                                     f"{name} is outside the policy directory: a copy of the directory breaks",
                                     at, severity="warning",
                                     fix="copy the file next to the suite (tests/ holds fixture data) or inline it "
                                     "as object:"))
    return out


def _rule_problems(case: Case, known_rules: Collection[str], display: str, document: int, node: Any,
                   prefix: tuple, line: int) -> list[PolicyProblem]:
    out = []
    for key in ("denials", "warnings", "notes"):
        for i, rule_id in enumerate(getattr(case.expect, key) or []):
            if rule_id in known_rules:
                continue
            loc = (*prefix, "expect", key, i)
            close = difflib.get_close_matches(rule_id, sorted(known_rules), n=1)
            out.append(PolicyProblem(display, document, field_path(loc), f"unknown rule id {rule_id!r}",
                                     field_line(node, loc) or line,
                                     fix=f"did you mean {close[0]}?" if close else
                                     "see the rule table in docs/policies.md (custom rules are custom.<name>)"))
    return out


def load_suites(root: Path, known_rules: Collection[str]) -> tuple[list[Suite], list[PolicyProblem]]:
    """Every suite under ``root`` with its valid cases, and every problem of every suite file.

    A case with an error is left out of its suite (the error reports it); warnings leave it in."""
    suites: list[Suite] = []
    problems: list[PolicyProblem] = []
    for path in discover(root):
        display = str(path.relative_to(root))
        strict = path.name.endswith(SUITE_SUFFIXES)
        try:
            documents = compose_documents(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError:
            problems.append(PolicyProblem(display, None, "", "file is not UTF-8 text", unreadable=True,
                                          fix="save the file as UTF-8"))
            continue
        except yaml.YAMLError as exc:
            problem = yaml_problem(exc)
            problems.append(PolicyProblem(display, None, "", f"not valid YAML: {problem.message}", problem.line,
                                          unreadable=True, fix="fix the YAML syntax at that line",
                                          column=problem.column))
            continue
        for index, data, node in documents:
            line = node.start_mark.line + 1
            kind = data.get("kind") if isinstance(data, dict) else None
            if kind != SUITE_KIND:
                ours = isinstance(data, dict) and data.get("apiVersion") == API_VERSION
                if strict or ours:  # other YAML under tests/ is fixture data for the cases
                    problems.append(PolicyProblem(display, index, "kind", f"expected kind {SUITE_KIND}, got {kind!r}",
                                                  field_line(node, ("kind",)) or line,
                                                  fix=f"set kind: {SUITE_KIND}" if ours or strict else ""))
                continue
            try:
                header = SuiteHeader.model_validate(data)
            except ValidationError as exc:
                problems.extend(schema_problems(SuiteHeader, exc, display, index, node, line))
                continue
            cases = []
            for i, raw in enumerate(header.cases):
                prefix = ("cases", i)
                case_line = field_line(node, prefix) or line
                try:
                    case = Case.model_validate(raw)
                except ValidationError as exc:
                    problems.extend(schema_problems(Case, exc, display, index, node, case_line, prefix))
                    continue
                found = (_file_problems(case, path.parent, root, display, index, node, prefix, case_line)
                         + _rule_problems(case, known_rules, display, index, node, prefix, case_line))
                problems.extend(found)
                if not any(p.is_error for p in found):
                    cases.append(LoadedCase(case, path.parent))
            suites.append(Suite(f"{display}:{header.metadata.name}", tuple(cases)))
    return suites, sorted(problems, key=sort_key)
