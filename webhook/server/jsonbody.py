"""Parsing an AdmissionReview body so that every malformed input is a 400, never a 500.

What Python's ``json`` does with the inputs in question (CPython 3.11):

* nesting: the C decoder recurses once per array/object and raises ``RecursionError`` (not a
  ``ValueError``) at about 1,000 levels; a body nested 900 deep parses, and then any recursive code
  after it (the engine's walks, CEL conversion, ``json.dumps``) can hit the same limit with the
  request's own frames on the stack. So the limit must be well under 1,000 and checked right after
  parsing. Kubernetes objects are shallow (a Job is about 15 levels; deep CRDs stay well under 64).
* lone UTF-16 surrogates: ``"\\ud800"`` decodes to a ``str`` holding U+D800, and bytes that
  UTF-8-encode a surrogate (``ED A0 80``) are accepted too (``bytes`` input is decoded with
  ``surrogatepass``). Such a string cannot be encoded as UTF-8, so the first thing that tries (CEL,
  the log line, a patch) fails: that was the engine-error 500. The kube-apiserver (Go) never sends
  one: its encoder writes UTF-8 and replaces invalid sequences with U+FFFD. Such a body does not
  come from an apiserver; it is refused as a bad request naming where the string is.
* ``NaN``/``Infinity`` are accepted by Python's ``json`` but are not JSON; refused too.

Cost: for a body with at most ``max_depth`` brackets (every small review) the depth check is two
``bytes.count`` calls and the surrogate check one regex scan in C; only bodies that could be too
deep, or do contain a ``\\uD8xx``-``\\uDFxx`` escape, get a walk of the parsed value.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 64

_SURROGATE_ESCAPE = re.compile(rb"\\[uU][dD][89a-fA-F]")  # may be a valid pair; checked after parsing


class JSONRejected(ValueError):
    """The body is not JSON this server accepts; ``message`` says why, for a 400 response."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def _no_constants(name: str) -> Any:
    raise JSONRejected(f"request body is not JSON: {name} is not a JSON value")


_DECODER = json.JSONDecoder(parse_constant=_no_constants)  # one instance: json.loads(**kw) builds one per call


def _too_deep(value: Any, max_depth: int) -> bool:
    """True when ``value`` nests more than ``max_depth`` arrays/objects (iterative: no recursion).

    Long lists are first checked in C (``set(map(type, ...))``): most are lists of scalars (args,
    command lines), and looking at each of their items in Python would cost more than the parse.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > max_depth:
            return True
        if type(node) is dict:
            children: Any = node.values()
        else:
            children = node
            if len(node) > 8:
                kinds = set(map(type, node))
                if dict not in kinds and list not in kinds:
                    continue
        for child in children:
            if type(child) is dict or type(child) is list:
                stack.append((child, depth + 1))
    return False


def _lone_surrogate_path(value: Any) -> str | None:
    """JSON-pointer-ish path of the first string (or key) holding a lone surrogate, else None."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        node, path = stack.pop()
        if type(node) is str:
            if not node.isascii():
                try:
                    node.encode("utf-8")
                except UnicodeEncodeError:
                    return path or "/"
        elif type(node) is dict:
            for k, v in node.items():
                try:
                    k.encode("utf-8")
                except UnicodeEncodeError:
                    return f"{path}/{k.encode('utf-8', 'backslashreplace').decode()} (the key)"
                stack.append((v, f"{path}/{k}"))
        elif type(node) is list:
            stack.extend((v, f"{path}/{i}") for i, v in enumerate(node))
    return None


def parse_json(body: bytes | bytearray, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads(body)``, but every input it should not accept raises :class:`JSONRejected`.

    Raises ``JSONRejected`` (a ``ValueError``) for: invalid JSON or UTF-8, nesting deeper than
    ``max_depth``, a lone UTF-16 surrogate (escaped or UTF-8-encoded), ``NaN``/``Infinity``.
    """
    try:
        # strict UTF-8, as RFC 8259 requires: json.loads(bytes) would also take UTF-16/32 and, through
        # "surrogatepass", bytes that encode a surrogate
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JSONRejected(f"request body is not valid UTF-8: {exc.reason} at byte {exc.start}") from None
    try:
        data = _DECODER.decode(text)
    except RecursionError:
        raise JSONRejected(f"request body nests arrays/objects deeper than {max_depth} levels") from None
    except JSONRejected:
        raise
    except ValueError as exc:  # JSONDecodeError, the int digit limit
        raise JSONRejected(f"request body is not JSON: {exc}") from None
    # every level of nesting needs an opening bracket: few brackets, no walk needed
    if body.count(b"[") + body.count(b"{") > max_depth and _too_deep(data, max_depth):
        raise JSONRejected(f"request body nests arrays/objects deeper than {max_depth} levels")
    if _SURROGATE_ESCAPE.search(body):
        where = _lone_surrogate_path(data)
        if where is not None:
            raise JSONRejected(f"request body has a lone UTF-16 surrogate in the string at {where}; "
                               "strings must be valid Unicode")
    return data
