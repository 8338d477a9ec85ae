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
