"""``trainadmit.grammars.lazydataclass.dataclass`` makes the class ``dataclasses.dataclass`` makes, its methods
compiled on first use: each shape below is built both ways and compared on what callers can see (signature, repr,
equality, hash, frozenness and its error, defaults and factories, ``__post_init__``, ``replace``/``fields``,
``__match_args__``, ``__dataclass_params__``, subclassing), before and after the first call of each method."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import InitVar, field
from typing import ClassVar

import pytest

from trainadmit.grammars import lazydataclass


def _shapes(dataclass):
    @dataclass(frozen=True)
    class Point:
        """A frozen value."""
        x: int
        y: int = 2
        tags: tuple[str, ...] = ()
        seen: list[int] = field(default_factory=list, compare=False)
        hidden: str = field(default="h", repr=False)

    @dataclass
    class Box:
        """A mutable one, with a __post_init__ and a field outside __init__."""
        items: list[str] = field(default_factory=list)
        count: int = field(init=False, default=0)
        size: int = field(default=1, kw_only=True)

        def __post_init__(self) -> None:
            self.count = len(self.items)

    @dataclass(frozen=True)
    class Empty:
        """No fields."""

    @dataclass(frozen=True)
    class One:
        """One field, a self among them."""
        self: float

    @dataclass(frozen=True)
    class Derived(Point):
        """A dataclass base: handed to dataclasses."""
        z: int = 0

    @dataclass(frozen=True)
    class Nested:
        """Holds another."""
        point: Point
        extra: dict = field(default_factory=dict, hash=False)

    @dataclass(frozen=True, slots=True)
    class Slotted:
        """Slots, a default outside __init__."""
        a: int
        b: str = field(init=False, default="b")

    @dataclass(eq=False)
    class Undocumented:
        a: int
        limit: ClassVar[int] = 3
        scale: InitVar[int] = 1
        b: list = field(default_factory=list)
        c: str = field(default="c", kw_only=True)

        def __post_init__(self, scale: int) -> None:
            self.a *= scale

    return {"Point": Point, "Box": Box, "Empty": Empty, "One": One, "Derived": Derived, "Nested": Nested,
            "Slotted": Slotted, "Undocumented": Undocumented}


REAL, LAZY = _shapes(dataclasses.dataclass), _shapes(lazydataclass.dataclass)
ARGS = {"Point": ((1,), {"tags": ("a",)}), "Box": ((["a", "b"],), {"size": 3}), "Empty": ((), {}),
        "One": ((float("nan"),), {}), "Derived": ((1, 5), {"z": 3}), "Nested": ((None,), {"extra": {"k": 1}}),
        "Slotted": ((1,), {}), "Undocumented": ((2, 3), {"c": "d"})}


def _make(classes, name):
    args, kwargs = ARGS[name]
    if name == "Nested":
        args = (classes["Point"](1),)
    return classes[name](*args, **kwargs)


def _pickled(obj):
    """What copy's pickle protocol (__reduce_ex__, __getstate__/__setstate__) gives back."""
    import copy
    twin = copy.copy(obj)
    return repr([getattr(twin, f.name) for f in dataclasses.fields(twin)])


def _seen(obj) -> dict:
    """What a caller can observe of an instance."""
    cls = type(obj)
    copy = dataclasses.replace(obj, **({"scale": 1} if cls.__name__ == "Undocumented" else {}))
    out = {"repr": repr(obj).replace(".<locals>", ""), "eq_self": obj == obj, "eq_copy": obj == copy,
           "state": repr([getattr(obj, f.name) for f in dataclasses.fields(obj)]), "pickled": _pickled(obj),
           "ne_other": obj != object(), "fields": [(f.name, f.init, f.repr, f.compare) for f in dataclasses.fields(obj)],
           "asdict": dataclasses.asdict(obj) if cls.__name__ != "Nested" else None,
           "match_args": cls.__match_args__, "signature": str(inspect.signature(cls.__init__)),
           "params": repr(cls.__dataclass_params__), "hashable": cls.__hash__ is not None, "doc": cls.__doc__}
    if cls.__hash__ is not None:
        out["hash_eq"] = hash(obj) == hash(copy)
        out["hash_value"] = hash(obj) if cls.__name__ in ("Empty", "Point") else None
    for name in ("x", "other"):
        try:
            setattr(obj, name, 9)
            out[f"set {name}"] = "set"
        except (dataclasses.FrozenInstanceError, AttributeError, TypeError) as e:
            out[f"set {name}"] = f"{type(e).__name__}: {e}"
        try:
            delattr(obj, name)
            out[f"del {name}"] = "deleted"
        except (dataclasses.FrozenInstanceError, AttributeError, TypeError) as e:
            out[f"del {name}"] = f"{type(e).__name__}: {e}"
    return out


@pytest.mark.parametrize("name", sorted(ARGS))
def test_each_shape_is_what_dataclasses_makes(name):
    real, lazy = _make(REAL, name), _make(LAZY, name)
    assert _seen(lazy) == _seen(real)
    assert _seen(_make(LAZY, name)) == _seen(_make(REAL, name))  # and again, the methods now compiled


def test_the_methods_are_compiled_on_first_use_only():
    classes = _shapes(lazydataclass.dataclass)
    point = classes["Point"]
    first = point.__dict__["__init__"]
    p = point(1)
    assert point.__dict__["__init__"] is not first  # replaced by the compiled one ...
    assert point.__dict__["__init__"].__qualname__.endswith("Point.__init__")
    compiled = point.__dict__["__init__"]
    point(2)
    assert point.__dict__["__init__"] is compiled  # ... once
    assert p == point(1) and p != point(2) and {p, point(1)} == {p}


def test_defaults_and_factories_as_dataclasses_gives_them():
    box = LAZY["Box"]
    a, b = box(), box()
    assert a.items == [] and a.items is not b.items and a.count == 0 and a.size == 1
    assert box(["x"], size=2).count == 1 and box(["x"], size=2) == box(["x"], size=2)
    with pytest.raises(TypeError, match="positional"):
        box([], 3)  # size is keyword-only
    with pytest.raises(TypeError):
        LAZY["Point"]()  # x is required


def test_compares_only_with_instances_of_its_class():
    point = LAZY["Point"]
    assert point(1) != REAL["Point"](1)  # other class: NotImplemented both ways
    assert (point(1) == (1, 2, (), [], "h")) is False


def test_options_it_does_not_reproduce_go_to_dataclasses():
    @lazydataclass.dataclass(order=True)
    class Ordered:
        """Ordered."""
        a: int

    assert Ordered(1) < Ordered(2)


def test_a_required_field_after_a_default_is_refused_at_class_creation():
    for dataclass in (dataclasses.dataclass, lazydataclass.dataclass):
        with pytest.raises(TypeError, match="non-default argument 'b' follows default argument"):
            @dataclass(frozen=True)
            class Wrong:
                """Wrong."""
                a: int = 1
                b: int
