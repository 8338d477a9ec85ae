"""``Patcher(share=True)`` (the first stage's document: only read, what is stored is ``replay``'s) puts the values
it writes in as they are: its document and patch are a copying Patcher's, and no later write, under a value or
over it, edits a value the patch holds (a write under one copies it first)."""

from __future__ import annotations

import copy

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


def test_a_sharing_patcher_writes_what_a_copying_one_writes_and_never_edits_the_patch():
    obj = {"metadata": {"name": "j"}, "spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}}
    obj_before = copy.deepcopy(obj)
    copying, sharing = Patcher(obj), Patcher(obj, share=True)
    written = values()
    writes(copying, values())
    writes(sharing, written)
    assert sharing.doc == copying.doc
    assert sharing.ops == copying.ops
    assert written == values(), "a written value was edited by a later write"
    assert obj == obj_before
    for op in sharing.ops:  # what each operation recorded is what it wrote, not what later writes made of it
        assert op in copying.ops
