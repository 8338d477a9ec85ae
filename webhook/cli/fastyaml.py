"""PyYAML's C loader and C dumper with less Python per node: the same documents in, the same bytes out.

Why: libyaml parses and emits in C, but PyYAML still builds every value (constructor) and every
node (representer) in Python through generic per-node dispatch, and calls back into Python to
resolve each scalar's implicit tag and to track path resolvers. For `trainadmit check` over a
repository of manifests that is most of the time spent outside the engine. Here:

- values and nodes for the common cases (maps, sequences, strings, ints, bools, null, and every
  scalar tag the safe constructor knows) are built directly; anything else (an alias of a
  collection, a merge key, an explicit or unknown tag, an unhashable key, a non-builtin type) goes
  to PyYAML's own code, for the whole document when loading, so results and errors are PyYAML's;
- scalar tag resolution, a pure function of (kind, value, implicit) for the safe resolver, is
  memoized in C (``functools.lru_cache``), so a repeated key or value costs no Python call;
- the path-resolver hooks, which do nothing without path resolvers (PyYAML's safe classes have
  none, and ``_hooks_are_noops`` checks), are C callables that do nothing.

``tests/test_check_fastyaml.py`` holds both to PyYAML: the same data from every fixture, example,
policy and generated manifest (and from generated YAML with aliases, merges and tags), and the
same bytes as ``yaml.dump_all`` with libyaml's dumper.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterator
from typing import IO, Any

import yaml
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


class Dumper(_BASE_DUMPER):
    """Represents dicts, lists, str, int, bool and None as SafeRepresenter does (an alias for a dict
    or list met twice included); any other value goes through SafeRepresenter itself."""

    descend_resolver = staticmethod(operator.is_)
    ascend_resolver = staticmethod(tuple)

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is ScalarNode:
            return _resolve_cached(kind, value, implicit)
        return Resolver.resolve(self, kind, value, implicit)  # the emitter passes a collection's node list

    def represent(self, data: Any) -> None:
        if self.default_flow_style is not False or self.default_style is not None:
            return super().represent(data)
        node = self._node(data)
        self.serialize(node)
        self.represented_objects = {}
        self.object_keeper = []
        self.alias_key = None
        return None

    def _node(self, data: Any) -> Any:
        kind = type(data)
        if kind is str:
            return ScalarNode(STR, data)
        if kind is dict or kind is list:
            node = self.represented_objects.get(id(data))
            if node is not None:  # the same object again: an alias, as represent_data makes it
                return node
            self.object_keeper.append(data)
            value: list = []
            if kind is dict:
                node = self.represented_objects[id(data)] = MappingNode(MAP, value, flow_style=False)
                for k, v in data.items():
                    value.append((self._node(k), self._node(v)))
            else:
                node = self.represented_objects[id(data)] = SequenceNode(SEQ, value, flow_style=False)
                for v in data:
                    value.append(self._node(v))
            return node
        if kind is int:
            return ScalarNode(INT, str(data))
        if kind is bool:
            return ScalarNode(BOOL, "true" if data else "false")
        if data is None:
            return ScalarNode(NULL, "null")
        return self.represent_data(data)


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
            if key_node.tag == MERGE:
                raise _Fallback
            key = _build(loader, key_node, seen)
            try:
                out[key] = _build(loader, value_node, seen)
            except TypeError:  # an unhashable key: PyYAML's error says where
                raise _Fallback from None
        return out
    if kind is SequenceNode and node.tag == SEQ:
        return [_build(loader, child, seen) for child in node.value]
    raise _Fallback


def load_all(stream: str | IO[str]) -> Iterator[Any]:
    """``yaml.load_all(stream, Loader=CSafeLoader)``, document by document (a stream is read as needed)."""
    loader = Loader(stream) if _hooks_are_noops(Loader) else _BASE_LOADER(stream)
    try:
        while loader.check_node():
            node = loader.get_node()
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
