"""Saved API objects read one at a time: what `trainadmit audit` reads, in memory that does not grow with them.

`kubectl get jobs,pytorchjobs -A -o json` writes one JSON ``List`` whose ``items`` hold every object: a
cluster's worth in one document, which ``json.load`` would hold whole. Here such a file is read in
chunks and each item is decoded on its own, so reading 10,000 workloads holds about one of them (and
one chunk of the file). Also read: a JSON array, a single object, JSON lines (``.jsonl``, a recorded
watch stream whose lines are ``{"type", "object"}`` events, or plain objects), and YAML (one object or
List per document: a YAML List is one document, read whole; use ``-o json`` for large clusters).

Items of a typed list (``JobList`` as the apiserver returns it) carry no apiVersion and kind: they
get the list's. A file that is neither JSON nor YAML is an ``InputError`` naming the file, after the
objects before the error have been given.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import IO, Any

import yaml

from . import fastyaml
from .inputs import InputError

CHUNK = 1 << 20
_WS = " \t\r\n"
_DECODER = json.JSONDecoder()


class _Buffer:
    """A text stream read in chunks, with a position; ``need`` reads more when fewer characters are left."""

    def __init__(self, stream: IO[str]):
        self.stream = stream
        self.text = ""
        self.pos = 0
        self.eof = False

    def more(self) -> bool:
        if self.eof:
            return False
        chunk = self.stream.read(CHUNK)
        if not chunk:
            self.eof = True
            return False
        self.text = self.text[self.pos:] + chunk
        self.pos = 0
        return True

    def skip_ws(self) -> str:
        """The next character that is not white space ("" at the end)."""
        while True:
            while self.pos < len(self.text) and self.text[self.pos] in _WS:
                self.pos += 1
            if self.pos < len(self.text):
                return self.text[self.pos]
            if not self.more():
                return ""

    def expect(self, char: str) -> None:
        if self.skip_ws() != char:
            raise ValueError(f"expected {char!r} at character {self.pos}")
        self.pos += 1

    def value(self) -> Any:
        """Decode the JSON value that starts here, reading more of the stream until it is complete."""
        self.skip_ws()
        while True:
            try:
                value, end = _DECODER.raw_decode(self.text, self.pos)
            except json.JSONDecodeError as exc:
                if not self.more():  # the whole rest is here and it does not parse
                    raise ValueError(str(exc)) from exc
                continue
            # a number (or true/false/null) may continue in the next chunk
            if end == len(self.text) and not isinstance(value, dict | list | str) and self.more():
                continue
            self.pos = end
            return value


def _array(buf: _Buffer) -> Iterator[Any]:
    buf.expect("[")
    if buf.skip_ws() == "]":
        buf.pos += 1
        return
    while True:
        yield buf.value()
        char = buf.skip_ws()
        buf.pos += 1
        if char == "]":
            return
        if char != ",":
            raise ValueError(f"expected ',' or ']' at character {buf.pos - 1}")


def _typed(item: Any, api_version: str | None, kind: str | None) -> Any:
    if isinstance(item, dict) and "kind" not in item and kind:
        return {**item, "kind": kind, "apiVersion": api_version}
    return item


def _object(buf: _Buffer) -> Iterator[Any]:
    """A top-level JSON object: a List's items one by one, or the object itself."""
    buf.expect("{")
    head: dict[str, Any] = {}
    items = False
    if buf.skip_ws() == "}":
        buf.pos += 1
        yield head
        return
    while True:
        key = buf.value()
        buf.expect(":")
        if key == "items" and buf.skip_ws() == "[":
            items = True
            list_kind = str(head.get("kind", ""))
            item_kind = list_kind[: -len("List")] if list_kind.endswith("List") and list_kind != "List" else None
            for item in _array(buf):
                yield _typed(item, head.get("apiVersion"), item_kind)
        else:
            head[key] = buf.value()
        char = buf.skip_ws()
        buf.pos += 1
        if char == "}":
            break
        if char != ",":
            raise ValueError(f"expected ',' or '}}' at character {buf.pos - 1}")
    if not items:
        if isinstance(head.get("items"), list):  # items that were not a list opener were read whole
            for item in head["items"]:
                yield item
        else:
            yield head


def _json(stream: IO[str]) -> Iterator[Any]:
    buf = _Buffer(stream)
    while True:
        char = buf.skip_ws()
        if char == "":
            return
        if char == "[":
            yield from _array(buf)
        elif char == "{":
            yield from _object(buf)
        else:
            raise ValueError(f"unexpected {char!r} at character {buf.pos}")


def _jsonl(stream: IO[str]) -> Iterator[Any]:
    for number, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"line {number}: {exc}") from exc
        if isinstance(event, dict) and "type" in event and isinstance(event.get("object"), dict):
            if event["type"] == "DELETED":
                continue
            event = event["object"]
        yield event


def _yaml(text: IO[str]) -> Iterator[Any]:
    for doc in fastyaml.load_all(text):
        if isinstance(doc, dict) and str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
            list_kind = str(doc.get("kind"))
            item_kind = list_kind[: -len("List")] if list_kind != "List" else None
            for item in doc["items"]:
                yield _typed(item, doc.get("apiVersion"), item_kind)
        elif doc is not None:
            yield doc


def _looks_like_json(stream: IO[str]) -> tuple[bool, str]:
    head = ""
    while not head.strip():
        chunk = stream.read(4096)
        if not chunk:
            break
        head += chunk
    return head.lstrip().startswith(("{", "[")), head


class _Rewound:
    def __init__(self, head: str, rest: IO[str]):
        self.head, self.rest, self.name = head, rest, getattr(rest, "name", "<input>")

    def read(self, size: int = -1) -> str:
        if self.head:
            out, self.head = self.head, ""
            return out
        return self.rest.read(size)


def iter_objects(path: str) -> Iterator[Any]:
    """Every object of a saved file, one at a time (List items unpacked); InputError when unreadable."""
    try:
        stream = open(path, encoding="utf-8")  # noqa: SIM115 - closed below, as the generator ends
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc}") from exc
    try:
        if path.endswith(".jsonl"):
            yield from _jsonl(stream)
            return
        is_json, head = _looks_like_json(stream)
        rewound: Any = _Rewound(head, stream)
        yield from (_json(rewound) if is_json else _yaml(rewound))
    except (ValueError, yaml.YAMLError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not valid JSON or YAML: {exc}") from exc
    except RecursionError as exc:  # nesting no API object has (the decoders recurse per level)
        raise InputError(f"{path}: nested too deeply to be a Kubernetes object") from exc
    finally:
        stream.close()
