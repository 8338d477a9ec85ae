"""Read manifests for `trainadmit check`: files, directories, stdin; multi-document YAML and JSON.

Each object keeps where it came from (file and document number) so that every line of output
points at something the user can open. A file that cannot be read or parsed is an InputError,
which the CLI turns into exit code 2: CI must not mistake "could not read" for "admitted".
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

try:  # the C loader is ~10x faster; fall back to the pure-Python one where libyaml is absent
    _Loader: Any = yaml.CSafeLoader
except AttributeError:  # pragma: no cover
    _Loader = yaml.SafeLoader

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


class InputError(Exception):
    pass


@dataclass
class Item:
    source: str
    index: int
    obj: Any
    operation: str = "CREATE"
    namespace: str | None = None
    old: Any = None
    user: dict | None = None


def _expand(source: str, index: int, doc: Any) -> list[Item]:
    """Lists become their items; an AdmissionReview becomes the object it carries."""
    if isinstance(doc, dict) and doc.get("kind") == "AdmissionReview" and isinstance(doc.get("request"), dict):
        req = doc["request"]
        return [Item(source, index, req.get("object"), str(req.get("operation", "CREATE")),
                     req.get("namespace"), req.get("oldObject"), req.get("userInfo"))]
    if isinstance(doc, dict) and isinstance(doc.get("review"), dict):  # captured apiserver requests
        return _expand(source, index, doc["review"])
    if isinstance(doc, dict) and str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
        return [Item(source, index, item) for item in doc["items"]]
    return [Item(source, index, doc)]


def parse_documents(text: str, source: str) -> list[tuple[int, Any]]:
    """(document number, document) for each non-empty YAML document, or each element of JSON."""
    if text.lstrip().startswith(("{", "[")):
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            data = None
        if data is not None:
            return list(enumerate(data if isinstance(data, list) else [data], start=1))
    try:
        return [(i, doc) for i, doc in enumerate(yaml.load_all(text, Loader=_Loader), start=1) if doc is not None]
    except yaml.YAMLError as exc:
        raise InputError(f"{source}: not valid YAML or JSON: {exc}") from exc


def parse_text(text: str, source: str) -> list[Item]:
    return [item for index, doc in parse_documents(text, source) for item in _expand(source, index, doc)]


def read_documents(paths: list[str]) -> list[tuple[str, int, Any]]:
    """(source, document number, document) from files, directories (recursively) and - (stdin)."""
    out: list[tuple[str, int, Any]] = []
    for raw in paths or ["-"]:
        if raw == "-":
            out.extend(("<stdin>", i, d) for i, d in parse_documents(sys.stdin.read(), "<stdin>"))
            continue
        path = Path(raw)
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in MANIFEST_SUFFIXES)
            if not files:
                raise InputError(f"{raw}: no *.yaml, *.yml or *.json files")
        elif path.is_file():
            files = [path]
        else:
            raise InputError(f"{raw}: no such file or directory")
        for file in files:
            try:
                text = file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise InputError(f"{file}: cannot read: {exc}") from exc
            out.extend((str(file), i, d) for i, d in parse_documents(text, str(file)))
    return out


def read_inputs(paths: list[str]) -> list[Item]:
    """The objects to decide on: documents, with Lists and AdmissionReviews unpacked."""
    return [item for source, index, doc in read_documents(paths) for item in _expand(source, index, doc)]


def _identity(obj: Any) -> tuple[str, str, str, str] | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
        return None
    meta = obj["metadata"]
    return (str(obj.get("apiVersion")), str(obj.get("kind")), str(meta.get("namespace") or ""), str(meta.get("name")))


def with_old(items: list[Item], olds: list[Item]) -> list[Item]:
    """`check --old FILE`: each object becomes an UPDATE of the old object with the same apiVersion, kind,
    namespace and name (what the apiserver sends as ``oldObject``). An object without one is an error:
    deciding it as a CREATE would answer a different question."""
    by_identity = {_identity(old.obj): old.obj for old in olds}
    out = []
    for item in items:
        key = _identity(item.obj)
        if key is None or key not in by_identity:
            what = f"{key[1]} {key[2] or '(no namespace)'}/{key[3]}" if key else "this document"
            raise InputError(f"{item.source}#{item.index}: --old has no object matching {what} (same apiVersion, "
                             "kind, namespace and name)")
        out.append(Item(item.source, item.index, item.obj, "UPDATE", item.namespace, by_identity[key], item.user))
    return out
