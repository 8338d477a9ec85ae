"""What a concern reads of an object, declared next to its rules, and the object cut down to that.

Objects carry much that no rule looks at: container images, commands and probes, env values, kubectl's
last-applied copy of the whole object, the apiserver's bookkeeping (uid, managedFields, status). Each
concern declares what it reads (``Reads``) in the places where that is so: the metadata of the object and
of its pod templates, annotation values, pod specs, containers, env values. Everywhere else (the
workload's own spec: its counts, gang settings, runtime patches) an object is read whole.

The engine runs every concern that declares its reads on ``Projection.project(obj)``, the object cut down
to the union of the declarations, so its part of a decision is a function of the projection and of
nothing else, in every caller: a cache keyed by the projection (the server's) gives exactly the engine's
answer, and a rule that reads a field it did not declare sees the field absent in ``check`` and in its own
tests as well, not only in the server. A concern that declares nothing (``reads=None``: the custom CEL
rules, which read whatever their expressions name) runs on the whole object.

Annotation values, env values and container fields not declared are reduced, not removed, where a rule may
still look at their shape: an annotation keeps its key with ``""`` for a string value (rules ask whether a
key is there; the shape rule asks that values are strings), an env entry keeps its name, ``""`` for a
string value and ``{}`` for a ``valueFrom``. Anything of an unexpected type is kept as it is, so that the
shape rule sees the same problem either way. ``project(project(x)) == project(x)``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import fields
from functools import lru_cache
from typing import Any

from ..grammars.lazydataclass import dataclass
from .paths import Path

INTENT_KEYS = "{intent}/"  # in ``Reads.annotations``: every key under the policy's intent prefix
ALL = "*"  # in ``Reads.container`` / ``init_container``: the whole container


@dataclass(frozen=True)
class Reads:
    """The parts of an object a concern looks at, where objects carry much that no rule reads.

    Each field lists keys (or, where said, key prefixes ending in ``/`` or ``*``)."""

    object: tuple[str, ...] = ()  # top-level keys (``metadata`` is cut down by the fields below, the rest is whole)
    metadata: tuple[str, ...] = ()  # keys of the object's and of every pod template's metadata
    annotations: tuple[str, ...] = ()  # annotation keys whose values are read ("a/b/" prefixes; INTENT_KEYS)
    pod: tuple[str, ...] = ()  # keys of every pod spec (containers: by the two fields below)
    container: tuple[str, ...] = ()  # keys of every regular container (ALL: the whole container)
    init_container: tuple[str, ...] = ()  # keys of every init container (ALL: the whole container)
    env_values: tuple[str, ...] = ()  # env names whose values are read ("NCCL_*": a prefix)

    def __or__(self, other: Reads) -> Reads:
        return Reads(**{f.name: tuple(sorted({*getattr(self, f.name), *getattr(other, f.name)}))
                        for f in fields(Reads)})


def union(declared: Iterable[Reads]) -> Reads:
    out = Reads()
    for reads in declared:
        out = out | reads
    return out


class Projection:
    """The object cut down to ``reads`` (with the policy's intent prefix in place of INTENT_KEYS)."""

    def __init__(self, reads: Reads, intent_prefix: str):
        self.reads = reads
        self._object_keys = frozenset(reads.object)
        self._meta_keys = frozenset(reads.metadata)
        self._pod_keys = frozenset(reads.pod)
        self._container = None if ALL in reads.container else frozenset(reads.container)
        self._init = None if ALL in reads.init_container else frozenset(reads.init_container)
        keys = [k.replace(INTENT_KEYS, f"{intent_prefix}/") for k in reads.annotations]
        self._annotation_keys = frozenset(k for k in keys if not k.endswith("/"))
        self._annotation_prefixes = tuple(k for k in keys if k.endswith("/"))
        self._env_names = frozenset(n for n in reads.env_values if not n.endswith("*"))
        self._env_prefixes = tuple(n[:-1] for n in reads.env_values if n.endswith("*"))
        # env name -> whether its value is cut (read by no concern): a name and a prefix test once per name, not
        # per entry (Jobs repeat their names); bounded, since names come from the objects
        self._env_cut: dict[str, bool] = {}

    def project(self, obj: dict, template_roots: Iterable[Path]) -> dict:
        """``obj`` cut down to what the concerns read; its pod templates are at ``template_roots``
        (``()``: the object is its own pod template, a Pod). Never modifies ``obj``."""
        out = {k: v for k, v in obj.items() if k in self._object_keys}
        if "metadata" in out:
            out["metadata"] = self._meta(out["metadata"])
        owned: set[int] = {id(out)}
        for root in template_roots:
            if not root:
                if "spec" in out:
                    out["spec"] = self._pod(out["spec"])
                continue
            self._template_at(out, root, owned)
        return out

    def _template_at(self, out: dict, root: Path, owned: set[int]) -> None:
        cur: Any = out
        for part in root[:-1]:  # copy along the way: the result shares untouched subtrees with the object
            if (type(cur) is dict and part in cur) or (type(cur) is list and type(part) is int and part < len(cur)):
                child = cur[part]
            else:
                return
            if type(child) not in (dict, list):
                return
            if id(child) not in owned:
                child = dict(child) if type(child) is dict else list(child)
                cur[part] = child
                owned.add(id(child))
            cur = child
        last = root[-1]
        if type(cur) is dict:
            found = cur.get(last)
        elif type(cur) is list and type(last) is int and last < len(cur):
            found = cur[last]
        else:
            return
        if type(found) is dict:
            cur[last] = self._template(found)

    def _template(self, template: dict) -> dict:
        out = {}
        if "metadata" in template:
            out["metadata"] = self._meta(template["metadata"])
        if "spec" in template:
            out["spec"] = self._pod(template["spec"])
        return out

    def _meta(self, meta: Any) -> Any:
        if type(meta) is not dict:
            return meta
        out = {k: v for k, v in meta.items() if k in self._meta_keys}
        annotations = out.get("annotations")
        if type(annotations) is dict:
            out["annotations"] = {k: (v if type(v) is not str or self._annotation_read(k) else "")
                                  for k, v in annotations.items()}
        return out

    def _annotation_read(self, key: Any) -> bool:
        return key in self._annotation_keys or (type(key) is str and key.startswith(self._annotation_prefixes))

    def _pod(self, spec: Any) -> Any:
        if type(spec) is not dict:
            return spec
        out = {k: v for k, v in spec.items() if k in self._pod_keys}
        for group, keys in (("containers", self._container), ("initContainers", self._init)):
            items = out.get(group)
            if keys is not None and type(items) is list:
                out[group] = self._containers(items, keys)
        return out

    def _containers(self, items: list, keys: frozenset[str]) -> list:
        """Each container cut down to ``keys`` (its env by ``_env``); anything else as it is. One loop, members
        tested in place: no comprehension per container (a call each in Python 3.11)."""
        out = []
        for container in items:
            if type(container) is dict:
                cut = {}
                for key, value in container.items():
                    if key in keys:
                        cut[key] = value
                env = cut.get("env")
                if type(env) is list:
                    cut["env"] = self._env(env)
                container = cut
            out.append(container)
        return out

    def _env(self, env: list) -> list:
        """The env entries: one whose value no concern reads (``reads.env_values``) keeps its name, with an empty
        str for a str value and an empty map for ``valueFrom``; any other entry as it is (in one loop, no call per
        entry: a container holds dozens)."""
        names, prefixes, memo = self._env_names, self._env_prefixes, self._env_cut
        out = []
        for entry in env:
            if type(entry) is dict:
                name = entry.get("name")
                if type(name) is str:
                    unread = memo.get(name)
                    if unread is None:
                        if len(memo) >= _ENV_MEMO_LIMIT:
                            memo.clear()
                        unread = memo[name] = name not in names and not name.startswith(prefixes)
                    if unread:
                        cut: dict = {"name": name}
                        if "value" in entry:
                            value = entry["value"]
                            cut["value"] = "" if type(value) is str else value
                        if "valueFrom" in entry:
                            cut["valueFrom"] = {}
                        entry = cut
            out.append(entry)
        return out


_ENV_MEMO_LIMIT = 4096


@lru_cache(maxsize=64)
def projection(reads: Reads, intent_prefix: str) -> Projection:
    return Projection(reads, intent_prefix)
