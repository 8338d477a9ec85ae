"""``json.dumps(value, indent=2, ensure_ascii=False)``, the same text, in about a third of the time.

Why: with ``indent`` set, the standard library encodes in pure Python through nested generators
(its C encoder knows no indentation), and for `check -o json` that was most of the cost of the
output. Here dicts, lists, str, int, bool, None and float are written straight into one list of
parts, strings through the standard library's own C string encoder; a value holding anything else
(a key that is not a str, a str or int subclass, a reference cycle) is given to ``json.dumps`` whole,
so its result and its errors are the standard library's. ``tests/cli/test_check_fastjson.py`` compares
the two on decisions and on generated data.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring  # the C encoder for ensure_ascii=False, when built
from typing import Any

INDENT = "  "


class _Other(Exception):
    """A value json.dumps must encode itself."""


def _float(value: float) -> str:
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    return float.__repr__(value)


def _write(value: Any, newline: str, out: list[str]) -> None:
    kind = type(value)
    if kind is str:
        out.append(encode_basestring(value))
    elif kind is dict:
        if not value:
            out.append("{}")
            return
        inner = newline + INDENT
        separator = "{" + inner
        for key, item in value.items():
            if type(key) is not str:
                raise _Other
            out.append(separator)
            out.append(encode_basestring(key))
            out.append(": ")
            _write(item, inner, out)
            separator = "," + inner
        out.append(newline + "}")
    elif kind is list:
        if not value:
            out.append("[]")
            return
        inner = newline + INDENT
        separator = "[" + inner
        for item in value:
            out.append(separator)
            _write(item, inner, out)
            separator = "," + inner
        out.append(newline + "]")
    elif kind is int:
        out.append(int.__repr__(value))
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif value is None:
        out.append("null")
    elif kind is float:
        out.append(_float(value))
    else:
        raise _Other


def dumps(value: Any) -> str:
    """``json.dumps(value, indent=2, ensure_ascii=False)``."""
    out: list[str] = []
    try:
        _write(value, "\n", out)
    except (_Other, RecursionError):
        return json.dumps(value, indent=2, ensure_ascii=False)
    return "".join(out)
