"""CEL for custom rules and match conditions, with the Kubernetes functions rules over resources need.

Implementation: ``cel-expr-python`` (Google's cel-cpp runtime). Chosen by measurement
(``bench/cel_candidates.py``): it was the only candidate that evaluated every Kubernetes-style test
expression correctly (the string extension library included) and the fastest by a wide margin.

Expressions are compiled once, when the policy loads; a syntax error is a policy error with the
file and field. Evaluation cost is bounded before evaluation: CEL has no loops besides
comprehensions (``all``, ``exists``, ``exists_one``, ``map``, ``filter``) over collections that
exist in the input, so an expression with comprehensions nested ``d`` deep costs at most about
``size(largest collection) ** d`` steps per comprehension. The runtime offers no iteration limit,
so the engine computes that bound from the actual object and refuses to evaluate an expression
whose bound exceeds the budget, with an error that says so.

The library keeps every call of a Python host function (``quantity()`` and the other Kubernetes
functions below): cel-expr-python 0.1.3 never releases the argument tuple it builds for the call, the
Python values it converts the arguments to, or the value the function returns. Nothing else of an
evaluation is kept (neither the activation nor the object). ``kept_bytes()`` counts what has been kept
in this process, so that a server process can be replaced before it adds up; docs/server.md, "Hardening".
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from .lazydataclass import dataclass
from .quantity import QuantityError, parse_quantity

COST_BUDGET = 1_000_000  # comparable to the apiserver's per-expression budget for admission CEL
MAX_NESTING = 3

_MACROS = re.compile(r"\.\s*(all|exists_one|exists|map|filter)\s*\(")
_STRINGS = re.compile(r"'''.*?'''|\"\"\".*?\"\"\"|'(?:\\.|[^'\\])*'|\"(?:\\.|[^\"\\])*\"", re.S)


class CelError(ValueError):
    pass


def comprehension_depth(expression: str) -> int:
    """Deepest nesting of comprehension macros (string literals ignored)."""
    text = _STRINGS.sub("''", expression)
    depth_at: list[int] = []  # paren depth at which each open comprehension started
    paren = best = 0
    i = 0
    while i < len(text):
        m = _MACROS.match(text, i)
        if m:
            paren += 1
            depth_at.append(paren)
            best = max(best, len(depth_at))
            i = m.end()
            continue
        ch = text[i]
        if ch == "(":
            paren += 1
        elif ch == ")":
            if depth_at and depth_at[-1] == paren:
                depth_at.pop()
            paren -= 1
        i += 1
    return best


def _q(value: str) -> Decimal:
    try:
        return parse_quantity(value)
    except QuantityError as exc:
        raise ValueError(f"quantity({value!r}): {exc}") from exc


class _KeptCalls:
    """Bytes of host-function calls the CEL library has kept in this process (see the module's docstring).

    Per call: the argument tuple (40 + 8 per argument, with its garbage-collector header), each argument
    as the function received it, and the result unless it is one of its arguments, except values Python
    never allocates (None, a bool, a small int, a one-letter str). Counted only when ``calibrate`` found
    that the library keeps a call: a release of the library that fixes it makes the count zero, not wrong."""

    def __init__(self) -> None:
        self.enabled = False
        self._bytes = 0
        self._lock = threading.Lock()

    def calibrate(self, cel) -> None:
        """Call a probe host function once and see whether the library still holds its result."""
        results: list[str] = []

        def probe(value: str) -> str:
            results.append(value + "!")  # a new object: only we and, if it keeps calls, the library hold it
            return results[-1]

        t = cel.Type
        env = cel.NewEnv(functions=[cel.FunctionDecl("probe", [cel.Overload("probe_string", t.STRING, [t.STRING],
                                                                            False, probe)])])
        env.compile("probe('x') != ''").eval(data={})
        self.enabled = bool(results) and sys.getrefcount(results[0]) > 2  # our list, getrefcount's argument

    def add(self, args: tuple, result: object) -> None:
        if not self.enabled:
            return
        size = 40 + 8 * len(args) + sum(sys.getsizeof(a) for a in args if not _shared(a))
        if not (_shared(result) or any(result is a for a in args)):
            size += sys.getsizeof(result)
        with self._lock:
            self._bytes += size

    @property
    def bytes(self) -> int:
        return self._bytes


def _shared(value: object) -> bool:
    """A value Python hands out without allocating: None, a bool, a small int, an empty or one-letter str."""
    kind = type(value)
    return (value is None or kind is bool or (kind is int and -5 <= value <= 256)  # type: ignore[operator]
            or (kind is str and len(value) < 2))  # type: ignore[arg-type]


_KEPT = _KeptCalls()


def kept_bytes() -> int:
    """Bytes the CEL library has kept of host-function calls in this process (0 if it keeps none)."""
    return _KEPT.bytes


def _kept(impl: Callable[..., Any]) -> Callable[..., Any]:
    """``impl`` as a host function whose calls are counted in ``kept_bytes`` (a call that raises keeps its
    arguments too)."""

    def call(*args: Any) -> Any:
        result = None
        try:
            result = impl(*args)
            return result
        finally:
            _KEPT.add(args, result)

    return call


def _functions(cel) -> list:
    t = cel.Type

    def overload(overload_id: str, result: Any, params: list, member: bool, impl: Callable[..., Any]) -> Any:
        return cel.Overload(overload_id, result, params, member, _kept(impl))

    return [
        cel.FunctionDecl("quantity", [overload("quantity_string", t.STRING, [t.STRING], False, _quantity)]),
        cel.FunctionDecl("isQuantity", [overload("isQuantity_string", t.BOOL, [t.STRING], False, _is_quantity)]),
        cel.FunctionDecl("isGreaterThan", [overload("string_isGreaterThan_string", t.BOOL, [t.STRING, t.STRING],
                                                    True, lambda a, b: _q(a) > _q(b))]),
        cel.FunctionDecl("isLessThan", [overload("string_isLessThan_string", t.BOOL, [t.STRING, t.STRING],
                                                 True, lambda a, b: _q(a) < _q(b))]),
        cel.FunctionDecl("compareTo", [overload("string_compareTo_string", t.INT, [t.STRING, t.STRING], True,
                                                lambda a, b: (_q(a) > _q(b)) - (_q(a) < _q(b)))]),
        cel.FunctionDecl("asInteger", [overload("string_asInteger", t.INT, [t.STRING], True, _as_int)]),
        cel.FunctionDecl("asApproximateFloat", [overload("string_asApproximateFloat", t.DOUBLE, [t.STRING], True,
                                                         lambda a: float(_q(a)))]),
    ]


def _quantity(value: str) -> str:
    """quantity('8Gi') checks the text and keeps it; the comparison methods parse it exactly."""
    _q(value)
    return value


def _is_quantity(value: str) -> bool:
    try:
        parse_quantity(value)
    except QuantityError:
        return False
    return True


def _as_int(value: str) -> int:
    q = _q(value)
    if q != q.to_integral_value():
        raise ValueError(f"quantity {value!r} is not an integer")
    return int(q)


_ENV = None


def _env():
    global _ENV
    if _ENV is None:
        from cel_expr_python import cel
        from cel_expr_python.ext import ext_strings

        _KEPT.calibrate(cel)
        _ENV = (cel, cel.NewEnv(variables={name: cel.Type.DYN for name in ("object", "oldObject", "request", "params",
                                                                                 "variables")},
                                extensions=[ext_strings.ExtStrings()], functions=_functions(cel)))
    return _ENV


@dataclass
class Program:
    source: str
    depth: int
    _compiled: Any

    def cost_bound(self, largest: int) -> int:
        return max(largest, 1) ** self.depth * max(len(self.source), 1) if self.depth else len(self.source)

    def evaluate(self, data: dict | Any, largest: int) -> Any:
        """The result, or raise CelError (cost bound exceeded, or an evaluation error).

        ``data`` is a dict of variables or an Activation from ``activation()``; with several
        expressions over the same request, one Activation converts the object only once.
        """
        bound = self.cost_bound(largest)
        if bound > COST_BUDGET:
            raise CelError(f"estimated cost {bound:,} exceeds the budget of {COST_BUDGET:,} "
                           f"(comprehensions nested {self.depth} deep over a collection of {largest} items)")
        cel, _ = _env()
        value = self._compiled.eval(data=data) if isinstance(data, dict) else self._compiled.eval(data)
        if value.type() == cel.Type.ERROR:
            raise CelError(str(value.plain_value()))
        return value.plain_value()


def activation(data: dict) -> Any:
    """Convert the variables to CEL values once, for several evaluations."""
    _, env = _env()
    return env.Activation(data)


def compile_expression(source: str) -> Program:
    if not isinstance(source, str) or not source.strip():
        raise CelError("expression is empty")
    depth = comprehension_depth(source)
    if depth > MAX_NESTING:
        raise CelError(f"comprehensions are nested {depth} deep; at most {MAX_NESTING} are allowed")
    _, env = _env()
    try:
        compiled = env.compile(source)
    except RuntimeError as exc:
        message = str(exc).replace("INVALID_ARGUMENT: ", "").replace(" [INVALID_ARGUMENT]", "")
        raise CelError(message.strip()) from exc
    return Program(source, depth, compiled)


def largest_collection(value: Any) -> int:
    """Size of the largest list or map anywhere in ``value`` (a string counts as length / 64).

    Recursion depth is bounded by the object's nesting, which the apiserver's decoder limits."""
    kind = type(value)
    if kind is str:
        return len(value) // 64 if len(value) > 64 else 0
    if kind is not dict and kind is not list:
        return 0
    best = len(value)
    for item in value.values() if kind is dict else value:
        t = type(item)
        if t is dict or t is list or (t is str and len(item) > 64):
            size = largest_collection(item)
            if size > best:
                best = size
    return best


_OBJECT = re.compile(r"\bobject\b((?:\s*\.\s*[A-Za-z_][A-Za-z0-9_]*)*)(\s*\()?")
_REQUEST = re.compile(r"\brequest\b(\s*\.\s*[A-Za-z_][A-Za-z0-9_]*)?")
_OLD = re.compile(r"\boldObject\b")


def object_reads(sources: list[str]) -> tuple[tuple[tuple[str, ...], ...], tuple[str, ...]] | None:
    """The object paths CEL expressions read (``object.a.b`` chains, up to a method call) and the
    ``request`` fields they read ("*" for the whole request); None when an expression uses the whole
    object (or oldObject) some other way.

    A rule can only look at what its expressions name, so these subtrees bound what its result depends
    on (``server.decisions`` keys remembered results by them) and what its comprehensions can iterate (the
    cost bound measures them, not the whole object)."""
    paths: set[tuple[str, ...]] = set()
    request_fields: set[str] = set()
    for source in sources:
        text = re.sub(r"'[^']*'|\"[^\"]*\"", "''", source)  # string literals name no field
        if _OLD.search(text):
            return None
        for m in _REQUEST.finditer(text):
            request_fields.add(m.group(1).strip(" .") if m.group(1) else "*")
        for m in _OBJECT.finditer(text):
            chain = [p.strip() for p in m.group(1).split(".") if p.strip()]
            if m.group(2) and chain:
                chain.pop()  # object.x.all(...): the call is on x
            if not chain:
                return None
            paths.add(tuple(chain))
    # a path inside another read path adds nothing
    kept = tuple(sorted(p for p in paths if not any(q != p and p[: len(q)] == q for q in paths)))
    return kept, tuple(sorted(request_fields))
