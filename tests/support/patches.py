"""JSON patches as the apiserver applies them, and what a mutation injected."""

from __future__ import annotations

import json

import jsonpatch


def apply_patch(obj: dict, ops: list[dict]) -> dict:
    """Apply an RFC 6902 patch strictly, on a JSON round-trip copy, as the apiserver does."""
    doc = json.loads(json.dumps(obj))
    return jsonpatch.JsonPatch(ops).apply(doc, in_place=False)


def flatten(obj, prefix="") -> dict[str, object]:
    """JSON-pointer -> scalar for every leaf (empty maps/lists count as leaves)."""
    out: dict[str, object] = {}
    if isinstance(obj, dict) and obj:
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}/{str(k).replace('~', '~0').replace('/', '~1')}"))
    elif isinstance(obj, list) and obj:
        for i, v in enumerate(obj):
            out.update(flatten(v, f"{prefix}/{i}"))
    else:
        out[prefix] = obj
    return out


def injected_leaves(before: dict, after: dict) -> dict[str, object]:
    """Leaves that the mutation added or changed (what trainadmit injected)."""
    b, a = flatten(before), flatten(after)
    return {k: v for k, v in a.items() if b.get(k, object()) != v and not (v == {} and k not in b)}
