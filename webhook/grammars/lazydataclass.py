"""``dataclass``, a drop-in for ``dataclasses.dataclass`` whose generated methods are compiled on first use.

Why: ``dataclasses`` compiles ``__init__``, ``__repr__``, ``__eq__``, ``__hash__`` and (frozen) ``__setattr__`` and
``__delattr__`` from source with one ``exec`` each when the class is created, about 0.5 ms per class; `trainadmit
check` on one manifest creates some 60 of them on import and calls few of their methods. Here ``dataclasses`` still
collects the fields (``fields``, ``replace``, ``asdict``, ``__match_args__`` and subclassing behave as before); each
method is a stub that, on its first call, compiles the very text ``dataclasses`` (Python 3.11) writes, puts it on the
class in its own place and runs it, so later calls cost what they did.

Invariant: a class made here behaves as ``dataclasses.dataclass`` makes it (the same ``__init__`` signature, repr,
equality, hash, frozenness and its error, ``__dataclass_params__``), which tests/engine/test_lazydataclass.py
compares class by class. Anything outside the common case (options other than ``frozen``, ``eq`` and ``slots``,
dataclass bases, a method of the generated set written in the class) is handed to ``dataclasses.dataclass``.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import Any

# the interpreter whose dataclasses' generated text _init, _repr, _eq, _hash and _frozen reproduce; on any other the
# decorator is dataclasses.dataclass itself (correct everywhere, fast where the text is known)
_REPRODUCED = (3, 11)
_GENERATED = ("__init__", "__repr__", "__eq__", "__setattr__", "__delattr__")


def dataclass(cls: type | None = None, /, *, frozen: bool = False, eq: bool = True, slots: bool = False,
              **options: Any) -> Any:
    """``dataclasses.dataclass(cls, frozen=frozen, eq=eq, slots=slots, **options)``, its methods made on first use
    where it can."""
    def wrap(cls: type) -> type:
        if options or sys.version_info[:2] != _REPRODUCED or not _plain(cls):
            return dataclasses.dataclass(cls, frozen=frozen, eq=eq, slots=slots, **options)
        return _lazy(cls, frozen, eq, slots)
    return wrap if cls is None else wrap(cls)


def _plain(cls: type) -> bool:
    """A class the fast path reproduces exactly: no dataclass among its bases, none of the methods ``dataclasses``
    would write (or refuse to overwrite) already in its body."""
    return (not any(hasattr(b, "__dataclass_fields__") for b in cls.__mro__[1:])
            and not any(name in cls.__dict__ for name in (*_GENERATED, "__hash__", "__getstate__", "__setstate__")))


def _lazy(cls: type, frozen: bool, eq: bool, slots: bool) -> type:
    documented = bool(cls.__dict__.get("__doc__"))
    written = cls  # the class as written: dataclasses' frozen methods name it, even once slots made a new one
    # the fields, __match_args__, abstract methods and (slots) the class with its __slots__, without compiling
    cls = dataclasses.dataclass(cls, init=False, repr=False, eq=False, slots=slots)
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    params.init = params.repr = True
    params.eq, params.frozen = eq, frozen
    all_fields = list(cls.__dataclass_fields__.values())  # type: ignore[attr-defined]
    stored = [f for f in all_fields if f._field_type is dataclasses._FIELD]  # type: ignore[attr-defined]
    _check_defaults(all_fields)
    _stub(cls, "__init__", lambda: _init(cls, all_fields, frozen, slots))
    _stub(cls, "__repr__", lambda: _repr(cls, [f for f in stored if f.repr]))
    if eq:
        compared = [f for f in stored if f.compare]
        _stub(cls, "__eq__", lambda: _eq(cls, compared))
    if frozen:
        names = "(" + ",".join(repr(f.name) for f in stored) + ",)" if stored else "()"
        _stub(cls, "__setattr__", lambda: _frozen(written, "__setattr__", names))
        _stub(cls, "__delattr__", lambda: _frozen(written, "__delattr__", names))
        if slots:  # what dataclasses gives a frozen class with slots, for pickle and copy
            cls.__getstate__ = _getstate  # type: ignore[attr-defined]
            cls.__setstate__ = _setstate  # type: ignore[attr-defined]
    if eq and frozen:
        _stub(cls, "__hash__", lambda: _hash(cls, [f for f in stored if (f.compare if f.hash is None else f.hash)]))
    elif eq:
        cls.__hash__ = None  # type: ignore[assignment]  # eq without frozen: unhashable, as dataclasses makes it
    if not documented:  # dataclasses' own docstring: the name and the signature
        cls.__doc__ = cls.__name__ + _signature(all_fields)
    return cls


def _check_defaults(all_fields: list) -> None:
    """The error dataclasses raises at class creation for a required parameter after one with a default."""
    seen_default = False
    for f in all_fields:
        if f.init and not f.kw_only and f._field_type is not dataclasses._FIELD_CLASSVAR:  # type: ignore[attr-defined]
            if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
                seen_default = True
            elif seen_default:
                raise TypeError(f"non-default argument {f.name!r} follows default argument")


def _getstate(self: Any) -> list:
    return [getattr(self, f.name) for f in dataclasses.fields(self)]


def _setstate(self: Any, state: list) -> None:
    for f, value in zip(dataclasses.fields(self), state, strict=False):
        object.__setattr__(self, f.name, value)


def _signature(all_fields: list) -> str:
    """``str(inspect.signature(cls))`` of the generated ``__init__``, without `` -> None``."""
    import inspect
    missing = dataclasses.MISSING
    params = []
    for f in all_fields:
        if not f.init or f._field_type is dataclasses._FIELD_CLASSVAR:  # type: ignore[attr-defined]
            continue
        default = (f.default if f.default is not missing else dataclasses._HAS_DEFAULT_FACTORY  # type: ignore[attr-defined]
                   if f.default_factory is not missing else inspect.Parameter.empty)
        kind = inspect.Parameter.KEYWORD_ONLY if f.kw_only else inspect.Parameter.POSITIONAL_OR_KEYWORD
        params.append((kind, inspect.Parameter(f.name, kind, default=default, annotation=f.type)))
    params.sort(key=lambda p: p[0])
    return str(inspect.Signature([p for _, p in params], return_annotation=None)).replace(" -> None", "")


def _stub(cls: type, name: str, build: Callable[[], Callable]) -> None:
    """Put on ``cls`` a ``name`` that builds the real method on its first call, installs it and calls it."""
    def first_call(*args: Any, **kwargs: Any) -> Any:
        method = build()
        method.__qualname__ = f"{cls.__qualname__}.{name}"
        setattr(cls, name, method)
        return method(*args, **kwargs)
    first_call.__name__ = name
    first_call.__qualname__ = f"{cls.__qualname__}.{name}"
    setattr(cls, name, first_call)


def _compile(cls: type, name: str, params: list[str], body: list[str], names: dict[str, Any],
             returns: bool = False) -> Callable:
    """The function ``dataclasses._create_fn`` makes of the same text, in the class's module's globals."""
    module = sys.modules.get(cls.__module__)
    module_globals = module.__dict__ if module is not None else {}
    if returns:
        names = {**names, "_return_type": None}
    text = "\n".join(f"  {line}" for line in body)
    text = f" def {name}({','.join(params)}){'->_return_type' if returns else ''}:\n{text}"
    text = f"def __create_fn__({', '.join(names)}):\n{text}\n return {name}"
    scope: dict[str, Any] = {}
    # the text dataclasses itself executes, made of field names; not under this module's `annotations` future
    exec(compile(text, "<string>", "exec", dont_inherit=True), module_globals, scope)
    return scope["__create_fn__"](**names)


def _init(cls: type, all_fields: list, frozen: bool, slots: bool) -> Callable:
    missing = dataclasses.MISSING
    fields = [f for f in all_fields if f._field_type in (dataclasses._FIELD, dataclasses._FIELD_INITVAR)]  # type: ignore[attr-defined]
    self_name = "__dataclass_self__" if "self" in cls.__dataclass_fields__ else "self"  # type: ignore[attr-defined]
    names: dict[str, Any] = {f"_type_{f.name}": f.type for f in fields}
    names.update({"MISSING": missing, "_HAS_DEFAULT_FACTORY": dataclasses._HAS_DEFAULT_FACTORY,  # type: ignore[attr-defined]
                  "__dataclass_builtins_object__": object})
    body = []
    for f in fields:
        default = f"_dflt_{f.name}"
        if f.default_factory is not missing:
            names[default] = f.default_factory
            value = f"{default}() if {f.name} is _HAS_DEFAULT_FACTORY else {f.name}" if f.init else f"{default}()"
        elif f.init:
            if f.default is not missing:
                names[default] = f.default
            value = f.name
        elif slots and f.default is not missing:  # a class with slots holds no default of its own
            names[default] = f.default
            value = default
        else:
            continue
        if f._field_type is dataclasses._FIELD_INITVAR:  # type: ignore[attr-defined]
            continue
        body.append(f"__dataclass_builtins_object__.__setattr__({self_name},{f.name!r},{value})" if frozen
                    else f"{self_name}.{f.name}={value}")
    if hasattr(cls, "__post_init__"):
        initvars = ",".join(f.name for f in fields if f._field_type is dataclasses._FIELD_INITVAR)  # type: ignore[attr-defined]
        body.append(f"{self_name}.__post_init__({initvars})")

    def param(f: dataclasses.Field) -> str:
        if f.default is not missing:
            return f"{f.name}:_type_{f.name}=_dflt_{f.name}"
        if f.default_factory is not missing:
            return f"{f.name}:_type_{f.name}=_HAS_DEFAULT_FACTORY"
        return f"{f.name}:_type_{f.name}"
    params = [self_name, *(param(f) for f in fields if f.init and not f.kw_only)]
    keyword = [param(f) for f in fields if f.init and f.kw_only]
    if keyword:
        params += ["*", *keyword]
    return _compile(cls, "__init__", params, body or ["pass"], names, returns=True)


def _repr(cls: type, fields: list) -> Callable:
    import reprlib
    shown = ", ".join(f"{f.name}={{self.{f.name}!r}}" for f in fields)
    text = f'return self.__class__.__qualname__ + f"({shown})"'
    return reprlib.recursive_repr()(_compile(cls, "__repr__", ["self"], [text], {}))


def _tuple(name: str, fields: list) -> str:
    return f"({','.join(f'{name}.{f.name}' for f in fields)},)" if fields else "()"


def _eq(cls: type, fields: list) -> Callable:
    return _compile(cls, "__eq__", ["self", "other"], [
        "if other.__class__ is self.__class__:", f" return {_tuple('self', fields)}=={_tuple('other', fields)}",
        "return NotImplemented"], {})


def _hash(cls: type, fields: list) -> Callable:
    return _compile(cls, "__hash__", ["self"], [f"return hash({_tuple('self', fields)})"], {})


def _frozen(cls: type, name: str, names: str) -> Callable:
    verb, params = ("assign to", "name, value") if name == "__setattr__" else ("delete", "name")
    return _compile(cls, name, ["self", *params.split(", ")], [
        f"if type(self) is cls or name in {names}:", f' raise FrozenInstanceError(f"cannot {verb} field {{name!r}}")',
        f"super(cls, self).{name}({params})"], {"cls": cls, "FrozenInstanceError": dataclasses.FrozenInstanceError})
