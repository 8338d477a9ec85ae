"""The package's folders are its layers: dependencies point down only, there are no import cycles,
and the engine imports nothing that does I/O. Imports are read from the source (``ast``), including
the ones inside functions, so a lazy import cannot hide an upward dependency. The tests' folders are
their areas, and their shared code is imported from ``support``, never from a conftest."""

from __future__ import annotations

import ast
import re
import tomllib
from collections import Counter
from pathlib import Path

import pytest
from support.layout import LAYERS
from support.paths import ROOT

PACKAGE_DIRS = {"trainadmit": ROOT / "webhook", "trainadmit.certs": ROOT / "certs"}
IO_MODULES = {"socket", "subprocess", "http", "urllib", "requests", "kubernetes", "flask", "werkzeug", "gunicorn",
              "prometheus_client", "threading", "time", "datetime", "ssl", "shutil", "tempfile"}


def _modules() -> dict[str, Path]:
    out = {}
    for package, folder in PACKAGE_DIRS.items():
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([package, *parts])
            if package == "trainadmit" and parts[:1] == ["certs"]:
                continue
            out[name] = path
    return out


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _imports(name: str, type_only: bool = False, source: str | None = None) -> set[str]:
    """Absolute names this module imports; those inside ``if TYPE_CHECKING:`` blocks only with ``type_only``
    (a cycle through them is still a cycle: the modules cannot be read, typed or moved one without the other)."""
    tree = ast.parse(MODULES[name].read_text() if source is None else source)
    found: set[str] = set()
    skip: set[int] = set()
    for node in ast.walk(tree):
        if not type_only and isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            skip.update(id(n) for n in ast.walk(node))
    base = name if _is_package(name) else name.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                module = ".".join([*anchor, node.module] if node.module else anchor)
            else:
                module = node.module or ""
            found.add(module)
            for alias in node.names:  # `from . import x` imports the submodule x
                if f"{module}.{alias.name}" in MODULES:
                    found.add(f"{module}.{alias.name}")
    return found


def _internal(name: str, type_only: bool = False) -> set[str]:
    return {m for m in _imports(name, type_only) if m in MODULES and m != name}


def _layer(name: str) -> tuple[str, int] | None:
    parts = name.split(".")
    top = parts[1] if len(parts) > 1 else None
    return (top, LAYERS[top]) if top in LAYERS else None


def test_the_module_list_is_found():
    assert "trainadmit.engine.decide" in MODULES and "trainadmit.certs.pki" in MODULES
    assert len(MODULES) > 40


@pytest.mark.parametrize("name", sorted(MODULES))
def test_dependencies_point_down(name):
    mine = _layer(name)
    for target in _internal(name):
        theirs = _layer(target)
        if mine is None or theirs is None:
            continue
        assert theirs[1] < mine[1] or theirs[0] == mine[0], f"{name} imports {target} from a layer above or beside"


def _import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports, ``TYPE_CHECKING`` imports included."""
    graph = {name: _internal(name, type_only=True) for name in MODULES}
    # a package's __init__ re-exporting its own modules is not a cycle through them
    for name in graph:
        if _is_package(name):
            graph[name] = {t for t in graph[name] if not t.startswith(name + ".")}
    return graph


def test_type_checking_imports_are_read_for_cycles():
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .context import Context\n"
    assert "trainadmit.engine.context" in _imports("trainadmit.engine.concern", type_only=True, source=source)
    assert "trainadmit.engine.context" not in _imports("trainadmit.engine.concern", source=source)


def test_no_import_cycles():
    _assert_acyclic(_import_graph())


def test_a_cycle_through_a_type_only_import_is_found():
    graph = _import_graph()
    graph["trainadmit.engine.rule"] = {*graph["trainadmit.engine.rule"], "trainadmit.engine.context"}
    with pytest.raises(AssertionError, match="import cycle"):
        _assert_acyclic(graph)


def _assert_acyclic(graph: dict[str, set[str]]) -> None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = [*stack[stack.index(nxt):], nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_the_engine_does_no_io():
    for name in MODULES:
        if not name.startswith("trainadmit.engine"):
            continue
        external = {m.split(".")[0] for m in _imports(name) if not m.startswith("trainadmit")}
        assert not external & IO_MODULES, f"{name} imports {sorted(external & IO_MODULES)}"


def test_the_preflight_imports_only_the_standard_library_and_grammars():
    """It runs in every training Pod's init container: no policy models, engine, web server or client."""
    import sys

    for name in MODULES:
        if not name.startswith("trainadmit.preflight"):
            continue
        for module in _imports(name):
            top = module.split(".")[0]
            if module.startswith("trainadmit"):
                assert module.startswith(("trainadmit.grammars", "trainadmit.preflight")), f"{name} imports {module}"
            else:
                assert top in sys.stdlib_module_names or top == "__future__", f"{name} imports {module}"


def test_pyproject_lists_every_package():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = {name for name in MODULES if _is_package(name)}
    assert set(config["packages"]) == packages
    assert config["package-dir"] == {k: v.name for k, v in PACKAGE_DIRS.items()}


def _distribution(requirement: str) -> str:
    """The normalized distribution name of a PEP 508 requirement (``flask>=3.0`` -> ``flask``)."""
    import re

    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement).group()).lower()


def test_every_third_party_import_is_a_declared_runtime_dependency():
    """A module reached only through another dependency (werkzeug through flask) disappears when that one
    stops requiring it: what the package imports, it declares. Modules map to distributions as installed."""
    import sys
    from importlib.metadata import packages_distributions

    declared = {_distribution(r) for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]}
    providers = packages_distributions()
    missing = {}
    for name in MODULES:
        for module in _imports(name):
            top = module.split(".")[0]
            if not top or top == "trainadmit" or top in sys.stdlib_module_names or top == "__future__":
                continue
            dists = {_distribution(d) for d in providers.get(top, [top])}
            if not dists & declared:
                missing.setdefault(top, set()).add(name)
    assert not missing, f"imported but not in [project] dependencies: {missing}"


def test_comments_state_the_invariant_not_the_issue_that_introduced_it():
    """Code says why it is so, in its own terms: a reference to an issue or a row of one ("issue 11, row 3")
    means nothing to the next engineer, and neither does a section of a document that is not in the project."""
    import re

    history = re.compile(r"\bissue \d|\bDESIGN §")
    found = [f"{path.relative_to(ROOT)}:{i}" for folder in PACKAGE_DIRS.values() for path in sorted(folder.rglob("*.py"))
             for i, line in enumerate(path.read_text().splitlines(), 1) if history.search(line)]
    assert not found, found


TESTS = ROOT / "tests"
# every test module lives in one of these folders of tests/ (each with its conftest.py for its own fixtures)
TEST_AREAS = ("engine", "workloads", "server", "cli", "policy", "cluster", "project", "integration")
NOT_AREAS = {"support", "fixtures", "__pycache__"}


def _test_code() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "fixtures" not in p.relative_to(TESTS).parts)


def _imports_of(path: Path, text: str) -> list[tuple[int, str]]:
    """(line, top-level module) of every absolute import in the file, and of every import line in its strings
    (a nested pytest's test text)."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name.split(".")[0]) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found.append((node.lineno, (node.module or "").split(".")[0]))
    as_text = re.compile(r"^\s*(?:from\s+(\w+)[\w.]*\s+import|import\s+(\w+))", re.M)
    found += [(text.count(chr(10), 0, m.start()) + 1, m.group(1) or m.group(2)) for m in as_text.finditer(text)]
    return found


def test_no_test_code_imports_a_conftest_or_a_test_module():
    """The suite has a conftest.py per area and one for all: ``import conftest`` gets whichever pytest loaded
    last. A test module importing another's builders (``from test_operators import gpu_job``) needs that
    module's folder on ``sys.path`` and runs its module-level code in every importer. What tests share is
    imported from ``support``; a nested pytest's test text (in a string) too."""
    found = sorted({f"{path.relative_to(ROOT)}:{line} imports {name}" for path in _test_code()
                    for line, name in _imports_of(path, path.read_text())
                    if name == "conftest" or name.startswith("test_")})
    assert not found


def test_every_test_module_lives_in_an_area_folder():
    folders = {d.name for d in TESTS.iterdir() if d.is_dir()} - NOT_AREAS
    assert folders == set(TEST_AREAS), "a folder of tests/ that is not an area, or an area without its folder"
    misplaced = [str(p.relative_to(ROOT)) for p in TESTS.rglob("test_*.py")
                 if "fixtures" not in p.relative_to(TESTS).parts
                 and (p.parent.parent != TESTS or p.parent.name not in TEST_AREAS)]
    assert not misplaced, f"not in an area folder ({', '.join(TEST_AREAS)}): {misplaced}"
    assert all((TESTS / area / "conftest.py").is_file() for area in TEST_AREAS)
    assert not list((TESTS / "support").glob("test_*.py")) and not (TESTS / "support" / "conftest.py").exists()


def test_test_modules_are_importable_by_their_names():
    """pytest imports a test module by its file name (folders without ``__init__.py``): two test files of one
    name would be one module. pyproject puts only tests/ on ``pythonpath`` (for ``support``): no area folder,
    so no test module can be imported by another's name."""
    names = Counter(p.name for p in TESTS.rglob("test_*.py") if "fixtures" not in p.relative_to(TESTS).parts)
    assert not [n for n, count in names.items() if count > 1]
    pythonpath = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["pythonpath"]
    assert pythonpath == ["tests"]
