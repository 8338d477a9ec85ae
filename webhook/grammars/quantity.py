"""Kubernetes resource quantities ("8", "64Gi", "500m", "1e3") as exact Decimals.

Rules compare GPU counts, memory limits and /dev/shm sizes; doing that on floats or on the raw
strings gives wrong answers for "1Gi" vs "1024Mi", so every comparison goes through here.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from functools import lru_cache

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
            "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12),
            "P": Decimal(10**15), "E": Decimal(10**18)}
_RE = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")


class QuantityError(ValueError):
    """A value that Kubernetes would not accept as a resource quantity."""


def parse_quantity(value: object) -> Decimal:
    """Parse a quantity the way the apiserver does; raise QuantityError otherwise."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(str(value))
    if not isinstance(value, str):
        raise QuantityError(f"{value!r} is not a quantity")
    return _parse_str(value) if type(value) is str else _parse(value)


@lru_cache(maxsize=4096)
def _parse_str(value: str) -> Decimal:
    """``_parse``, memoized: a corpus repeats a few quantities ("8", "64Gi") in every container; a Decimal is
    immutable, and an error is raised again on every call (lru_cache keeps no exceptions)."""
    return _parse(value)


def _parse(value: str) -> Decimal:
    match = _RE.match(value.strip())
    if not match or len(value) > 64:
        raise QuantityError(f"{value!r} is not a quantity")
    number, suffix = match.group(1), match.group(2) or ""
    try:
        base = Decimal(number)
    except InvalidOperation as exc:  # pragma: no cover - the regex already filters
        raise QuantityError(f"{value!r} is not a quantity") from exc
    if suffix in _BINARY:
        return base * _BINARY[suffix]
    if suffix and suffix[0] in "eE":
        exponent = int(suffix[1:])
        if abs(exponent) > 30:
            raise QuantityError(f"{value!r} is out of range")
        return base * (Decimal(10) ** exponent)
    return base * _DECIMAL[suffix]


def as_count(value: object) -> int | None:
    """A whole-number quantity (GPUs, NICs) or None when the value is not a whole number."""
    if type(value) is int:
        return value if 0 <= value <= 10**9 else None
    if type(value) is str:
        return _count_str(value)
    return _count(value)


@lru_cache(maxsize=4096)
def _count_str(value: str) -> int | None:
    return _count(value)


def _count(value: object) -> int | None:
    try:
        q = parse_quantity(value)
    except QuantityError:
        return None
    if q != q.to_integral_value() or q < 0 or q > 10**9:
        return None
    return int(q)


def format_bytes(value: Decimal) -> str:
    """Render a byte count in the largest binary unit that divides it (for messages)."""
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = _BINARY[suffix]
        if value >= unit and value % unit == 0:
            return f"{int(value // unit)}{suffix}"
    return str(int(value))
