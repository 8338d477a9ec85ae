"""How a server setting is given, declared once, next to the setting: its flag, its environment variable,
its default, its help text and its check.

Why one declaration: a setting written in several places (the command line, the environment the workers
read, gunicorn's configuration) drifts; a default changed in one place and not the others, or a value
checked in one and not the others, is a server that starts with what nobody asked for. Here the parser
(``add_arguments``) and the reader (``read``) walk the same dataclass fields, so a new setting is one field.

Precedence: a flag given on the command line, else its environment variable, else the default. Every
value given is checked before anything starts; a bad one is a ``SettingError`` whose message is one line
naming the flag or the variable and what it takes.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

OPTION = "trainadmit.option"
AUTO = "auto"  # flag / env derived from the field's name: --field-name, TRAINADMIT_FIELD_NAME


class SettingError(ValueError):
    """A setting given with a value it cannot take; the message names where it came from."""


@dataclass(frozen=True)
class Option:
    """Where one setting's value may come from, and how a given value is read and checked."""

    help: str
    parse: Callable[[str], Any]
    flag: str | None = None
    env: str | None = None
    short: str | None = None
    switch: bool = False  # a flag without a value (on when given); its variable takes 1/0, true/false
    repeat: bool = False  # a repeatable flag, collected into a tuple; its variable takes a comma list
    metavar: str | None = None


def setting(default: Any, *, help: str, parse: Callable[[str], Any] = str, flag: str | None = AUTO,
            env: str | None = None, short: str | None = None, switch: bool = False, repeat: bool = False,
            metavar: str | None = None) -> Any:
    """A dataclass field that is a server setting. ``flag``/``env``: ``AUTO`` (named after the field),
    a name, or None (not settable that way; the default for ``env``).

    Why variables are opt-in: the kubelet gives every container variables for the Services of its
    namespace, and for deploy/'s Service ``trainadmit`` they include ``TRAINADMIT_PORT=tcp://…`` and
    ``TRAINADMIT_SERVICE_HOST``; a setting read from such a name would be set by the cluster, not the user."""
    option = Option(help, parse, flag, env, short, switch, repeat, metavar)
    return dataclasses.field(default=default, metadata={OPTION: option})


def _flag(field: dataclasses.Field, option: Option) -> str | None:
    return "--" + field.name.replace("_", "-") if option.flag == AUTO else option.flag


def _env(field: dataclasses.Field, option: Option) -> str | None:
    return "TRAINADMIT_" + field.name.upper() if option.env == AUTO else option.env


def _dest(prefix: str, field: dataclasses.Field) -> str:
    return f"{prefix}{field.name}"


def _walk(cls: type, prefix: str = "") -> Iterator[tuple[str, dataclasses.Field, Option]]:
    """The settings of ``cls`` itself (its sections are fields without an option)."""
    for f in dataclasses.fields(cls):
        if OPTION in f.metadata:
            yield prefix, f, f.metadata[OPTION]


def _sections(cls: type) -> Iterator[tuple[str, type]]:
    """The settings dataclasses nested in ``cls``, as (field name, class)."""
    import typing

    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        sub = hints.get(f.name)
        if isinstance(sub, type) and dataclasses.is_dataclass(sub):
            yield f.name, sub


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, tuple):
        return ",".join(map(str, value)) or "none"
    return str(value)


def _help(field: dataclasses.Field, option: Option) -> str:
    env = _env(field, option)
    default = field.default
    parts = [] if default is None else [f"default: {_shown(default)}"]
    if env:
        parts.append(f"${env}")
    return f"{option.help} ({'; '.join(parts)})" if parts else option.help


def add_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    """One option per setting of ``cls`` (and its sections) that has a flag. Values are taken as text and
    checked by ``read``, so that a bad one is one line like every other startup error, not argparse's usage."""
    for prefix, cls_ in [("", cls), *((f"{name}.", sub) for name, sub in _sections(cls))]:
        for _, field, option in _walk(cls_, prefix):
            flag = _flag(field, option)
            if flag is None:
                continue
            names = [option.short, flag] if option.short else [flag]
            kwargs: dict[str, Any] = {"dest": _dest(prefix, field), "default": None, "help": _help(field, option)}
            if option.switch:
                kwargs["action"] = "store_true"
            else:
                kwargs["metavar"] = option.metavar or getattr(option.parse, "metavar", None) or field.name.upper()
                if option.repeat:
                    kwargs["action"] = "append"
            parser.add_argument(*names, **kwargs)


def _switch(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("", "0", "false", "no", "off"):
        return False
    raise ValueError("takes 1 or 0 (true or false)")


def _value(field: dataclasses.Field, option: Option, given: Any, environ: Mapping[str, str]) -> Any:
    flag, env = _flag(field, option), _env(field, option)
    if given is not None and given is not False:
        source, raw = flag, given
    elif env and env in environ:
        source, raw = f"${env}", environ[env]
    else:  # a default given as text is read like a given value (a relative path is made absolute)
        return option.parse(field.default) if isinstance(field.default, str) else field.default
    try:
        if option.switch:
            return True if source == flag else _switch(raw)
        if option.repeat:
            items = raw if isinstance(raw, list) else [x for x in raw.split(",") if x.strip()]
            return tuple(option.parse(x.strip() if isinstance(raw, str) else x) for x in items)
        return option.parse(raw)
    except ValueError as exc:
        raise SettingError(f"{source} {exc}, got {raw!r}" if str(exc) else f"{source}: invalid value {raw!r}") \
            from None


def read(cls: type, args: argparse.Namespace | None = None, environ: Mapping[str, str] | None = None) -> Any:
    """``cls`` (a settings dataclass, sections included) from the flags in ``args`` and ``environ``."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for name, sub in _sections(cls):
        values[name] = _read_section(sub, f"{name}.", args, environ)
    values.update(_read_section(cls, "", args, environ, as_dict=True))
    return cls(**values)


def _read_section(cls: type, prefix: str, args: argparse.Namespace | None, environ: Mapping[str, str],
                  as_dict: bool = False) -> Any:
    values = {}
    for _, field, option in _walk(cls, prefix):
        given = getattr(args, _dest(prefix, field), None) if args is not None else None
        values[field.name] = _value(field, option, given, environ)
    return values if as_dict else cls(**values)


def declared(cls: type) -> Iterator[tuple[str | None, str | None, Any, str]]:
    """(flag, environment variable, default, help) of every setting of ``cls`` and its sections."""
    for prefix, cls_ in [("", cls), *((f"{name}.", sub) for name, sub in _sections(cls))]:
        for _, field, option in _walk(cls_, prefix):
            yield _flag(field, option), _env(field, option), field.default, option.help


def sources(cls: type, field_name: str) -> str:
    """Where the setting ``field_name`` of ``cls`` is given, for messages: ``--namespace (or $POD_NAMESPACE)``."""
    field = next(f for f in dataclasses.fields(cls) if f.name == field_name)
    option = field.metadata[OPTION]
    flag, env = _flag(field, option), _env(field, option)
    return " or ".join(x for x in (flag, f"${env}" if env else None) if x)


# ---- value readers: each raises ValueError with what the setting takes -------------------------------------

def whole(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """A whole number within bounds."""
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            value = None
        if value is None or value < minimum or (maximum is not None and value > maximum):
            bounds = f"from {minimum} to {maximum}" if maximum is not None else f"of at least {minimum}"
            raise ValueError(f"takes a whole number {bounds}")
        return value
    parse.metavar = "N"  # type: ignore[attr-defined]
    return parse


def seconds(text: str) -> float:
    """A positive number of seconds."""
    try:
        value = float(text.strip())
    except ValueError:
        value = None
    if value is None or not value > 0 or value == float("inf"):
        raise ValueError("takes a number of seconds above 0")
    return value


seconds.metavar = "SECONDS"  # type: ignore[attr-defined]


def one_of(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"takes one of {', '.join(choices)}")
        return text
    parse.metavar = "{" + ",".join(choices) + "}"  # type: ignore[attr-defined]
    return parse


def path(text: str) -> str:
    """A file or directory, made absolute but not resolved: a Secret or ConfigMap mount swaps its ``..data``
    symlink on every update, and a path resolved once would keep naming the old, deleted files."""
    if not text:
        raise ValueError("takes a path")
    return os.path.abspath(text)


path.metavar = "PATH"  # type: ignore[attr-defined]


def name(text: str) -> str:
    if not text.strip():
        raise ValueError("takes a non-empty name")
    return text.strip()


name.metavar = "NAME"  # type: ignore[attr-defined]
