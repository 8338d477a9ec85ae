"""The paths a Patcher records are RFC 6901 pointers of the paths written, made once per path and remembered
(``patch._pointer``): a remembered pointer is only ever given for a path of str keys and int indices, equal to
it part for part, never for an equal path of other types (``True == 1``, and both are the same dict key)."""

from __future__ import annotations

import importlib

import pytest

from trainadmit.engine.patch import Patcher

patch_module = importlib.import_module("trainadmit.engine.patch")


@pytest.mark.parametrize("limit", [4096, 1])  # 1: the memo is emptied before each pointer it learns
def test_recorded_pointers_are_the_paths_written_each_time(limit, monkeypatch):
    monkeypatch.setattr(patch_module, "_POINTER_TEXT_LIMIT", limit)
    monkeypatch.setattr(patch_module, "_POINTER_TEXT", {})
    patcher = Patcher({"metadata": {"labels": {}}, "b": {}, "l": [{"n": 1}]})
    for round_ in range(2):  # the second round meets every path again
        patcher.set(("metadata", "labels", "a/b~c"), f"v{round_}")
        patcher.set(("b", 1), f"int{round_}")
        patcher.set(("b", True), f"bool{round_}")  # the same dict key as 1, written as Python writes True
        patcher.set(("l", 0, "n"), 10 + round_)
        patcher.append(("l",), round_)
    assert [(op["op"], op["path"]) for op in patcher.ops] == [
        ("add", "/metadata/labels/a~1b~0c"), ("add", "/b/1"), ("replace", "/b/True"), ("replace", "/l/0/n"),
        ("add", "/l/-"),
        ("replace", "/metadata/labels/a~1b~0c"), ("replace", "/b/1"), ("replace", "/b/True"), ("replace", "/l/0/n"),
        ("add", "/l/-")]
    assert all(all(type(p) in (str, int) for p in path) for path in patch_module._POINTER_TEXT)
    assert len(patch_module._POINTER_TEXT) <= (1 if limit == 1 else 4)
