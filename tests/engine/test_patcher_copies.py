"""A Patcher copies what it writes: no later write, under a value or over it, edits a value its caller passed or
its patch holds, and the patch applied to the received object (by jsonpatch, not by us) gives its document (sent as JSON,
as the apiserver receives it)."""

from __future__ import annotations

import copy
import json

import jsonpatch

from trainadmit.engine.patch import Patcher

ENTRY = {"name": "NCCL_DEBUG", "value": "WARN"}


def writes(p: Patcher, values: dict) -> None:
    p.set(("spec", "template", "spec", "tolerations"), values["tolerations"])
    p.append(("spec", "template", "spec", "tolerations"), values["toleration"])
    p.set(("spec", "template", "spec", "tolerations", 0, "value"), "b200")  # under a written list's item
    p.extend(("spec", "template", "spec", "containers", 0, "env"), [values["entry"], values["entry"]])
    p.set(("spec", "template", "spec", "containers", 0, "env", 1, "value"), "INFO")  # one of a value met twice
    p.set(("metadata", "labels"), values["labels"])
    p.set(("metadata", "labels", "team"), "b")  # under a written map
    p.set(("metadata", "labels"), {"fresh": "1"})  # over it: what it replaces is kept, never reused
    for i in range(50):  # new values made after the replacement (a freed id would be reused by one of them)
        p.set(("metadata", "annotations", f"k{i}"), {"n": i})
        p.set(("metadata", "annotations", f"k{i}", "m"), i)
    p.set(("spec", "nested", "deep", "x"), values["labels"])  # missing parents built around a value
    p.set(("spec", "nested", "deep", "x", "team"), "c")


def values() -> dict:
    return {"tolerations": [{"key": "pool", "value": "h100"}], "toleration": {"key": "gpu"}, "entry": ENTRY,
            "labels": {"team": "a"}}


def test_a_patcher_never_edits_what_it_was_given_and_its_patch_gives_its_document():
    obj = {"metadata": {"name": "j"}, "spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}}
    obj_before = copy.deepcopy(obj)
    patcher = Patcher(obj)
    written = values()
    writes(patcher, written)
    assert written == values(), "a written value was edited by a later write"
    assert obj == obj_before
    assert jsonpatch.apply_patch(obj, json.loads(json.dumps(patcher.ops))) == patcher.doc  # as the apiserver gets it
    assert patcher.doc["metadata"]["labels"] == {"fresh": "1"}
    assert patcher.doc["spec"]["template"]["spec"]["tolerations"][0] == {"key": "pool", "value": "b200"}
    assert [e["value"] for e in patcher.doc["spec"]["template"]["spec"]["containers"][0]["env"]] == ["WARN", "INFO"]
