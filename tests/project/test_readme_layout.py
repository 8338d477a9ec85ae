"""The README's Layout is the tree: every folder and file it names exists where it says, and every top-level
folder, every sub-package of the package and every test area is named (a move or a new layer that the map
does not show fails here, not in a newcomer's first hour)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"[\w.-]+/|[\w-]+\.(?:py|md|json|yaml|toml)")


def _layout_block() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("\n## Layout"):]
    start = section.index("```\n") + 4
    return section[start:section.index("```", start)].splitlines()


def _named() -> list[tuple[str, int]]:
    """(path, line number) of each name the map puts at the start of a line, under the folder it is indented
    under. Continuation lines (indented past the names' columns) only describe."""
    parents: dict[int, str] = {}
    found = []
    for number, line in enumerate(_layout_block(), 1):
        indent = len(line) - len(line.lstrip(" "))
        if not line.strip() or indent > 6:
            continue
        parent = parents.get(indent - 2, "") if indent else ""
        rest = line.strip()
        while True:  # names at the start: "a/", "a.py, b.py", "engine/ workloads/ server/"
            m = NAME.match(rest)
            if not m:
                break
            name = m.group(0)
            found.append((parent + name, number))
            if name.endswith("/"):
                parents[indent] = parent + name
            rest = rest[m.end():].lstrip(", ")
            if rest.startswith("("):
                break
    return found


def _disk(path: str) -> Path:
    first, _, rest = path.partition("/")
    return ROOT / ("webhook" if first == "webhook" else first) / rest


def test_every_name_in_the_layout_exists_where_it_says():
    missing = [(path, line) for path, line in _named() if not _disk(path).exists()]
    assert not missing, f"the README's Layout names paths that do not exist: {missing}"


def test_every_top_level_folder_package_layer_and_test_area_is_in_the_layout():
    named = {path for path, _ in _named()}
    block = "\n".join(_layout_block())
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    top = {line.split("/")[0] + "/" for line in tracked.splitlines() if "/" in line and not line.startswith(".")}
    unnamed = sorted(t for t in top if not re.search(rf"(?m)(^|\s){re.escape(t)}", block))
    assert not unnamed, f"top-level folders missing from the README's Layout: {unnamed}"
    layers = {f"webhook/{p.name}/" for p in (ROOT / "webhook").iterdir() if (p / "__init__.py").exists()}
    areas = {f"tests/{p.name}/" for p in (ROOT / "tests").iterdir()
             if p.is_dir() and p.name not in ("fixtures", "__pycache__") and not p.name.startswith(".")}
    assert sorted(layers - named) == [], "sub-packages of webhook/ missing from the README's Layout"
    assert sorted(areas - named) == [], "test folders missing from the README's Layout"
