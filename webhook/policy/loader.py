"""Load a directory of policy YAML into one immutable, hashed PolicySet.

Loading is all-or-nothing: every document of every file is parsed and checked, cross references
are resolved, and only then is a PolicySet built. A caller (the server's reload loop) therefore
never sees a half-applied policy; it keeps the previous set when this raises.

Every problem of every file is collected in one pass (`inspect_policy_dir`): a document with a schema
error does not hide the next document, the Platform count or the cross references of the others, so
that `policy lint` reports all of them at once, sorted by file and line, each with a fix.
"""

from __future__ import annotations

import difflib
import hashlib
import types
import typing
from collections.abc import Collection
from dataclasses import field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from ..grammars.lazydataclass import dataclass
from ..grammars.syntax import yaml_problem
from .files import policy_files
from .injected import injected_value_problems
from .models import API_VERSION, DOCUMENT_KINDS, Metadata, Platform
from .policyset import PolicySet, SourceRef
from .problems import PolicyError, PolicyProblem

try:  # libyaml's loader is ~10x faster than the pure-Python one; same results
    YAML_LOADER: Any = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - PyYAML built without libyaml
    YAML_LOADER = yaml.SafeLoader

MAX_POLICY_FILE_BYTES = 4 * 1024 * 1024


def field_path(loc: tuple) -> str:
    """("spec", "levels", 0, "name") -> "spec.levels[0].name", as findings show a field."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def field_line(node, loc: tuple) -> int | None:
    """1-based line of a field inside a composed YAML document: the line of its key (of the item, for
    a list index), or of the deepest part of ``loc`` that exists."""
    line = None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            pair = next(((k, v) for k, v in node.value if getattr(k, "value", None) == part), None)
            if pair is None:
                return line
            key, node = pair
            line = key.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def compose_documents(text: str) -> list[tuple[int, object, object]]:
    """(document index, data, node) for each non-empty YAML document.

    This is what ``yaml.load_all`` does inside (compose a node, construct the data from it), with
    the node kept for its line marks, so that errors and `check --explain` can name a field's line."""
    loader = YAML_LOADER(text)
    out = []
    try:
        index = 0
        while loader.check_node():
            index += 1
            node = loader.get_node()
            if node is None:
                continue
            data = loader.construct_document(node)
            if data is not None:
                out.append((index, data, node))
    finally:
        loader.dispose()
    return out


def _documents(raw: bytes, display: str) -> list[tuple[int, object, object]]:
    if len(raw) > MAX_POLICY_FILE_BYTES:
        raise PolicyError([PolicyProblem(display, None, "", f"file is larger than {MAX_POLICY_FILE_BYTES} bytes",
                                         fix="split it into several files")])
    text = raw.decode("utf-8")
    try:
        return compose_documents(text)
    except yaml.YAMLError as exc:
        problem = yaml_problem(exc)  # FILE:LINE:COL, not the parser's "<unicode string>"
        raise PolicyError([PolicyProblem(display, None, "", f"not valid YAML: {problem.message}", problem.line,
                                         unreadable=True, fix="fix the YAML syntax at that line",
                                         column=problem.column)]) from exc


# ---- what to change: the fix that goes with a schema error -------------------------------------------

def _unwrap(tp: Any) -> Any:
    """The model or container inside Optional[...] / X | None / Annotated[...]."""
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            tp = next((a for a in args if isinstance(a, type) and issubclass(a, BaseModel)), args[0])
        else:
            return tp


def type_at(model: type[BaseModel], loc: tuple) -> Any:
    """The declared type at ``loc`` inside ``model`` (through models, lists and maps), or None."""
    tp: Any = model
    for part in loc:
        tp = _unwrap(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            info = tp.model_fields.get(part) if isinstance(part, str) else None
            if info is None:
                return None
            tp = info.annotation
        elif typing.get_origin(tp) in (list, tuple, dict):
            args = typing.get_args(tp)
            tp = args[-1] if args else Any
        else:
            return None
    return _unwrap(tp)


def _nearest_field(model: type[BaseModel], loc: tuple) -> tuple[str, Any] | None:
    """(name, FieldInfo) of the innermost model field on ``loc`` (a map key or list index is not one)."""
    for end in range(len(loc), 0, -1):
        parent = type_at(model, loc[:end - 1])
        part = loc[end - 1]
        if isinstance(parent, type) and issubclass(parent, BaseModel) and isinstance(part, str) \
                and part in parent.model_fields:
            return part, parent.model_fields[part]
    return None


def schema_fix(model: type[BaseModel], loc: tuple, error_type: str) -> str:
    """What to change for a pydantic error: the closest known field for an unknown one, else the field's
    own description, so that the fix is written once, next to the field. An empty ``loc`` is a check of the
    whole object (a model validator): its message says what is wrong, the model's reference says the rest."""
    if not loc:
        return f"see {model.__name__} in the Reference section of docs/policies.md"
    if error_type == "extra_forbidden" and loc:
        parent = type_at(model, loc[:-1])
        names = sorted(parent.model_fields) if isinstance(parent, type) and issubclass(parent, BaseModel) else []
        close = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.6)
        if close:
            return f"did you mean {close[0]}?"
        return f"remove it; the fields here are: {', '.join(names)}" if names else "remove it"
    found = _nearest_field(model, loc)
    name, description = (found[0], found[1].description or "") if found else (str(loc[-1]) if loc else "", "")
    if error_type == "missing":
        return f"add {name}" + (f": {description}" if description else "")
    if description:
        return f"{name}: {description}"
    return "see this field in the Reference section of docs/policies.md"


def schema_problems(model: type[BaseModel], exc: ValidationError, display: str, document: int | None, node: Any,
                    line: int, prefix: tuple = ()) -> list[PolicyProblem]:
    """One problem per pydantic error, at the line of its field, with a fix.

    ``prefix`` is where ``model`` sits in ``node`` when it validated part of a document (a suite's case):
    the field and its line are found with it, the fix within the model."""
    out = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        message = err["msg"].removeprefix("Value error, ")
        out.append(PolicyProblem(display, document, field_path((*prefix, *loc)), message,
                                 field_line(node, (*prefix, *loc)) or line, fix=schema_fix(model, loc, err["type"])))
    return out


# ---- the whole directory ---------------------------------------------------------------------------------

@dataclass
class LoadReport:
    """Everything loading found. ``policy`` is the set built from the documents that loaded: complete
    when there are no errors, partial otherwise (so that lint can still check what did load)."""

    directory: str
    policy: PolicySet | None
    problems: list[PolicyProblem]
    nodes: dict[tuple[str, str], tuple[str, int, Any]] = field(default_factory=dict)  # (kind, name) -> where

    @property
    def errors(self) -> list[PolicyProblem]:
        return [p for p in self.problems if p.is_error]

    @property
    def warnings(self) -> list[PolicyProblem]:
        return [p for p in self.problems if not p.is_error]

    @property
    def unreadable(self) -> bool:
        return any(p.unreadable for p in self.problems)

    def problem(self, kind: str, name: str, loc: tuple, message: str, fix: str, severity: str = "error",
                shown_as: str | None = None) -> PolicyProblem:
        """A problem of a loaded document's field (``(kind, name)`` in ``nodes``), at that field's line."""
        file, document, node = self.nodes[(kind, name)]
        return PolicyProblem(file, document, shown_as or field_path(loc), message,
                             field_line(node, loc) or node.start_mark.line + 1, severity=severity, fix=fix)


def sort_key(problem: PolicyProblem) -> tuple:
    return (problem.file, problem.line or 0, problem.document or 0, problem.field)


def _stand_in_platform() -> Platform:
    """Used to cross-check the other documents when the Platform is missing or invalid (its own error
    is reported); problems of the stand-in itself are not."""
    return Platform(apiVersion=API_VERSION, kind="Platform", metadata=Metadata(name="platform"))


@dataclass
class _Documents:
    """The documents of a directory as they are read: the ones that loaded, and what is known of the rest."""

    loaded: dict[str, dict[str, Any]] = field(default_factory=lambda: {kind: {} for kind in DOCUMENT_KINDS})
    unresolved: dict[str, set[str]] = field(default_factory=lambda: {kind: set() for kind in DOCUMENT_KINDS})
    sources: dict[tuple[str, str], SourceRef] = field(default_factory=dict)
    nodes: dict[tuple[str, str], tuple[str, int, Any]] = field(default_factory=dict)
    platforms_seen: list[tuple[str, int, int]] = field(default_factory=list)  # (file, document, line), valid or not

    def add(self, display: str, index: int, data: object, node: Any) -> list[PolicyProblem]:
        """The problems of one document; a document that loads is kept."""
        line = node.start_mark.line + 1
        if not isinstance(data, dict):
            return [PolicyProblem(display, index, "", "a policy document must be a mapping", line,
                                  fix="start the document with apiVersion, kind, metadata and spec")]
        kind = data.get("kind")
        if data.get("apiVersion") != API_VERSION:
            return [PolicyProblem(display, index, "apiVersion",
                                  f"must be {API_VERSION}, got {data.get('apiVersion')!r}",
                                  field_line(node, ("apiVersion",)) or line, fix=f"set apiVersion: {API_VERSION}")]
        model = DOCUMENT_KINDS.get(kind) if isinstance(kind, str) else None
        if model is None:
            if kind == "PolicyTest":
                fix = "policy tests go in files named *.test.yaml or under tests/"
            else:
                close = difflib.get_close_matches(str(kind), list(DOCUMENT_KINDS), n=1)
                fix = f"did you mean {close[0]}?" if close else f"use one of {', '.join(DOCUMENT_KINDS)}"
            return [PolicyProblem(display, index, "kind", f"unknown kind {kind!r}; one of {', '.join(DOCUMENT_KINDS)}",
                                  field_line(node, ("kind",)) or line, fix=fix)]
        if kind == "Platform":
            self.platforms_seen.append((display, index, line))
        out = [PolicyProblem(display, index, field_path(p.loc), p.message, field_line(node, p.loc) or line,
                             severity=p.severity, fix=p.fix) for p in injected_value_problems(kind, data)]
        metadata = data.get("metadata")
        raw_name = metadata.get("name") if isinstance(metadata, dict) else None
        try:
            doc = model.model_validate(data)
        except ValidationError as exc:
            if isinstance(raw_name, str):
                self.unresolved[kind].add(raw_name)
            return out + schema_problems(model, exc, display, index, node, line)
        name = doc.metadata.name  # type: ignore[attr-defined]
        if name in self.loaded[kind]:
            first = self.sources[(kind, name)]
            return [*out, PolicyProblem(display, index, "metadata.name",
                                        f"{kind} {name!r} is already defined in {first.file}:{first.line}",
                                        field_line(node, ("metadata", "name")) or line, fix="rename one of them")]
        self.loaded[kind][name] = doc
        self.sources[(kind, name)] = SourceRef(display, line, index)
        self.nodes[(kind, name)] = (display, index, node)
        return out

    def specs(self, kind: str) -> dict[str, Any]:
        return {name: doc.spec for name, doc in self.loaded[kind].items()}


def inspect_policy_dir(directory: str | Path, builtin_rules: Collection[str],
                       handled_kinds: Collection[str] = ()) -> LoadReport:
    """Parse and check every policy document under ``directory`` and report every problem.

    ``builtin_rules`` and ``handled_kinds`` are the rule ids and workload kinds the engine declares
    (``trainadmit.engine.load_policy`` passes them), so that an override of an unknown rule, or a
    custom rule for a kind never decided, is an error at load time."""
    root = Path(directory)
    if not root.is_dir():
        return LoadReport(str(directory), None, [PolicyProblem(str(directory), None, "", "policy directory does not "
                                                               "exist", unreadable=True, fix="check the path")])
    problems: list[PolicyProblem] = []
    docs = _Documents()
    digest = hashlib.sha256()
    files = policy_files(root)
    for path in files:
        display = str(path.relative_to(root))
        try:
            raw = path.read_bytes()
        except OSError as exc:  # permissions, a mount gone bad: a problem like any other, never a traceback
            problems.append(PolicyProblem(display, None, "", f"cannot read the file: {exc.strerror or exc}",
                                          unreadable=True, fix="check the file's permissions and the volume"))
            continue
        digest.update(display.encode() + b"\0" + raw + b"\0")
        try:
            documents = _documents(raw, display)
        except (PolicyError, UnicodeDecodeError) as exc:
            if isinstance(exc, PolicyError):
                problems.extend(exc.problems)
            else:
                problems.append(PolicyProblem(display, None, "", "file is not UTF-8 text", unreadable=True,
                                              fix="save the file as UTF-8"))
            continue
        for index, data, node in documents:
            problems.extend(docs.add(display, index, data, node))
    if not files:
        problems.append(PolicyProblem(str(directory), None, "", "no policy files (*.yaml, *.yml, *.json)",
                                      unreadable=True, fix="`trainadmit policy init DIR` writes a minimal policy set"))
    elif len(docs.platforms_seen) != 1:
        problems.extend(_platform_count(str(directory), docs.platforms_seen))
    platforms = list(docs.loaded["Platform"].values())
    platform = platforms[0] if len(platforms) == 1 and len(docs.platforms_seen) == 1 else _stand_in_platform()
    policy, cross = PolicySet.build(
        builtin_rules,
        unresolved=docs.unresolved,
        handled_kinds=handled_kinds,
        platform_doc=platform,
        pools=docs.specs("Pool"),
        datasets=docs.specs("Dataset"),
        checkpoints=docs.specs("CheckpointClass"),
        tiers=docs.specs("PriorityTier"),
        quotas=docs.specs("Quota"),
        rules=docs.specs("Rule"),
        sources=docs.sources,
        generation=digest.hexdigest()[:12],
    )
    report = LoadReport(str(directory), policy, problems, docs.nodes)
    for (kind, name), loc, message, fix in cross:
        if (kind, name) in docs.nodes:  # not the stand-in Platform, whose own error is reported
            problems.append(report.problem(kind, name, loc, message, fix))
    problems.sort(key=sort_key)
    return report


def _platform_count(directory: str, seen: list[tuple[str, int, int]]) -> list[PolicyProblem]:
    message = f"exactly one Platform document is required, found {len(seen)}"
    if not seen:
        return [PolicyProblem(directory, None, "kind", message,
                              fix="add a Platform document (`trainadmit policy init DIR` writes a minimal one)")]
    first = seen[0]
    return [PolicyProblem(file, index, "kind", f"{message}; the first is in {first[0]}:{first[2]}", line,
                          fix="keep one Platform: merge the others into it") for file, index, line in seen[1:]]


def load_policy_dir(directory: str | Path, builtin_rules: Collection[str],
                    handled_kinds: Collection[str] = ()) -> PolicySet:
    """The policy set of ``directory``; PolicyError naming every error (warnings do not stop loading)."""
    report = inspect_policy_dir(directory, builtin_rules, handled_kinds)
    if report.errors or report.policy is None:
        raise PolicyError(report.errors)
    return report.policy
