"""PyYAML's C loader and C dumper with less Python per node: the same documents in, the same bytes out.

Why: libyaml parses and emits in C, but PyYAML builds every value (constructor) and every node
(representer, serializer) in Python through generic per-node dispatch, and calls back into Python
to resolve each scalar's implicit tag. For `trainadmit check` over a repository of manifests that
is most of the time spent outside the engine (dumping 1,000 mutated Jobs cost more than deciding
them). Here:

- loading: values for maps, sequences, strings and every scalar tag the safe constructor knows are
  built straight from libyaml's events (a str; its composed nodes cost more; the events made by a C
  constructor while a document is read, ``_light_events``) or nodes (a stream, a str read while another
  thread is alive, and a str from its first document with an anchor, alias, tag, merge key or collection
  key on); a document
  with anything else (an alias of a collection, a merge key, a collection tag, an unknown tag, an
  unhashable key) is built by PyYAML's constructor;
- dumping: a document made only of dicts, lists, str, int, bool and None, with no dict or list met
  twice (every mutated Job), goes to libyaml as the very events SafeRepresenter and the serializer
  would emit for it; any other document goes through them;
- scalar tag resolution, a pure function of (kind, value, implicit) for the safe resolver, is
  memoized in C (``functools.lru_cache``), and the loader's path-resolver hooks, which do nothing
  without path resolvers (the safe classes have none; ``_hooks_are_noops`` checks), are C no-ops.

``tests/cli/test_check_fastyaml.py`` holds both to PyYAML: the same data and errors from every YAML and
JSON file of the project and from YAML written to hit each hand-back, and the same bytes as
``yaml.dump_all`` with libyaml's dumper for those files, mutated Jobs and generated data.
"""

from __future__ import annotations

import contextlib
import functools
import operator
import threading
from collections.abc import Iterator
from typing import IO, Any

import yaml
from yaml.events import (
    DocumentEndEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
from yaml.nodes import MappingNode, ScalarNode, SequenceNode
from yaml.resolver import Resolver

_C = getattr(yaml, "__with_libyaml__", False)
_BASE_LOADER: Any = yaml.CSafeLoader if _C else yaml.SafeLoader
_BASE_DUMPER: Any = yaml.CSafeDumper if _C else yaml.SafeDumper

_TAG = "tag:yaml.org,2002:"
STR, INT, BOOL, NULL, MAP, SEQ, MERGE = (_TAG + t for t in ("str", "int", "bool", "null", "map", "seq", "merge"))

# The safe classes' resolver; the cache is bounded (manifests repeat their keys and most values).
_resolve_cached = functools.lru_cache(maxsize=4096)(Resolver().resolve)


def _hooks_are_noops(cls: type) -> bool:
    return not cls.yaml_path_resolvers  # type: ignore[attr-defined]


class Loader(_BASE_LOADER):
    resolve = staticmethod(_resolve_cached)  # the parser passes hashable values (str, or None)
    descend_resolver = staticmethod(operator.is_)  # (parent, index) -> ignored
    ascend_resolver = staticmethod(tuple)  # () -> ignored


class _Complex(Exception):
    """This document needs PyYAML's representer."""


def _check_simple(data: Any, seen: set[int]) -> None:
    """Raise _Complex unless ``data`` is made of dicts, lists, str, int, bool and None only, with
    no dict or list met twice (that would be an alias) and only scalar keys."""
    kind = type(data)
    if kind is dict:
        if id(data) in seen:
            raise _Complex
        seen.add(id(data))
        for key, value in data.items():
            if type(key) not in _SCALARS:
                raise _Complex
            _check_simple(value, seen)
    elif kind is list:
        if id(data) in seen:
            raise _Complex
        seen.add(id(data))
        for value in data:
            _check_simple(value, seen)
    elif kind not in _SCALARS:
        raise _Complex


_SCALARS = (str, int, bool, type(None))
_PLAIN = (True, False)
_STR_PLAIN, _STR_QUOTED = (True, True), (False, True)  # (plain_implicit, quoted_implicit) of a str scalar
_STR_MEMO: dict[str, tuple[bool, bool]] = {}
_MEMO_LIMIT = 1 << 16


def _str_implicit(value: str) -> tuple[bool, bool]:
    """What the serializer computes for a str node: plain if the value does not resolve to another tag."""
    implicit = _STR_MEMO.get(value)
    if implicit is None:
        if len(_STR_MEMO) >= _MEMO_LIMIT:
            _STR_MEMO.clear()
        implicit = _STR_MEMO[value] = _STR_PLAIN if _resolve_cached(ScalarNode, value, _PLAIN) == STR else _STR_QUOTED
    return implicit


def _emit_value(data: Any, emit: Any, scalar: ScalarEvent) -> None:
    """The events of one value; a str (the most common) is written in place, without a call."""
    kind = type(data)
    if kind is dict:
        emit(_MAP_START)
        for key, value in data.items():
            if type(key) is str:
                scalar.tag, scalar.value, scalar.implicit = STR, key, _str_implicit(key)
                emit(scalar)
            else:
                _emit_value(key, emit, scalar)
            if type(value) is str:
                scalar.tag, scalar.value, scalar.implicit = STR, value, _str_implicit(value)
                emit(scalar)
            else:
                _emit_value(value, emit, scalar)
        emit(_MAP_END)
        return
    if kind is list:
        emit(_SEQ_START)
        for value in data:
            if type(value) is str:
                scalar.tag, scalar.value, scalar.implicit = STR, value, _str_implicit(value)
                emit(scalar)
            else:
                _emit_value(value, emit, scalar)
        emit(_SEQ_END)
        return
    if kind is str:
        scalar.tag, scalar.value, scalar.implicit = STR, data, _str_implicit(data)
    elif kind is int:
        text = str(data)
        scalar.tag, scalar.value = INT, text
        scalar.implicit = (_resolve_cached(ScalarNode, text, _PLAIN) == INT, False)
    elif kind is bool:
        scalar.tag, scalar.value, scalar.implicit = BOOL, "true" if data else "false", _PLAIN
    else:
        scalar.tag, scalar.value, scalar.implicit = NULL, "null", _PLAIN
    emit(scalar)


class Dumper(_BASE_DUMPER):
    """A document made of dicts, lists, str, int, bool and None (every mutated Job) is emitted as
    the events SafeRepresenter and the serializer would produce for it, straight to libyaml (which
    copies each event, so one scalar event is reused); anything else goes through PyYAML."""

    def __init__(self, stream: IO[str], **options: Any):
        super().__init__(stream, **options)
        # the events are SafeRepresenter's and the serializer's for block style, keys in order,
        # documents started and ended implicitly; the pure-Python emitter keeps events queued, so
        # reusing one there would change them
        self._events = bool(_C and self.default_flow_style is False and self.sort_keys is False
                            and self.default_style is None
                            and all(options.get(k) is None for k in ("explicit_start", "explicit_end", "version",
                                                                    "tags")))

    def represent(self, data: Any) -> None:
        if self._events:
            try:
                _check_simple(data, set())
            except _Complex:
                pass
            else:
                self.emit(_DOCUMENT_START)
                _emit_value(data, self.emit, ScalarEvent(None, STR, _PLAIN, ""))
                self.emit(_DOCUMENT_END)
                return
        super().represent(data)


_DOCUMENT_START, _DOCUMENT_END = DocumentStartEvent(explicit=None), DocumentEndEvent(explicit=None)
_MAP_START, _MAP_END = MappingStartEvent(None, MAP, True, flow_style=False), MappingEndEvent()
_SEQ_START, _SEQ_END = SequenceStartEvent(None, SEQ, True, flow_style=False), SequenceEndEvent()


class _Fallback(Exception):
    """This document needs PyYAML's own constructor."""


def _build(loader: Any, node: Any, seen: set[int]) -> Any:
    kind = type(node)
    if kind is ScalarNode:
        tag = node.tag
        if tag == STR:
            return node.value
        construct = loader.yaml_constructors.get(tag)
        if construct is None:
            raise _Fallback
        return construct(loader, node)
    if id(node) in seen:  # an alias of a collection: one shared object, as PyYAML makes it
        raise _Fallback
    seen.add(id(node))
    if kind is MappingNode and node.tag == MAP:
        out = {}
        for key_node, value_node in node.value:
            # a str scalar (most keys and values) is its value, as _build would return it, without the call
            if type(key_node) is ScalarNode and key_node.tag == STR:
                key = key_node.value
            else:
                if key_node.tag == MERGE:
                    raise _Fallback
                key = _build(loader, key_node, seen)
            try:
                out[key] = (value_node.value if type(value_node) is ScalarNode and value_node.tag == STR
                            else _build(loader, value_node, seen))
            except TypeError:  # an unhashable key: PyYAML's error says where
                raise _Fallback from None
        return out
    if kind is SequenceNode and node.tag == SEQ:
        return [child.value if type(child) is ScalarNode and child.tag == STR else _build(loader, child, seen)
                for child in node.value]
    raise _Fallback


class _Light(BaseException):
    """An event as libyaml's parser makes it while ``_light_events`` holds: the parser calls the event class of
    ``yaml.events`` it finds in its module with the event's fields, positionally, and ``BaseException``'s
    constructor, in C, keeps them as ``args``; ``yaml.events``' own constructors, in Python, store them one
    attribute at a time (about a fifth of reading a manifest, libyaml's own parsing the rest). Never raised: an
    exception class only for that constructor. One subclass per event class (a class is what tells events
    apart); their fields, in the parser's order:"""

    __slots__ = ()


class _Scalar(_Light):
    """(anchor, tag, implicit, value, start_mark, end_mark, style)"""

    __slots__ = ()


class _MapStart(_Light):
    """(anchor, tag, implicit, start_mark, end_mark, flow_style)"""

    __slots__ = ()


class _SeqStart(_Light):
    """(anchor, tag, implicit, start_mark, end_mark, flow_style)"""

    __slots__ = ()


class _MapEnd(_Light):
    """(start_mark, end_mark)"""

    __slots__ = ()


class _SeqEnd(_Light):
    """(start_mark, end_mark)"""

    __slots__ = ()


_LIGHT = {"ScalarEvent": (ScalarEvent, _Scalar), "MappingStartEvent": (MappingStartEvent, _MapStart),
          "SequenceStartEvent": (SequenceStartEvent, _SeqStart), "MappingEndEvent": (MappingEndEvent, _MapEnd),
          "SequenceEndEvent": (SequenceEndEvent, _SeqEnd)}
_PARSER_MODULE: Any = getattr(yaml, "_yaml", None) if _C else None


@contextlib.contextmanager
def _light_events() -> Iterator[bool]:
    """libyaml's parser makes ``_Light`` events meanwhile, when it can be told to and no other thread may be using
    PyYAML: the parser module's event classes are swapped, for the process (its emitter tests the events it is
    given against the same names), and put back when the block ends. Yields whether they are."""
    module = _PARSER_MODULE
    if module is None or threading.active_count() != 1 or \
            any(getattr(module, name, None) is not real for name, (real, _) in _LIGHT.items()):
        yield False
        return
    for name, (_, light) in _LIGHT.items():
        setattr(module, name, light)
    try:
        yield True
    finally:
        for name, (real, _) in _LIGHT.items():
            setattr(module, name, real)


def _scalar(loader: Any, event: _Scalar) -> Any:
    """The value of a scalar event without anchor or tag, as the composer resolves it and _build builds it (a tag
    without a constructor, the merge key's among them: ``_Fallback``)."""
    anchor, tag, implicit, value, start_mark, end_mark, style = event.args
    if anchor is not None or tag is not None:
        raise _Fallback
    tag = _resolve_cached(ScalarNode, value, implicit)
    if tag == STR:
        return value
    construct = loader.yaml_constructors.get(tag)
    if construct is None:
        raise _Fallback
    return construct(loader, ScalarNode(tag, value, start_mark, end_mark, style))


def _from_events(loader: Any, event: Any, get: Any) -> Any:
    """The value starting at ``event`` (``_Light`` events), read event by event: maps, sequences and scalars
    without anchors, aliases, tags or merge keys (anything else: ``_Fallback``), with only scalar keys.

    A scalar that resolves to a str (most keys and values) is its value, read here without calling ``_scalar``:
    the same test ``_scalar`` makes first (no anchor, no tag, the resolver says str), which has no effect but the
    resolver's cache; any other scalar goes through ``_scalar``, which builds it or raises."""
    kind = type(event)
    if kind is _Scalar:
        return _scalar(loader, event)
    if kind is not _MapStart and kind is not _SeqStart:
        raise _Fallback  # an alias
    resolve = _resolve_cached
    fields = event.args
    if kind is _MapStart and fields[0] is None and fields[1] is None:
        out = {}
        while True:
            key_event = get()
            if type(key_event) is not _Scalar:
                if type(key_event) is _MapEnd:
                    return out
                raise _Fallback  # a collection as a key, or an alias
            fields = key_event.args  # (anchor, tag, implicit, value, ...)
            key = fields[3]
            if fields[0] is not None or fields[1] is not None or resolve(ScalarNode, key, fields[2]) != STR:
                key = _scalar(loader, key_event)  # a merge key (``<<``) has no constructor: _Fallback
            value_event = get()
            if type(value_event) is _Scalar:
                fields = value_event.args
                value = fields[3]
                if fields[0] is not None or fields[1] is not None or resolve(ScalarNode, value, fields[2]) != STR:
                    value = _scalar(loader, value_event)
                out[key] = value
            else:
                out[key] = _from_events(loader, value_event, get)
    if kind is _SeqStart and fields[0] is None and fields[1] is None:
        items = []
        append = items.append
        while True:
            item = get()
            item_kind = type(item)
            if item_kind is _Scalar:
                fields = item.args
                value = fields[3]
                if fields[0] is not None or fields[1] is not None or resolve(ScalarNode, value, fields[2]) != STR:
                    value = _scalar(loader, item)
                append(value)
            elif item_kind is _SeqEnd:
                return items
            else:
                append(_from_events(loader, item, get))
    raise _Fallback


def load_all(stream: str | IO[str]) -> Iterator[Any]:
    """``yaml.load_all(stream, Loader=CSafeLoader)``, document by document (a stream is read as needed).

    A str is read event by event while libyaml's parser makes ``_Light`` events (``_light_events``: its events
    cost less than its composed nodes, and these less than PyYAML's), each document built as _build builds it;
    at the first document that needs more (an anchor, an alias, a tag, a merge key, a collection as a key), or
    when the parser cannot be given those events, the text is read again from its start through nodes, the
    documents already given skipped, and the rest of it read that way. Between the swap of the parser's event
    classes and its undoing only one document is read: it is undone before the document is yielded."""
    given = 0
    if isinstance(stream, str) and _hooks_are_noops(Loader):
        loader = Loader(stream)
        try:
            get = loader.get_event
            get()  # the stream's start
            while True:
                with _light_events() as light:
                    if not light:
                        break
                    if type(get()) is StreamEndEvent:  # else a document's start
                        return
                    try:
                        doc = _from_events(loader, get(), get)
                    except _Fallback:
                        break
                    get()  # the document's end
                given += 1
                yield doc
        finally:
            loader.dispose()
    yield from _load_nodes(stream, given)


def _load_nodes(stream: str | IO[str], skip: int) -> Iterator[Any]:
    """The documents after the first ``skip``, each composed as a node and built from it (_build), or by
    PyYAML's constructor when it needs it."""
    loader = Loader(stream) if _hooks_are_noops(Loader) else _BASE_LOADER(stream)
    try:
        while loader.check_node():
            node = loader.get_node()
            if skip:
                skip -= 1
                continue
            try:
                yield _build(loader, node, set())
            except _Fallback:
                yield loader.construct_document(node)
    finally:
        loader.dispose()


def open_dumper(stream: IO[str], **options: Any) -> Any:
    """A dumper writing to ``stream``, opened: ``represent`` each document, then ``close`` and
    ``dispose`` it, as ``yaml.dump_all`` does inside (same options, same bytes)."""
    dumper = (Dumper if _hooks_are_noops(Dumper) else _BASE_DUMPER)(stream, **options)
    dumper.open()
    return dumper
