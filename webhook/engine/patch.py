"""Build an RFC 6902 JSON patch while applying it, copy-on-write.

Mutations call ``set``/``append`` on a Patcher instead of editing dicts. Each call both records
the operation and applies it to a working document, so the mutated object is, by construction,
the result of applying the patch, and the operations always target paths that exist at that
point of the patch (the apiserver's json-patch library rejects an ``add`` under a missing parent).
Containers are copied only along the paths that change, so the caller's object is never modified
and untouched subtrees are shared: that keeps a decision cheap on large Jobs.
"""

from __future__ import annotations

from typing import Any

from .paths import Path, get_path, pointer

_POINTER_TEXT: dict[Path, str] = {}
_POINTER_TEXT_LIMIT = 4096


def _pointer(path: Path) -> str:
    """``pointer(path)``, memoized for a path of str keys and int indices only: the operations a Patcher records
    write a few dozen distinct paths, and escaping each token cost more than the rest of a write. A path
    holding anything else (a bool, equal to an int and so the same key, but written ``True``) is never
    looked up: its pointer is made each time."""
    for part in path:
        kind = type(part)
        if kind is not str and kind is not int:
            return pointer(path)
    text = _POINTER_TEXT.get(path)
    if text is None:
        if len(_POINTER_TEXT) >= _POINTER_TEXT_LIMIT:
            _POINTER_TEXT.clear()
        text = _POINTER_TEXT[path] = pointer(path)
    return text


def _build(rest: Path, value: Any) -> Any:
    """Nested maps for the missing tail of a path, with ``value`` at the end."""
    for key in reversed(rest):
        value = {key: value}
    return value


class Patcher:
    def __init__(self, obj: dict, aliases: list[tuple[Path, Path]] | None = None, record: bool = True):
        self.record = record  # False: only apply (a patch replayed onto another document records nothing)
        self.doc: dict = dict(obj)
        self._owned: set[int] = {id(self.doc)}
        # path -> the container we own at that path; saves walking from the root on every write
        self._containers: dict[Path, Any] = {(): self.doc}
        self.ops: list[dict] = []
        # (prefix, replacement): reads and writes under a prefix go under its replacement instead
        self.aliases = aliases or []

    def route(self, path: Path) -> Path:
        """The path a read or write of ``path`` really goes to (see ``aliases``)."""
        for prefix, target in self.aliases:
            if path[: len(prefix)] == prefix:
                return (*target, *path[len(prefix):])
        return path

    # ---- reading ------------------------------------------------------------------------------
    def get(self, path: Path, default: Any = None) -> Any:
        if self.aliases:
            path = self.route(path)
        parent = self._containers.get(path[:-1]) if path else None
        if parent is not None:  # a container we already hold: one look-up instead of a walk
            last = path[-1]
            if type(parent) is dict:
                value = parent.get(last)
            elif type(last) is int and last < len(parent):
                value = parent[last]
            else:
                value = None
            return default if value is None else value
        return get_path(self.doc, path, default)

    # ---- writing ------------------------------------------------------------------------------
    def _own(self, parent: Any, key: str | int) -> Any:
        child = parent[key]
        if id(child) in self._owned:
            return child
        if isinstance(child, dict):
            child = dict(child)
        elif isinstance(child, list):
            child = list(child)
        else:
            return child
        parent[key] = child
        self._owned.add(id(child))
        return child

    def _record(self, op: str, path: Path, value: Any) -> None:
        if self.record:
            self.ops.append({"op": op, "path": _pointer(path), "value": value})

    def set(self, path: Path, value: Any) -> bool:
        """Make ``path`` hold ``value``, creating missing maps. Returns True when something changed."""
        if self.aliases:
            path = self.route(path)
        parent_path = path[:-1]
        cur = self._containers.get(parent_path)
        if cur is not None:
            return self._set_in(cur, path, value)
        # start from the deepest container already held (every write along a path caches its steps)
        start = len(parent_path) - 1
        while start > 0 and parent_path[:start] not in self._containers:
            start -= 1
        cur = self._containers[parent_path[:start]]
        for depth in range(start, len(parent_path)):
            part = parent_path[depth]
            nxt = cur.get(part) if isinstance(cur, dict) else (cur[part] if isinstance(cur, list) and
                                                                 isinstance(part, int) and part < len(cur) else None)
            if nxt is None:
                if not isinstance(cur, dict):
                    raise TypeError(f"cannot set {pointer(path)}: {pointer(path[:depth])} is not a map")
                nested = _build(path[depth + 1:], value)
                self._record("add", path[: depth + 1], nested)
                cur[part] = _deep_owned(nested, self._owned)
                return True
            if not isinstance(nxt, dict | list):
                raise TypeError(f"cannot set {pointer(path)}: {pointer(path[:depth + 1])} is not a map or list")
            cur = self._own(cur, part)
            self._containers[parent_path[: depth + 1]] = cur
        return self._set_in(cur, path, value)

    def _set_in(self, cur: Any, path: Path, value: Any) -> bool:
        last = path[-1]
        if isinstance(cur, dict):
            existing = cur.get(last)
            if last in cur and existing == value:
                return False
            # RFC 6902 "add" on an existing member replaces it; "replace" states the intent clearly.
            self._record("replace" if existing is not None else "add", path, value)
            cur[last] = _deep_owned(value, self._owned)
            if type(existing) in (dict, list):
                self._forget(path)
            return True
        if isinstance(cur, list) and isinstance(last, int) and last < len(cur):
            if cur[last] == value:
                return False
            old = cur[last]
            self._record("replace", path, value)
            cur[last] = _deep_owned(value, self._owned)
            if type(old) in (dict, list):
                self._forget(path)
            return True
        raise TypeError(f"cannot set {pointer(path)}")

    def _forget(self, path: Path) -> None:
        """Drop cached containers at or under a path whose value was just replaced."""
        n = len(path)
        for key in [k for k in self._containers if len(k) >= n and k[:n] == path]:
            del self._containers[key]

    def extend(self, list_path: Path, values: list) -> None:
        """Append several items: one operation when the list is created, one per item otherwise."""
        if not values:
            return
        if self.aliases:
            list_path = self.route(list_path)
        if not isinstance(self.get(list_path), list):
            self.set(list_path, list(values))
            return
        for value in values:
            self.append(list_path, value)

    def append(self, list_path: Path, value: Any) -> None:
        """Append to a list, creating it when it is missing or null."""
        if self.aliases:
            list_path = self.route(list_path)
        current = self.get(list_path)
        if not isinstance(current, list):
            self.set(list_path, [value])
            return
        parent = self._walk_owned(list_path)
        if self.record:
            self.ops.append({"op": "add", "path": _pointer(list_path) + "/-", "value": value})
        parent.append(_deep_owned(value, self._owned))

    def _walk_owned(self, path: Path) -> Any:
        cur = self._containers.get(path)
        if cur is not None:
            return cur
        start = len(path) - 1
        while start > 0 and path[:start] not in self._containers:
            start -= 1
        cur = self._containers[path[:start]]
        for depth in range(start, len(path)):
            cur = self._own(cur, path[depth])
            self._containers[path[: depth + 1]] = cur
        return cur


def _deep_owned(value: Any, owned: set[int]) -> Any:
    """Copy a value we insert, so that later edits of the document never reach into the recorded
    operation (or into caller or policy data); the copies are ours to edit in place.

    Only the copy's own id is registered in ``owned``: a map or list nested in it is not, so a later write
    under one copies it once more (``_own``, or replay's walk), as it copies any container not yet ours.
    Which containers are registered decides what is copied again, never what is written; registering every
    nested container cost a set insertion each (30k values, 39k containers over 1,000 Jobs) for writes under
    them that do not happen there (the walks copied 12,380 containers with and without it)."""
    cls = type(value)
    if cls is dict or cls is list:
        out = _copy(value)
        owned.add(id(out))
        return out
    return value


def _copy(value: dict | list) -> Any:
    """A deep copy of a plain dict or list (JSON-shaped: what is not a plain dict or list in it is kept as it
    is, as a scalar is), built member by member: a loop, not a comprehension (a function call each in
    Python 3.11). Not ``value.copy()`` and then the container members: as fast, but with it a decision left
    5-11 bytes more than counted (``retained`` of tests/engine/test_cel_kept.py, in 4 of 6 runs; 0 built this way)."""
    if type(value) is dict:
        out: Any = {}
        for key, item in value.items():
            kind = type(item)
            out[key] = _copy(item) if kind is dict or kind is list else item
        return out
    out = []
    for item in value:
        kind = type(item)
        out.append(_copy(item) if kind is dict or kind is list else item)
    return out


class UndeclaredWrite(RuntimeError):
    """A patch operation adds a member the object already has: the mutation that made it wrote a field its
    concern does not declare reading (``Concern.reads``), so it could not see what was there."""


_Tokens = tuple[tuple[str, ...], bool, tuple[str, ...], int, tuple[tuple[tuple[str, ...], int], ...]]
_POINTERS: dict[str, _Tokens] = {}
_POINTERS_LIMIT = 4096


def _tokens(pointer: str) -> _Tokens:
    """A JSON pointer's unescaped tokens, whether it ends in ``-`` (an append; the ``-`` left out), the tokens of
    the container written into (the list appended to, or the parent of the member written) and how many tokens
    lead to a container the write goes through (all for an append, but the last for a write of a member), and
    the tokens of each container above the one written into with their count, the deepest first (where replay
    looks for one a walk ended on). Memoized: a run's patches write a few dozen distinct paths (22 over
    bench/check.py's 1,000 Jobs)."""
    hit = _POINTERS.get(pointer)
    if hit is None:
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]
        append = bool(tokens) and tokens[-1] == "-"
        if append:
            tokens.pop()
        if len(_POINTERS) >= _POINTERS_LIMIT:
            _POINTERS.clear()
        whole = tuple(tokens)
        into = whole if append else whole[:-1]
        hit = _POINTERS[pointer] = (whole, append, into, len(whole) if append else len(whole) - 1,
                                    tuple((into[:n], n) for n in range(len(into) - 1, 0, -1)))
    return hit


def replay(obj: dict, ops: list[dict]) -> dict:
    """``obj`` with ``ops`` applied (operations the engine produced on the object cut down to what the
    concerns read: add and replace on maps, append to lists), copy-on-write like a Patcher's document.

    An ``add`` of a member the object already holds means a concern wrote where it did not declare reading,
    and the patch would replace what it could not see: that is refused (``UndeclaredWrite``), never applied.

    Each operation walks the document once, copying the maps and lists on its path that are not yet this
    replay's (``_owned``), and writes in place; only an operation whose path meets a missing parent, a null, a
    scalar or a dict/list subclass goes through ``Patcher.set``/``append``, whose result it is by construction
    (the same copies, the same comparisons, the same errors). An operation under the parent a fast walk ended on
    starts there (``walked``: most of a patch appends to or writes into a few containers of each template), and
    any other walk at the deepest such container above its parent (the template's pod spec, a container).
    Replayed values are copied (``_copy``), never shared with the patch: a value the patch holds twice (one
    toleration given to two templates) would otherwise be one object met twice in the document, which YAML writes
    as an anchor and an alias."""
    patcher = Patcher(obj, record=False)
    doc, owned = patcher.doc, patcher._owned
    # The container each fast walk ended on (the list appended to, or the parent of the member written), by its
    # tokens: ours, a plain dict or list, and still the one at that path, since nothing is replaced above it but
    # by a write of a container at or above it (which drops the entries under it) or by a Patcher fallback
    # (which drops them all). A later operation under the same parent (most of them: several env entries,
    # tolerations, volumes of one template) starts there instead of walking from the root.
    walked: dict[tuple[str, ...], Any] = {}
    for op in ops:
        path = op["path"]
        # the parents, and the list appended to, become ours (``hold`` tokens): see _tokens
        tokens, append, into, hold, above = _tokens(path)
        value = op["value"]
        held = walked.get(into) if tokens else None
        if held is not None:
            if append:  # the list is ours (it is only cached as one)
                held.append(_deep_owned(value, owned))
                continue
            _write_member(held, tokens, op, value, walked, owned)
            continue
        # the walk: the ``hold`` containers on the path made ours, each a plain dict or list (else the generic walk)
        cur: Any = doc
        named = True  # every list index on the path written as ``pointer`` writes it (no "-1", no "01")
        depth = 0
        # start at the deepest container above the parent that a walk ended on: it and all above it are ours and
        # still on this path (see ``walked``), as a walk from the root would find them, and its path is named
        for key, length in above:
            found = walked.get(key)
            if found is not None:
                cur, depth = found, length
                break
        while depth < hold:
            token = tokens[depth]
            kind = type(cur)
            if kind is dict:
                part: str | int = token
                child = cur.get(token)
            elif kind is list:
                part = int(token)
                child = cur[part]
                if named and (part < 0 or str(part) != token):
                    named = False  # another spelling of an index would be another key of ``walked``
            else:
                break
            kind = type(child)
            if kind is dict or kind is list:
                if id(child) not in owned:
                    child = _owned_copy(cur, part, child, owned)
            else:
                break
            cur = child
            depth += 1
        if append:
            if depth == hold and type(cur) is list:
                if named:
                    walked[tokens] = cur
                cur.append(_deep_owned(value, owned))
            else:
                parts, _ = _walk_rest(doc, tokens, hold, owned)
                walked.clear()  # the Patcher's walk may replace containers on the path
                patcher._containers = {(): doc}  # the walks above cache nothing: start from the root
                patcher.append(parts, value)
            continue
        if depth == hold and tokens:  # ``cur``, ours, a plain dict or list, is the parent of the member written
            if named:
                walked[into] = cur
            _write_member(cur, tokens, op, value, walked, owned, named)
            continue
        parts, cur = _walk_rest(doc, tokens, hold, owned)
        if op["op"] == "add" and cur is not None:
            raise _undeclared(path)
        walked.clear()
        patcher._containers = {(): doc}
        patcher.set(parts, value)
    return doc


def _write_member(parent: Any, tokens: tuple[str, ...], op: dict, value: Any, walked: dict[tuple[str, ...], Any],
                  owned: set[int], named: bool = True) -> None:
    """Write ``value`` (a copy of it) as the member the last of ``tokens`` names in ``parent``, ours, a plain dict or a
    list holding the index: refused as ``UndeclaredWrite`` for an ``add`` of a member there, nothing for a value
    equal to what is there. A container it replaces takes the walked containers under it along (``walked`` keyed by
    its path, ``named``: as ``pointer`` spells the path so far; an index spelled otherwise forgets them all)."""
    token = tokens[-1]
    if type(parent) is list:
        last: str | int = int(token)
        child = parent[last]
        named = named and last >= 0 and str(last) == token
    else:
        last = token
        child = parent.get(token)
    if op["op"] == "add" and child is not None:
        raise _undeclared(op["path"])
    if (last in parent if type(parent) is dict else True) and child == value:
        return
    if type(child) is dict or type(child) is list:
        if named:
            _drop_under(walked, tokens)
        else:
            walked.clear()  # the entries under it are keyed by another spelling of its path
    parent[last] = _deep_owned(value, owned)


def _undeclared(path: str) -> UndeclaredWrite:
    return UndeclaredWrite(f"the patch adds {path}, which the object already has: the concern that wrote it must "
                           "declare reading it (Concern.reads)")


def _walk_rest(doc: dict, tokens: tuple[str, ...], hold: int, owned: set[int]) -> tuple[Path, Any]:
    """The path (list indices as numbers) and the value at it, for an operation replay hands to the Patcher: a
    walk from the root that reads what replay's walk read and makes ours, as it does, the containers it would have
    (its own walk stopped at the first one that is not a plain dict or list; this one goes on reading past it)."""
    parts: list[str | int] = []
    cur: Any = doc
    fast = True  # every container on the path so far a plain dict or list, and ours up to ``hold``
    for depth, token in enumerate(tokens):  # list indices are numbers in a path, keys otherwise
        kind = type(cur)
        if kind is list:
            part: str | int = int(token)
            child = cur[part]
        elif kind is dict:
            part = token
            child = cur.get(part)
        else:
            part, child, fast = token, None, False
        if fast and depth < hold:
            ckind = type(child)
            if ckind is dict or ckind is list:
                if id(child) not in owned:
                    child = _owned_copy(cur, part, child, owned)
            else:
                fast = False
        parts.append(part)
        cur = child
    return tuple(parts), cur


def _owned_copy(parent: Any, part: str | int, child: dict | list, owned: set[int]) -> dict | list:
    """A walk's copy-on-write step: ``child`` (a plain dict or list not yet the replay's) copied one level, put in
    its place in ``parent`` and made the replay's, so the walk writes into it in place."""
    copied: dict | list = dict(child) if type(child) is dict else list(child)
    parent[part] = copied
    owned.add(id(copied))
    return copied


def _drop_under(walked: dict[tuple[str, ...], Any], tokens: tuple[str, ...]) -> None:
    """Forget the walked containers at or under ``tokens``, whose container is being replaced."""
    n = len(tokens)
    for key in [k for k in walked if len(k) >= n and k[:n] == tokens]:
        del walked[key]
