"""The kube-apiserver's structural pruning, emulated: what a CRD's schema keeps of an object.

A custom resource field its CRD's structural schema does not declare is dropped silently when the
object is stored; trainadmit must never inject such a field (the user would believe in an injection
that is not there). ``pruned(obj, crd)`` returns the fields the apiserver would drop; the real
apiserver tier (tests/integration) confirms the emulation on the same CRDs.

Rules (k8s.io/apiextensions-apiserver pkg/apiserver/schema/pruning): an object keeps the properties
its schema lists, or every key when ``additionalProperties`` (a schema: applied to each value) or
``x-kubernetes-preserve-unknown-fields: true`` says so; arrays prune each item; the root's
apiVersion/kind/metadata and an ``x-kubernetes-embedded-resource``'s are kept (their metadata is
ObjectMeta, which the apiserver keeps whole).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml


@cache
def crd_schema(crd_file: Path, version: str) -> dict:
    crd = yaml.load(Path(crd_file).read_text(), Loader=yaml.CSafeLoader)
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            return v["schema"]["openAPIV3Schema"]
    raise KeyError(f"{crd_file} has no version {version}")


def pruned(obj: Any, schema: dict) -> list[str]:
    """The paths the apiserver would drop from ``obj`` (an empty list: nothing is lost)."""
    out: list[str] = []
    _walk(obj, schema, "", out, root=True)
    return out


def _walk(value: Any, schema: dict, path: str, out: list[str], root: bool = False) -> None:
    preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True
    embedded = root or schema.get("x-kubernetes-embedded-resource") is True
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if embedded and key in ("apiVersion", "kind", "metadata"):
                continue
            if props is not None and key in props:
                _walk(item, props[key], where, out)
            elif isinstance(extra, dict):
                _walk(item, extra, where, out)
            elif extra is True or preserve:
                continue
            else:
                out.append(where)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _walk(item, schema["items"], f"{path}[{i}]", out)
