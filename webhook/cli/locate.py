"""The line of an offending field in the manifest the user wrote, for reports a code-review tool places.

A violation names a field of the object (``spec.template.spec.containers[0].resources.limits
["nvidia.com/gpu"]``); the object sits somewhere in a document of a file (a List's item, an
AdmissionReview's ``request.object``). ``Locator`` composes a file's YAML again, with line marks, only
when a report asks for a line, and keeps one file at a time (inputs are read in order). A field the
object does not have (a missing limit) is placed at the deepest part of its path that exists. stdin
cannot be read twice: its results carry the object and the field, without a line.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from ..policy.loader import field_line
from .inputs import STDIN_NAME, Item

_PART = re.compile(r'\["((?:[^"\\]|\\.)*)"\]|\[(\d+)\]|\.?([^.\[\]]+)')


def parse_field_path(path: str) -> tuple[str | int, ...]:
    """The inverse of ``engine.paths.field_path``: ``a.b[0]["x/y"]`` -> ("a", "b", 0, "x/y")."""
    out: list[str | int] = []
    for quoted, index, name in _PART.findall(path):
        if index:
            out.append(int(index))
        elif name:
            out.append(name)
        else:
            out.append(quoted.replace('\\"', '"').replace("\\\\", "\\"))
    return tuple(out)


class Locator:
    def __init__(self) -> None:
        self._file: str | None = None
        self._documents: dict[int, object] = {}

    def _load(self, file: str) -> None:
        self._file, self._documents = file, {}
        try:
            text = Path(file).read_text(encoding="utf-8")
            nodes = list(yaml.compose_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))
        except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError):
            return
        if text.lstrip().startswith("[") and len(nodes) == 1 and isinstance(nodes[0], yaml.SequenceNode):
            nodes = list(nodes[0].value)  # a JSON array: each element is a document (``inputs``)
        self._documents = {i: node for i, node in enumerate(nodes, start=1) if node is not None}

    def line(self, item: Item, path: str) -> int | None:
        """1-based line of ``path`` (a violation's field) in the object ``item`` came from; None for stdin
        or a file that no longer parses."""
        if item.source == STDIN_NAME:
            return None
        if item.source != self._file:
            self._load(item.source)
        node = self._documents.get(item.index)
        if node is None:
            return None
        loc = (*item.within, *parse_field_path(path))
        return field_line(node, loc) or field_line(node, item.within) or node.start_mark.line + 1
