"""Load a directory of policy YAML into one immutable, hashed PolicySet.

Loading is all-or-nothing: every document of every file is parsed and checked, cross references
are resolved, and only then is a PolicySet built. A caller (the server's reload loop) therefore
never sees a half-applied policy; it keeps the previous set when this raises.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .policyset import PolicySet, SourceRef

try:  # libyaml's loader is ~10x faster than the pure-Python one; same results
    YAML_LOADER: Any = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - PyYAML built without libyaml
    YAML_LOADER = yaml.SafeLoader

POLICY_SUFFIXES = (".yaml", ".yml", ".json")
MAX_POLICY_FILE_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class PolicyProblem:
    file: str
    document: int | None
    field: str
    message: str
    line: int | None = None
    unreadable: bool = False  # the file could not be read or parsed at all (exit code 2 for lint)

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
        if self.document is not None:
            where += f" (document {self.document})"
        field = f" {self.field}:" if self.field else ""
        return f"{where}:{field} {self.message}"


class PolicyError(Exception):
    """The policy set cannot be loaded; ``problems`` names every file, document and field at fault."""

    def __init__(self, problems: list[PolicyProblem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


def _field_path(loc: tuple) -> str:
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
        raise PolicyError([PolicyProblem(display, None, "", f"file is larger than {MAX_POLICY_FILE_BYTES} bytes")])
    text = raw.decode("utf-8")
    try:
        return compose_documents(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else None
        raise PolicyError([PolicyProblem(display, None, "", f"not valid YAML: {exc}", line, unreadable=True)]) from exc


def policy_files(directory: Path) -> list[Path]:
    """Policy files of a directory in a stable order (hidden files and ..data symlink dirs skipped)."""
    return sorted(
        p for p in directory.rglob("*")
        if p.suffix in POLICY_SUFFIXES and p.is_file()
        and not any(part.startswith(".") for part in p.relative_to(directory).parts)
        and p.parent.name != "tests" and not p.name.endswith(".test.yaml")
    )


def load_policy_dir(directory: str | Path, builtin_rules: Collection[str]) -> PolicySet:
    """Parse, check and index every policy document under ``directory``.

    ``builtin_rules`` are the rule ids the engine declares (``trainadmit.engine.load_policy``
    passes them), so that an override of an unknown rule is an error at load time."""
    from pydantic import ValidationError  # here, not above: PolicyError and policy_files need no pydantic (cache)

    from .models import API_VERSION, DOCUMENT_KINDS, Platform

    root = Path(directory)
    if not root.is_dir():
        raise PolicyError([PolicyProblem(str(directory), None, "", "policy directory does not exist", unreadable=True)])
    problems: list[PolicyProblem] = []
    docs: dict[str, dict[str, object]] = {kind: {} for kind in DOCUMENT_KINDS}
    sources: dict[tuple[str, str], SourceRef] = {}
    digest = hashlib.sha256()
    files = policy_files(root)
    for path in files:
        display = str(path.relative_to(root))
        raw = path.read_bytes()
        digest.update(display.encode() + b"\0" + raw + b"\0")
        try:
            documents = _documents(raw, display)
        except (PolicyError, UnicodeDecodeError) as exc:
            if isinstance(exc, PolicyError):
                problems.extend(exc.problems)
            else:
                problems.append(PolicyProblem(display, None, "", "file is not UTF-8 text", unreadable=True))
            continue
        for index, data, node in documents:
            line = node.start_mark.line + 1
            if not isinstance(data, dict):
                problems.append(PolicyProblem(display, index, "", "a policy document must be a mapping", line))
                continue
            kind = data.get("kind")
            if data.get("apiVersion") != API_VERSION:
                problems.append(PolicyProblem(display, index, "apiVersion",
                                              f"must be {API_VERSION}, got {data.get('apiVersion')!r}",
                                              field_line(node, ("apiVersion",)) or line))
                continue
            model = DOCUMENT_KINDS.get(kind) if isinstance(kind, str) else None
            if model is None:
                problems.append(PolicyProblem(display, index, "kind",
                                              f"unknown kind {kind!r}; one of {', '.join(DOCUMENT_KINDS)}",
                                              field_line(node, ("kind",)) or line))
                continue
            try:
                doc = model.model_validate(data)
            except ValidationError as exc:
                for err in exc.errors():
                    loc = tuple(err["loc"])
                    problems.append(PolicyProblem(display, index, _field_path(loc), err["msg"],
                                                  field_line(node, loc) or line))
                continue
            name = doc.metadata.name  # type: ignore[attr-defined]
            if name in docs[kind]:
                first = sources[(kind, name)]
                problems.append(PolicyProblem(display, index, "metadata.name",
                                              f"{kind} {name!r} is already defined in {first.file}:{first.line}",
                                              field_line(node, ("metadata", "name")) or line))
                continue
            docs[kind][name] = doc
            sources[(kind, name)] = SourceRef(display, line, index)
    if not files:
        problems.append(PolicyProblem(str(directory), None, "", "no policy files (*.yaml, *.yml, *.json)",
                                      unreadable=True))
    platforms = list(docs["Platform"].values())
    if not problems and len(platforms) != 1:
        problems.append(PolicyProblem(str(directory), None, "kind",
                                      f"exactly one Platform document is required, found {len(platforms)}"))
    if problems:
        raise PolicyError(problems)
    platform = platforms[0]
    assert isinstance(platform, Platform)
    policy, semantic = PolicySet.build(
        builtin_rules,
        platform_doc=platform,
        pools={n: d.spec for n, d in docs["Pool"].items()},  # type: ignore[attr-defined]
        datasets={n: d.spec for n, d in docs["Dataset"].items()},  # type: ignore[attr-defined]
        checkpoints={n: d.spec for n, d in docs["CheckpointClass"].items()},  # type: ignore[attr-defined]
        tiers={n: d.spec for n, d in docs["PriorityTier"].items()},  # type: ignore[attr-defined]
        quotas={n: d.spec for n, d in docs["Quota"].items()},  # type: ignore[attr-defined]
        rules={n: d.spec for n, d in docs["Rule"].items()},  # type: ignore[attr-defined]
        sources=sources,
        generation=digest.hexdigest()[:12],
    )
    if semantic:
        raise PolicyError([PolicyProblem(s.file, s.document, field, msg, s.line) for s, field, msg in semantic])
    return policy

