"""Read manifests for `trainadmit check`: files, directories, stdin; multi-document YAML and JSON.

Each object keeps where it came from (file and document number) so that every line of output
points at something the user can open. Objects are read one at a time, as they are decided, so
that memory does not grow with the number of manifests (a directory of ten thousand Jobs, or
`kustomize build | trainadmit check -`). A path that does not exist is an InputError before
anything is read; a file that cannot be read or parsed is reported when it is reached, and the
CLI turns either into exit code 2: CI must not mistake "could not read" for "admitted".
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import yaml

from ..grammars.lazydataclass import dataclass
from ..grammars.syntax import json_problem, yaml_problem
from . import fastyaml

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
STDIN = "-"
STDIN_NAME = "<stdin>"  # how output names what came from stdin
_PEEK = 4096


class InputError(Exception):
    """An input that cannot be decided: one line naming the file (``FILE:LINE:COL: message`` when the position
    is known, as compilers print it, and ``line``/``column`` set)."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        super().__init__(message)
        self.line, self.column = line, column


@dataclass
class Item:
    source: str
    index: int
    obj: Any
    operation: str = "CREATE"
    namespace: str | None = None
    old: Any = None
    user: dict | None = None
    item: int | None = None  # the position in a List's items
    within: tuple[str | int, ...] = ()  # where the object sits in its document (a List's item, a review's object)

    @property
    def label(self) -> str:
        """``file#document`` (``file#document.items[i]`` for an item of a List): what output lines start with."""
        return f"{self.source}#{self.index}" + (f".items[{self.item}]" if self.item is not None else "")


def _expand(source: str, index: int, doc: Any, within: tuple[str | int, ...] = ()) -> list[Item]:
    """Lists become their items; an AdmissionReview becomes the object it carries.

    The items of a typed list the API returns (``JobList``) carry no kind or apiVersion of their
    own: they get the list's, as the apiserver's ``kubectl get -o json`` would have written them."""
    if isinstance(doc, dict) and doc.get("kind") == "AdmissionReview" and isinstance(doc.get("request"), dict):
        req = doc["request"]
        return [Item(source, index, req.get("object"), str(req.get("operation", "CREATE")),
                     req.get("namespace"), req.get("oldObject"), req.get("userInfo"),
                     within=(*within, "request", "object"))]
    if isinstance(doc, dict) and isinstance(doc.get("review"), dict):  # captured apiserver requests
        return _expand(source, index, doc["review"], (*within, "review"))
    kind = doc.get("kind") if isinstance(doc, dict) else None
    if isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list):
        item_kind, api_version = kind[: -len("List")], doc.get("apiVersion")
        out = []
        for i, obj in enumerate(doc["items"]):
            if isinstance(obj, dict) and item_kind and "kind" not in obj and "apiVersion" not in obj:
                obj = {"apiVersion": api_version, "kind": item_kind, **obj}
            out.append(Item(source, index, obj, item=i, within=(*within, "items", i)))
        return out
    return [Item(source, index, doc, within=within)]


def object_problem(item: Item) -> str | None:
    """Why the item is not a Kubernetes object the apiserver would take, or None.

    The apiserver refuses a document without a string ``apiVersion`` and ``kind``, and a non-mapping
    ``metadata``; such a document is an input problem (exit 2), not an object "left alone"."""
    obj = item.obj
    if obj is None and item.operation == "DELETE":  # a DELETE review carries only the old object
        return None
    if not isinstance(obj, dict):
        what = {list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean",
                type(None): "empty"}.get(type(obj), type(obj).__name__)
        return f"{item.label}: not a Kubernetes object ({what}, where a mapping with apiVersion and kind belongs)"
    missing = [key for key in ("apiVersion", "kind") if not isinstance(obj.get(key), str) or not obj.get(key)]
    if missing:
        return f"{item.label}: not a Kubernetes object: {' and '.join(missing)} missing or not a string"
    if "metadata" in obj and not isinstance(obj["metadata"], dict):
        return f"{item.label}: {obj['kind']}: metadata is not a mapping"
    return None


class _Resumed:
    """A text stream whose first characters were already read (to tell JSON from YAML)."""

    name = "<stdin>"  # what PyYAML's error marks call the stream

    def __init__(self, head: str, rest: IO[str]):
        self.head, self.rest = head, rest

    def read(self, size: int = -1) -> str:
        if self.head:
            out, self.head = self.head, ""
            return out
        return self.rest.read(size)


def _looks_like_json(text: str) -> bool:
    return text.lstrip().startswith(("{", "["))


def iter_documents(text: str | IO[str], source: str) -> Iterator[tuple[int, Any]]:
    """(document number, document) for each non-empty YAML document, or each element of JSON.

    ``text`` is the whole text, or a stream (stdin) that is read as the documents are needed.
    Raises InputError when the text is neither, after yielding the documents before the error."""
    if not isinstance(text, str):
        head = ""
        while not head.strip():
            chunk = text.read(_PEEK)
            if not chunk:
                break
            head += chunk
        text = head + text.read() if _looks_like_json(head) else _Resumed(head, text)  # type: ignore[assignment]
    json_error: json.JSONDecodeError | None = None
    if isinstance(text, str) and _looks_like_json(text):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:  # perhaps YAML's flow style ({a: 1}): YAML decides
            data, json_error = None, exc
        except RecursionError as exc:
            raise InputError(f"{source}: nested too deeply to be a Kubernetes object") from exc
        if data is not None:
            yield from enumerate(data if isinstance(data, list) else [data], start=1)
            return
    try:
        for i, doc in enumerate(fastyaml.load_all(text), start=1):
            if doc is not None:
                yield i, doc
    except yaml.YAMLError as exc:
        # written as JSON: where JSON stops is what to fix; else where YAML does
        language, problem = (("JSON", json_problem(json_error)) if json_error is not None
                             else ("YAML", yaml_problem(exc)))
        raise InputError(problem.at(source, f"not valid {language}: "), problem.line, problem.column) from exc
    except RecursionError as exc:
        raise InputError(f"{source}: nested too deeply to be a Kubernetes object") from exc


def manifest_files(paths: list[str]) -> list[str]:
    """Every file to read, in order (``-`` for stdin), directories expanded recursively; an
    InputError names a path that does not exist or a directory without manifests."""
    if not paths:
        raise InputError("no input: give FILE arguments (files or directories), or - to read stdin")
    out: list[str] = []
    for raw in paths:
        if raw == STDIN:
            out.append(STDIN)
            continue
        path = Path(raw)
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in MANIFEST_SUFFIXES)
            if not files:
                raise InputError(f"{raw}: no *.yaml, *.yml or *.json files")
            out.extend(str(f) for f in files)
        elif path.is_file():
            out.append(str(path))
        else:
            raise InputError(f"{raw}: no such file or directory")
    return out


def read_bytes(file: str) -> bytes:
    """The file's bytes, read with a system call per MiB: a run reads thousands of small manifests, and a
    buffered file object costs more than the read. Errors are ``open``'s (OSError, with its strerror)."""
    fd = os.open(file, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def read_text(file: str) -> str:
    """``Path(file).read_text(encoding="utf-8")``: the UTF-8 text with universal newlines (CRLF and a lone CR read
    as LF), a decoding error's offset the byte's in the file, from ``read_bytes``."""
    text = read_bytes(file).decode("utf-8")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


def _not_text(source: str, exc: UnicodeDecodeError) -> InputError:
    return InputError(f"{source}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}): "
                      "manifests are YAML or JSON")


def _documents_of(file: str) -> Iterator[tuple[str, int, Any]]:
    if file == STDIN:
        try:
            for i, doc in iter_documents(sys.stdin, STDIN_NAME):
                yield STDIN_NAME, i, doc
        except UnicodeDecodeError as exc:
            raise _not_text(STDIN_NAME, exc) from exc
        return
    try:
        text = read_text(file)
    except UnicodeDecodeError as exc:
        raise _not_text(file, exc) from exc
    except OSError as exc:
        raise InputError(f"{file}: cannot read: {exc.strerror or exc}") from exc
    for i, doc in iter_documents(text, file):
        yield file, i, doc


def iter_items(files: list[str], unreadable: Callable[[InputError], None]) -> Iterator[Item]:
    """The objects to decide on, one at a time: documents, with Lists and AdmissionReviews unpacked.

    A file that cannot be read or parsed goes to ``unreadable`` and the next file is read (the
    documents before a syntax error have been yielded by then); so does a document that is not a
    Kubernetes object (the next document is read), and a file with no document at all: an empty
    file or stdin says nothing was checked, which must not read as "admitted"."""
    for file in files:
        documents = 0
        try:
            for source, index, doc in _documents_of(file):
                documents += 1
                for item in _expand(source, index, doc):
                    problem = object_problem(item)
                    if problem is None:
                        yield item
                    else:
                        unreadable(InputError(problem))
            if not documents:
                unreadable(InputError(f"{STDIN_NAME if file == STDIN else file}: no Kubernetes objects (empty)"))
        except InputError as exc:
            unreadable(exc)


def read_documents(paths: list[str]) -> list[tuple[str, int, Any]]:
    """(source, document number, document) from files, directories (recursively) and - (stdin),
    all of them; the first problem is an InputError (for commands that need every document)."""
    return [doc for file in manifest_files(paths) for doc in _documents_of(file)]


def read_inputs(paths: list[str]) -> list[Item]:
    """Every object of ``paths`` (an InputError for the first problem)."""
    items = [item for source, index, doc in read_documents(paths) for item in _expand(source, index, doc)]
    for item in items:
        problem = object_problem(item)
        if problem is not None:
            raise InputError(problem)
    return items


def _identity(obj: Any) -> tuple[str, str, str, str] | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
        return None
    meta = obj["metadata"]
    return (str(obj.get("apiVersion")), str(obj.get("kind")), str(meta.get("namespace") or ""), str(meta.get("name")))


def old_objects(paths: list[str]) -> dict[tuple[str, str, str, str] | None, Any]:
    """`check --old FILE`: the stored objects before the change, by apiVersion, kind, namespace and
    name (read whole: they are the objects being changed, not a repository)."""
    return {_identity(old.obj): old.obj for old in read_inputs(paths)}


def as_update(item: Item, olds: dict[tuple[str, str, str, str] | None, Any]) -> Item:
    """The object as an UPDATE of the old object with the same apiVersion, kind, namespace and name
    (what the apiserver sends as ``oldObject``). An object without one is an InputError: deciding it
    as a CREATE would answer a different question."""
    key = _identity(item.obj)
    if key is None or key not in olds:
        what = f"{key[1]} {key[2] or '(no namespace)'}/{key[3]}" if key else "this document"
        raise InputError(f"{item.label}: --old has no object matching {what} (same apiVersion, "
                         "kind, namespace and name)")
    return Item(item.source, item.index, item.obj, "UPDATE", item.namespace, olds[key], item.user, item.item,
                item.within)
