"""``patch.replay`` (the received object with the first stage's patch applied: what `check` prints and the
whole-object rules read) is the Patcher's result, op by op, and shares nothing with the patch it replays.

Its fast path writes in place along paths it walks once; the reference here applies every operation with
``Patcher.set``/``append`` only, as replay did before it had a fast path. A replayed value is a copy: editing
the result never reaches the patch (which the server sends and ``check -o json`` prints), and one value the
patch holds twice is two objects in the result (YAML would write one object met twice as an alias). What no
operation touches is shared with the received object, as a Patcher shares it.
"""

from __future__ import annotations

import copy
import importlib
import json

import jsonpatch
import pytest
from support.manifests import load_yaml
from support.paths import FIXTURES, ROOT

from trainadmit.engine import Request
from trainadmit.engine.patch import Patcher, UndeclaredWrite, replay
from trainadmit.engine.workloads import adapter_for

decide_module = importlib.import_module("trainadmit.engine.decide")


def reference(obj: dict, ops: list[dict]) -> dict:
    """replay through the Patcher's generic writes only (replay before its fast path)."""
    patcher = Patcher(obj, record=False)
    for op in ops:
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]]
        append = bool(tokens) and tokens[-1] == "-"
        if append:
            tokens.pop()
        parts: list = []
        cur = patcher.doc
        for token in tokens:
            part = int(token) if type(cur) is list else token
            parts.append(part)
            cur = cur[part] if type(cur) is list else (cur.get(part) if type(cur) is dict else None)
        if append:
            patcher.append(tuple(parts), op["value"])
            continue
        if op["op"] == "add" and cur is not None:
            raise UndeclaredWrite(op["path"])
        patcher.set(tuple(parts), op["value"])
    return patcher.doc


def containers(value, out: list) -> list:
    """Every dict and list in ``value``, each time it is met."""
    if type(value) in (dict, list):
        out.append(value)
        for v in value.values() if type(value) is dict else value:
            containers(v, out)
    return out


def edit_everything(value) -> None:
    """Change every dict and list of ``value`` in place."""
    for c in containers(value, []):
        if type(c) is dict:
            c["edited-in-place"] = True
        else:
            c.append("edited-in-place")


def patches(policy) -> list[tuple[dict, list[dict]]]:
    out = []
    for path in sorted([*FIXTURES.glob("operators/*/examples/*.yaml"), *FIXTURES.glob("real-world/**/*.yaml"),
                        *(ROOT / "examples").glob("*.yaml")]):
        for obj in load_yaml(path):
            if isinstance(obj, dict) and adapter_for(obj.get("apiVersion"), obj.get("kind")):
                decision = decide_module.decide_declared(policy, Request(obj, namespace="default"))
                if decision.patch:
                    out.append((obj, decision.patch))
    return out


def test_replay_is_the_patchers_result_and_shares_nothing_with_the_patch(policy):
    cases = patches(policy)
    assert len(cases) > 20
    for obj, ops in cases:
        obj_before, ops_before = copy.deepcopy(obj), copy.deepcopy(ops)
        result = replay(obj, ops)
        assert result == reference(obj, ops)
        assert obj == obj_before and ops == ops_before  # neither the object nor the patch is edited
        seen = containers(result, [])
        assert len({id(c) for c in seen}) == len(seen)  # no dict or list met twice
        edit_everything(result)
        assert ops == ops_before, "a replayed value is shared with the patch"


TOLERATION = {"key": "pool", "operator": "Equal", "value": "h100", "effect": "NoSchedule"}


class Sub(dict):
    pass


@pytest.mark.parametrize("obj, ops", [
    # missing and null parents are created as maps
    ({"spec": {}}, [{"op": "add", "path": "/spec/template/spec/nodeSelector", "value": {"a": "b"}}]),
    ({"spec": {"template": None}}, [{"op": "add", "path": "/spec/template/metadata/labels/x", "value": "1"}]),
    # append: to a list, to a missing list, to a null one, the same object twice and to two lists
    ({"a": {"l": [1]}}, [{"op": "add", "path": "/a/l/-", "value": TOLERATION},
                         {"op": "add", "path": "/a/l/-", "value": TOLERATION},
                         {"op": "add", "path": "/a/m/-", "value": TOLERATION},
                         {"op": "add", "path": "/a/n/-", "value": [TOLERATION]}]),
    ({"a": {"l": None}}, [{"op": "add", "path": "/a/l/-", "value": {"x": [1]}}]),
    # replace: an unchanged value, a list item, an item holding what was written under it, a container by a
    # scalar, and a write under what was just written
    ({"a": {"b": {"c": 1}}}, [{"op": "replace", "path": "/a/b", "value": {"c": 1}}]),
    ({"c": [{"n": 1}, {"n": 2}]}, [{"op": "replace", "path": "/c/1/n", "value": 3},
                                   {"op": "replace", "path": "/c/1", "value": {"n": 4}},
                                   {"op": "add", "path": "/c/1/m", "value": {"deep": [TOLERATION]}},
                                   {"op": "add", "path": "/c/1/m/deep/-", "value": "x"},
                                   {"op": "replace", "path": "/c/0", "value": {"n": 1}}]),
    ({"a": {"b": {"c": [1]}}}, [{"op": "replace", "path": "/a/b", "value": "flat"},
                                {"op": "add", "path": "/d", "value": {"e": {}}},
                                {"op": "add", "path": "/d/e/f", "value": TOLERATION}]),
    # escaped tokens, a digit key in a map, a dict subclass on the path (the Patcher's generic walk)
    ({"metadata": {"labels": {}}}, [{"op": "add", "path": "/metadata/labels/a~1b~0c", "value": "v"},
                                    {"op": "add", "path": "/metadata/0", "value": "zero"}]),
    ({"a": Sub(b={"c": 1})}, [{"op": "add", "path": "/a/b/d", "value": 2}]),
    # replay starts a write at the container the last walk under the same parent ended on: what replaces that
    # container, or one above it, is where later writes go (by any spelling of an index), and a write after the
    # Patcher's generic walk starts from the root again
    ({"a": {"l": [1]}}, [{"op": "add", "path": "/a/l/-", "value": 2}, {"op": "replace", "path": "/a", "value": {"l": []}},
                         {"op": "add", "path": "/a/l/-", "value": 3}]),
    ({"a": {"l": [1]}}, [{"op": "add", "path": "/a/l/-", "value": 2}, {"op": "replace", "path": "/a/l", "value": [9]},
                         {"op": "add", "path": "/a/l/-", "value": 3}]),
    ({"a": {"b": {"c": 1}}}, [{"op": "add", "path": "/a/b/d", "value": 2}, {"op": "replace", "path": "/a/b",
                                                                          "value": {"c": 5}},
                              {"op": "add", "path": "/a/b/e", "value": 3}]),
    ({"c": [{"n": 1}, {"n": 2}]}, [{"op": "replace", "path": "/c/1/n", "value": 3},
                                   {"op": "replace", "path": "/c/01", "value": {"n": 5}},
                                   {"op": "add", "path": "/c/1/m", "value": "x"}]),
    ({"a": {"b": {}}, "s": Sub(t={})}, [{"op": "add", "path": "/a/b/x", "value": 1},
                                       {"op": "add", "path": "/s/t/u", "value": 2},
                                       {"op": "add", "path": "/a/b/y", "value": 3}]),
])
def test_replay_edge_cases_match_the_patcher(obj, ops):
    obj_before, ops_before = copy.deepcopy(obj), copy.deepcopy(ops)
    result = replay(obj, ops)
    assert result == reference(obj, ops)
    assert obj == obj_before and ops == ops_before
    seen = containers(result, [])
    assert len({id(c) for c in seen}) == len(seen)
    edit_everything(result)  # the untouched parts of the object are shared with it (copy-on-write), the patch never
    assert ops == ops_before


@pytest.mark.parametrize("obj, ops", [
    ({"a": "scalar"}, [{"op": "add", "path": "/a/b", "value": 1}]),  # a scalar parent: TypeError
    ({"a": [1]}, [{"op": "add", "path": "/a/5", "value": 1}]),  # an index past the end: IndexError
    ({"a": {"b": 1}}, [{"op": "add", "path": "/a/b", "value": 2}]),  # an add over a member: UndeclaredWrite
    ({"a": 1}, [{"op": "add", "path": "", "value": 2}]),  # the root: IndexError
    # a write under a container that a scalar replaced since replay last wrote under it: TypeError
    ({"a": {"b": {}}}, [{"op": "add", "path": "/a/b/x", "value": 1}, {"op": "replace", "path": "/a/b", "value": "s"},
                        {"op": "add", "path": "/a/b/y", "value": 2}]),
    # an add over a member that a write under the same parent made: UndeclaredWrite
    ({"a": {}}, [{"op": "add", "path": "/a/x", "value": 1}, {"op": "add", "path": "/a/x", "value": 2}]),
])
def test_replay_refuses_as_the_patcher_does(obj, ops):
    with pytest.raises(Exception) as expected:
        reference(obj, ops)
    with pytest.raises(expected.type):
        replay(obj, ops)


def test_a_negative_index_writes_where_it_points():
    """The engine writes no negative index; replay reads one as Python does (the last item), and a later write
    under that item by its positive index lands in the item now there. (A Patcher holding the item it reached by
    ``/c/1`` before ``/c/-1`` replaced it wrote into the replaced one.)"""
    ops = [{"op": "replace", "path": "/c/1/n", "value": 3}, {"op": "replace", "path": "/c/-1", "value": {"n": 4}},
           {"op": "add", "path": "/c/1/m", "value": "x"}]
    assert replay({"c": [{"n": 1}, {"n": 2}]}, ops) == {"c": [{"n": 1}, {"n": 4, "m": "x"}]}


@pytest.mark.parametrize("obj, ops, stored", [
    ({"c": [{"n": 1}, {"n": 2}]}, [{"op": "replace", "path": "/c/-1/n", "value": 3},
                                   {"op": "replace", "path": "/c/1", "value": {"n": 5}},
                                   {"op": "add", "path": "/c/-1/m", "value": "x"}],
     {"c": [{"n": 1}, {"n": 5, "m": "x"}]}),
    ({"c": [{"n": 1}]}, [{"op": "add", "path": "/c/0/m", "value": "x"}, {"op": "replace", "path": "/c/0/n", "value": 2},
                         {"op": "replace", "path": "/c/-1", "value": {"n": 7}}, {"op": "add", "path": "/c/0/o", "value": 1}],
     {"c": [{"n": 7, "o": 1}]}),
])
def test_a_replaced_item_is_where_later_writes_go_by_either_spelling_of_its_index(obj, ops, stored):
    """replay starts a write at the container its last walk under the same parent ended on; a write replacing a
    list item by its other spelling (``-1`` for the last) forgets them all, so a later write lands in the new item
    (the Patcher, whose cache is keyed by the index as written, writes into the replaced one: no reference here)."""
    assert replay(obj, ops) == stored


NESTED = {"b": {"c": [dict(TOLERATION)], "d": {}}}


@pytest.mark.parametrize("ops", [
    # writes under the maps and lists nested in a value replay wrote: each is copied (again) before it is edited
    [{"op": "add", "path": "/a/v", "value": NESTED}, {"op": "add", "path": "/a/v/b/x", "value": 1},
     {"op": "add", "path": "/a/v/b/c/-", "value": "y"}, {"op": "replace", "path": "/a/v/b/c/0/value", "value": "a100"},
     {"op": "add", "path": "/a/v/b/d/e", "value": NESTED}, {"op": "add", "path": "/a/v/b/d/e/b/d/f", "value": 2}],
    # the same, where the first write into the nested map is through the parent the last walk ended on
    [{"op": "add", "path": "/a/w", "value": [NESTED, NESTED]}, {"op": "add", "path": "/a/w/1/b/x", "value": 1},
     {"op": "add", "path": "/a/w/1/b/y", "value": 2}, {"op": "add", "path": "/a/w/0/b/c/-", "value": "z"},
     {"op": "add", "path": "/a/w/-", "value": NESTED}],
])
def test_writes_under_what_replay_wrote_are_jsonpatchs_result_and_reach_no_value(ops):
    """A replayed value is copied whole, but only its top map or list is registered as replay's: a write under a
    map or list nested in it copies that one first. The result is jsonpatch's, the patch's values are untouched,
    and no container is met twice (the patch holds NESTED several times)."""
    obj = {"a": {"k": [1]}}
    ops_before = copy.deepcopy(ops)
    result = replay(obj, ops)
    assert result == jsonpatch.apply_patch(obj, json.loads(json.dumps(ops)))  # as the apiserver gets it
    assert ops == ops_before and obj == {"a": {"k": [1]}}
    seen = containers(result, [])
    assert len({id(c) for c in seen}) == len(seen)
    edit_everything(result)
    assert ops == ops_before


def test_a_patchers_writes_under_what_it_wrote_leave_its_patch_as_written():
    """The Patcher registers only the top of a value it copies in: writes under the nested maps and lists copy them
    first, so the recorded values stay as written, and the patch applied by jsonpatch gives the document."""
    patcher = Patcher({"a": {}})
    patcher.set(("a", "v"), NESTED)
    patcher.set(("a", "v", "b", "x"), 1)
    patcher.append(("a", "v", "b", "c"), "y")
    patcher.set(("a", "v", "b", "c", 0, "value"), "a100")
    patcher.set(("a", "v", "b", "d", "e"), 3)
    assert NESTED == {"b": {"c": [TOLERATION], "d": {}}}
    assert patcher.ops[0]["value"] is NESTED
    assert patcher.doc == jsonpatch.apply_patch({"a": {}}, json.loads(json.dumps(patcher.ops)))
    assert patcher.doc["a"]["v"] == {"b": {"c": [{**TOLERATION, "value": "a100"}, "y"], "d": {"e": 3}, "x": 1}}


@pytest.mark.parametrize("obj, ops", [
    # a walk starts at the deepest container above its parent that an earlier walk ended on: below it, a member
    # replaced since (and the entries under it forgotten), and a write under a value replay wrote there
    ({"a": {"b": {"c": {"d": {}}}}}, [{"op": "add", "path": "/a/b/x", "value": 1},
                                      {"op": "add", "path": "/a/b/c/d/y", "value": 2},
                                      {"op": "replace", "path": "/a/b/c", "value": {"d": {"k": [1]}}},
                                      {"op": "add", "path": "/a/b/c/d/z", "value": 3},
                                      {"op": "add", "path": "/a/b/c/d/k/-", "value": 4},
                                      {"op": "replace", "path": "/a/b", "value": {"c": {"d": {}}}},
                                      {"op": "add", "path": "/a/b/c/d/w", "value": 5}]),
    # the container started at is a list: an item appended to it, an item it had, and a new list in its place
    ({"l": [{"m": {}}], "n": {}}, [{"op": "add", "path": "/l/-", "value": {"m": {"q": 1}}},
                                   {"op": "add", "path": "/l/0/m/k", "value": 1},
                                   {"op": "add", "path": "/l/1/m/k", "value": 2},
                                   {"op": "add", "path": "/n/o", "value": 0},
                                   {"op": "replace", "path": "/l", "value": [{"m": {}}]},
                                   {"op": "add", "path": "/l/0/m/j", "value": 3}]),
    # below the container started at, a dict subclass: the Patcher's generic walk from the root
    ({"a": {"b": {"s": Sub(t={})}}}, [{"op": "add", "path": "/a/b/x", "value": 1},
                                      {"op": "add", "path": "/a/b/s/t/u", "value": 2},
                                      {"op": "add", "path": "/a/b/y", "value": 3},
                                      {"op": "add", "path": "/a/b/s/t/v", "value": 4}]),
    # below it, a missing parent and a null one: created as maps
    ({"a": {"b": {"n": None}}}, [{"op": "add", "path": "/a/b/x", "value": 1},
                                 {"op": "add", "path": "/a/b/m/p/q", "value": 2},
                                 {"op": "add", "path": "/a/b/n/p", "value": 3}]),
])
def test_a_walk_from_a_container_an_earlier_walk_ended_on_is_jsonpatchs_result(obj, ops):
    """Where jsonpatch creates no missing parent, the expectation is jsonpatch's after the missing maps are
    added, as replay (and the Patcher) adds them."""
    obj_before, ops_before = copy.deepcopy(obj), copy.deepcopy(ops)
    result = replay(obj, ops)
    expected = jsonpatch.apply_patch(obj, json.loads(json.dumps(_with_parents(obj, ops))))
    assert result == expected
    assert obj == obj_before and ops == ops_before
    seen = containers(result, [])
    assert len({id(c) for c in seen}) == len(seen)
    edit_everything(result)
    assert ops == ops_before


def _with_parents(obj: dict, ops: list[dict]) -> list[dict]:
    """``ops`` with an ``add`` of an empty map before each operation whose parent is missing or null."""
    out: list[dict] = []
    doc = copy.deepcopy(obj)
    for op in ops:
        tokens = op["path"].split("/")[1:]
        parents = tokens[:-1]
        for n in range(1, len(parents) + 1):
            cur = doc
            for token in parents[:n]:
                cur = cur[int(token)] if type(cur) is list else cur.get(token)
            if cur is None:
                extra = {"op": "add", "path": "/" + "/".join(parents[:n]), "value": {}}
                out.append(extra)
                doc = jsonpatch.apply_patch(doc, [extra])
        out.append(op)
        doc = jsonpatch.apply_patch(doc, json.loads(json.dumps([op])))
    return out
