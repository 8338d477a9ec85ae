"""Paths into Kubernetes objects: reading nested values, JSON pointers, and field paths for people.

A path is a tuple of map keys and list indices, e.g. ``("spec", "template", "spec", "containers", 0)``.
"""

from __future__ import annotations

from typing import Any

Path = tuple[str | int, ...]


def get_path(doc: Any, path: Path, default: Any = None) -> Any:
    """Read a nested value; a missing key, wrong type or null along the way gives ``default``."""
    cur = doc
    for part in path:
        if isinstance(part, int):
            if not isinstance(cur, list) or part >= len(cur):
                return default
        elif not isinstance(cur, dict) or part not in cur:
            return default
        cur = cur[part]
        if cur is None:
            return default
    return cur


def with_values(obj: dict, values: dict[Path, Any]) -> dict:
    """``obj`` with the fields at ``values`` set, missing parents created: copies along those paths only, the rest is
    shared (``obj`` is left as it is)."""
    out = dict(obj)
    for path, value in values.items():
        cur: Any = out
        for i, part in enumerate(path[:-1]):
            nxt = cur[part] if isinstance(cur, list) else cur.get(part)
            nxt = list(nxt) if isinstance(nxt, list) else dict(nxt) if isinstance(nxt, dict) else \
                ([] if isinstance(path[i + 1], int) else {})
            cur[part] = nxt
            cur = nxt
        cur[path[-1]] = value
    return out


def as_dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list:
    return value if isinstance(value, list) else []


def escape(token: str | int) -> str:
    """JSON-pointer escaping: ``nvidia.com/gpu`` becomes ``nvidia.com~1gpu``."""
    text = str(token)
    if "~" in text or "/" in text:
        return text.replace("~", "~0").replace("/", "~1")
    return text


def pointer(path: Path) -> str:
    return "/" + "/".join(map(escape, path)) if path else ""


_KEYED_MAPS = ("labels", "annotations", "limits", "requests", "nodeSelector")


def field_path(path: Path) -> str:
    """Human field path: spec.template.spec.containers[0].env, labels as ["key"]."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif "/" in part or ("." in part and out.endswith(_KEYED_MAPS)):
            out += f'["{part}"]'
        else:
            out += ("." if out else "") + part
    return out
