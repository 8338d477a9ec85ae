"""A validated policy set kept for the next process, so that `trainadmit check` runs without pydantic.

Why: importing pydantic and building the policy models costs about 150 ms, more than three times
everything else a one-manifest `check` does (a pre-commit hook or a per-file CI step pays it on
every call). The first load of a policy directory validates it in full, as always, and saves the
values of the validated documents as plain records; a later process with the same inputs rebuilds
the same ``PolicySet`` from them (derived look-ups and CEL are computed again, by this process's
code) and never imports pydantic.

Never stale: the file name is a SHA-256 over everything the validated set depends on: the bytes
of every policy file (the loader's own file list, with the paths relative to the directory), the
source of every module a policy's validation can read: ``grammars``, ``policy`` and ``engine``
(the models, the loader, the engine facts a policy is checked against: rule ids, handled kinds;
``tests/project/test_layout.py`` keeps those layers from importing anything above them), pydantic's
version, Python's version and this format.
Any changed byte is a miss, and a miss loads and validates the directory with the caller's loader,
as if there were no cache. Nothing is keyed on paths or times.

Never code: the file is JSON (records, enums and anything else that is not a plain JSON value are
tagged objects whose only key starts with NUL; a user's such key is escaped the same way); reading
it can build records and the enums of trainadmit's own ``vocab`` and ``grammars``, nothing else.
A file that is not the user's own, or that others may write, is ignored; so is one that does not
decode.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Any

from . import vocab
from .files import policy_files
from .policyset import PolicySet, SourceRef

FORMAT = 3
KEEP_FILES = 16  # cache files kept (one per policy/code version); the oldest beyond go
_CODE_ROOT = Path(__file__).resolve().parent.parent  # the trainadmit package
_CODE_LAYERS = ("grammars", "policy", "engine")  # what engine.load_policy can import (layers 0-2)
_MODELS_MODULE = f"{__package__}.models"
_SETS = ("pools", "datasets", "checkpoints", "tiers", "quotas", "rules")


class Record:
    """A validated policy model's values as attributes, immutable: what the engine reads of it.

    Fields, and the values of the model's properties (computed by the model when the record was
    made), are plain attributes; methods come from the ``vocab`` mixins the model itself uses."""

    _model = "Record"
    _mixins: tuple[str, ...] = ()

    def __init__(self, values: dict[str, Any]):
        self.__dict__.update(values)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{self._model} is immutable")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(other) == vars(self)

    __hash__ = None  # type: ignore[assignment]  # as unhashable as the models (they hold dicts)

    def __repr__(self) -> str:
        return f"{self._model}({', '.join(f'{k}={v!r}' for k, v in vars(self).items())})"


_CLASSES: dict[tuple[str, tuple[str, ...]], type[Record]] = {}


def _record(model: str, mixins: tuple[str, ...], values: dict[str, Any]) -> Record:
    cls = _CLASSES.get((model, mixins))
    if cls is None:
        bases = tuple(getattr(vocab, name, None) for name in mixins)
        if not all(isinstance(b, type) and b.__module__ == vocab.__name__ and not issubclass(b, vocab.StrEnum)
                   for b in bases):
            raise ValueError(f"not vocab mixins: {mixins}")
        cls = _CLASSES[(model, mixins)] = type(model, (*bases, Record), {"_model": model, "_mixins": mixins})
    return cls(values)


# enums a policy holds: the engine's words (vocab) and the grammars' (link layers, preflight checks);
# the engine compares them by identity, so a record carries the members themselves
_ENUM_MODULES = (vocab.__name__, __name__.rsplit(".", 2)[0] + ".grammars.")
_RECORD, _ENUM, _DICT, _TUPLE = "\0record", "\0enum", "\0dict", "\0tuple"


def _encode(value: Any) -> Any:
    """A JSON value for a record, enum or plain value; TypeError for anything else (then no cache)."""
    if isinstance(value, Record):
        return {_RECORD: [value._model, list(value._mixins), {k: _encode(v) for k, v in vars(value).items()}]}
    if isinstance(value, enum.Enum):
        cls = type(value)
        if _enum_class(cls.__module__, cls.__qualname__) is not cls:
            raise TypeError(f"{cls.__module__}.{cls.__qualname__} is not an enum of the policy's words")
        return {_ENUM: [cls.__module__, cls.__qualname__, value.value]}
    if isinstance(value, dict):
        if all(type(k) is str and not k.startswith("\0") for k in value):
            return {k: _encode(v) for k, v in value.items()}
        return {_DICT: [[_encode(k), _encode(v)] for k, v in value.items()]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, tuple):
        return {_TUPLE: [_encode(v) for v in value]}
    if value is None or type(value) in (str, int, float, bool):
        return value
    raise TypeError(f"a {type(value).__name__} in a policy cannot be cached")


def _enum_class(module: str, name: str) -> type[enum.Enum] | None:
    """The enum ``module.name`` if it is one of the policy's words (vocab, grammars), else None."""
    if module != _ENUM_MODULES[0] and not module.startswith(_ENUM_MODULES[1]):
        return None
    cls = getattr(sys.modules.get(module) or importlib.import_module(module), name, None)
    return cls if isinstance(cls, type) and issubclass(cls, enum.Enum) else None


def _decode(obj: dict[str, Any]) -> Any:
    """``json.loads`` object hook, the inverse of ``_encode`` (inner values arrive decoded)."""
    if len(obj) == 1:
        key = next(iter(obj))
        if key.startswith("\0"):
            (value,) = obj.values()
            if key == _RECORD:
                model, mixins, values = value
                return _record(model, tuple(mixins), values)
            if key == _ENUM:
                module, name, member = value
                cls = _enum_class(module, name)
                if cls is None:
                    raise ValueError(f"{module}.{name} is not an enum of the policy's words")
                return cls(member)
            if key == _DICT:
                return {k: v for k, v in value}
            if key == _TUPLE:
                return tuple(value)
            raise ValueError(f"unknown tag {key!r}")
    return obj


# ---- what the validated models become ----------------------------------------------------------

def model_behaviour(cls: type) -> tuple[dict[str, Any], list[str]]:
    """The members a policy model defines besides its fields and validators: (properties, methods).

    Properties are computed into the record; methods must come from a ``vocab`` mixin (the record
    has those) or the record will not have them (``tests/policy/test_check_policy_cache.py`` lists them)."""
    fields = set(getattr(cls, "model_fields", {}))
    validators = set()
    decorators = getattr(cls, "__pydantic_decorators__", None)
    if decorators is not None:
        for group in ("validators", "field_validators", "root_validators", "field_serializers",
                      "model_serializers", "model_validators", "computed_fields"):
            validators.update(getattr(decorators, group, {}))
    properties: dict[str, Any] = {}
    methods: list[str] = []
    for klass in reversed(cls.__mro__):
        if klass.__module__ != _MODELS_MODULE:
            continue
        for name, member in vars(klass).items():
            if name.startswith("_") or name in fields or name in validators or name == "model_config":
                continue
            if isinstance(member, (property, cached_property)):
                properties[name] = member
            elif callable(member) or isinstance(member, (classmethod, staticmethod)):
                methods.append(name)
    return properties, methods


def _mixins(cls: type) -> tuple[str, ...]:
    return tuple(k.__name__ for k in cls.__mro__ if k.__module__ == vocab.__name__ and k is not object)


def to_record(value: Any) -> Any:
    """A validated model (and everything in it) as records, enums and builtin containers."""
    cls = type(value)
    if hasattr(cls, "model_fields"):
        properties, _ = model_behaviour(cls)
        values = {name: to_record(getattr(value, name)) for name in cls.model_fields}
        values.update({name: to_record(getattr(value, name)) for name in properties})
        return _record(cls.__name__, _mixins(cls), values)
    if isinstance(value, dict):
        return {k: to_record(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_record(v) for v in value]
    if isinstance(value, tuple):
        return tuple(to_record(v) for v in value)
    return value


def to_payload(policy: PolicySet) -> dict[str, Any]:
    """What ``PolicySet`` is built from, as records: the set itself is built again."""
    payload: dict[str, Any] = {name: to_record(getattr(policy, name)) for name in _SETS}
    payload["platform_doc"] = to_record(policy.platform_doc)
    payload["sources"] = [(kind, name, ref.file, ref.line, ref.document)
                          for (kind, name), ref in policy.sources.items()]
    payload["generation"] = policy.generation
    return payload


def from_payload(payload: dict[str, Any]) -> PolicySet:
    sources = {(kind, name): SourceRef(file, line, document) for kind, name, file, line, document in payload["sources"]}
    return PolicySet(platform_doc=payload["platform_doc"], sources=sources, generation=payload["generation"],
                     **{name: payload[name] for name in _SETS})


# ---- the key, and the file ---------------------------------------------------------------------

def _code_files(root: Path) -> list[Path]:
    out = [root / "__init__.py"]
    for layer in _CODE_LAYERS:
        for folder, dirs, names in os.walk(root / layer):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            out.extend(Path(folder, n) for n in sorted(names) if n.endswith(".py"))
    return out


def cache_key(directory: Path) -> str | None:
    """SHA-256 of everything a validated set depends on; None when there is nothing to key (the
    directory is missing or empty, pydantic is not installed): then the loader reports it."""
    spec = importlib.util.find_spec("pydantic")
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations or not directory.is_dir():
        return None
    files = policy_files(directory)
    if not files:
        return None
    digest = hashlib.sha256(f"trainadmit-policy-cache {FORMAT} {sys.version}\0".encode())
    try:
        digest.update(Path(locations[0], "version.py").read_bytes() + b"\0")
        for path in _code_files(_CODE_ROOT):
            digest.update(str(path.relative_to(_CODE_ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
        digest.update(b"\0")
        for path in files:
            digest.update(str(path.relative_to(directory)).encode() + b"\0" + path.read_bytes() + b"\0")
    except OSError:
        return None
    return digest.hexdigest()


def _read(path: Path) -> PolicySet | None:
    try:
        with open(path, encoding="utf-8") as fh:
            st = os.fstat(fh.fileno())
            if hasattr(os, "getuid") and (st.st_uid != os.getuid() or st.st_mode & 0o022):
                return None
            text = fh.read()
        return from_payload(json.loads(text, object_hook=_decode))
    except Exception:  # a damaged or foreign file is a miss, never an error: the directory is loaded instead
        return None


def _write(path: Path, policy: PolicySet) -> None:
    try:
        text = json.dumps(_encode(to_payload(policy)), ensure_ascii=False, allow_nan=True)
    except (TypeError, ValueError):
        return  # a value JSON cannot carry (a date in a Rule's params): this set is loaded in full each time
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # a new file only, never through a link someone left in a shared directory
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)  # readers see the old file or the whole new one
        kept = sorted(path.parent.glob("policy-*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        for stale in kept[KEEP_FILES:]:
            stale.unlink(missing_ok=True)
    except OSError:  # a read-only or full cache directory costs speed, never correctness
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def load_policy_cached(directory: str | Path, load: Callable[[Path], PolicySet], cache_dir: Path | None) -> PolicySet:
    """``load(directory)`` (the engine's ``load_policy``: validation and every check against the
    engine's facts), or the set it returned before for the same bytes, from ``cache_dir``."""
    root = Path(directory)
    key = cache_key(root) if cache_dir is not None else None
    if key is None or cache_dir is None:
        return load(root)
    path = cache_dir / f"policy-{key}.json"
    policy = _read(path)
    if policy is None:
        policy = load(root)
        _write(path, policy)
    return policy
