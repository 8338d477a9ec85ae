"""The suite's tiers (tests/support/tiers.py): every entry of the slow tier names a test that exists, so a renamed
or moved test cannot fall back into the fast tier unnoticed, or a stale entry linger; and the fast tier leaves the
slow tests out, runs them when their file is named, and CI's settings run them all (a nested pytest, collect only)."""

from __future__ import annotations

import ast
import fnmatch
import os
import subprocess
import sys

import pytest
from support.paths import ROOT
from support.tiers import ALL_TIERS_ENV, ASSETS_ENV, SLOW, all_tiers


def _test_names(path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        names |= {f"{cls.name}::{f.name}" for f in cls.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)}
    return {n for n in names if n.split("::")[-1].startswith("test")}


@pytest.mark.parametrize("key", sorted(SLOW))
def test_every_slow_entry_names_a_test_that_exists(key):
    file, _, test = key.partition("::")
    path = ROOT / file
    assert path.is_file() and path.name.startswith("test_"), f"{key}: no such test file"
    assert not file.startswith("tests/integration/"), "the integration tier has its own switch (KUBEBUILDER_ASSETS)"
    if test:
        assert test.partition("[")[0] in _test_names(path), f"{key}: no such test in {file}"
    assert SLOW[key].strip(), "say why it is slow"


def test_every_parametrized_slow_entry_is_a_parametrization_pytest_collects():
    entries = [key for key in SLOW if "[" in key]
    collected = _collected(*sorted({key.split("::")[0] for key in entries}))
    assert not [key for key in entries
                if not fnmatch.filter(collected.get(key.partition("[")[0], ()), key.partition("[")[2][:-1])]


def _collected(*args: str, **env: str) -> dict[str, set[str]]:
    clean = {k: v for k, v in os.environ.items() if k not in (ALL_TIERS_ENV, ASSETS_ENV, "PYTEST_XDIST_WORKER")}
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-o", "addopts=", "-q", "-p", "no:xdist",
                        "-p", "no:cacheprovider", *args], capture_output=True, text=True, cwd=ROOT,
                       env={**clean, **env}, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    out: dict[str, set[str]] = {}
    for line in r.stdout.splitlines():
        if "::" in line:
            test, _, param = line.partition("[")
            out.setdefault(test, set()).add(param[:-1])
    return out


def test_the_fast_tier_leaves_slow_tests_out_unless_asked():
    area = "tests/server/test_server_reload.py"
    in_fast = _collected("tests/server")
    assert in_fast and not any(n.startswith(area) for n in in_fast)
    assert "tests/server/test_server.py::test_http_decisions_equal_trainadmit_check" in in_fast
    assert any(n.startswith(area) for n in _collected(area))  # its file named: it runs


def test_ci_runs_every_tier(monkeypatch):
    """.ci/run sets KUBEBUILDER_ASSETS before `make test`: that alone runs the slow tier too."""
    monkeypatch.delenv(ALL_TIERS_ENV, raising=False)
    monkeypatch.setenv(ASSETS_ENV, "/some/assets")
    assert all_tiers()
    monkeypatch.setenv(ASSETS_ENV, " ")
    assert not all_tiers()
    monkeypatch.setenv(ALL_TIERS_ENV, "1")
    assert all_tiers()


class _Item:
    def __init__(self, nodeid: str, path, slow: bool = False):
        self.nodeid, self.path, self._slow = nodeid, path, slow

    def add_marker(self, marker) -> None:
        self._slow = self._slow or marker.name == "slow"

    def get_closest_marker(self, name: str):
        return self._slow if name == "slow" else None


class _Config:
    def __init__(self, args: list[str]):
        from types import SimpleNamespace

        self.args = args
        self.invocation_params = SimpleNamespace(dir=ROOT)
        self.option = SimpleNamespace(markexpr="")
        self.hook = SimpleNamespace(pytest_deselected=lambda items: self.deselected.extend(items))
        self.deselected: list = []


def test_the_fast_tier_deselects_listed_and_marked_tests_unless_their_file_is_named(monkeypatch):
    """The hook itself, in-process (the nested pytest above is its slow end-to-end twin)."""
    from support import tiers

    monkeypatch.delenv(ALL_TIERS_ENV, raising=False)
    monkeypatch.delenv(ASSETS_ENV, raising=False)
    reload_file = ROOT / "tests/server/test_server_reload.py"
    server_file = ROOT / "tests/server/test_server.py"

    def run(args: list[str]) -> list[str]:
        items = [_Item("tests/server/test_server_reload.py::test_not_ready_without_policy", reload_file),
                 _Item("tests/server/test_server.py::test_marked_by_hand", server_file, slow=True),
                 _Item("tests/server/test_server.py::test_http_decisions_equal_trainadmit_check", server_file)]
        tiers.pytest_collection_modifyitems(_Config(args), items)
        return [i.nodeid.split("::")[1] for i in items]

    assert run(["tests/server"]) == ["test_http_decisions_equal_trainadmit_check"]
    assert run(["tests/server/test_server_reload.py"]) == ["test_not_ready_without_policy",
                                                          "test_http_decisions_equal_trainadmit_check"]
    monkeypatch.setenv(ALL_TIERS_ENV, "1")
    assert len(run(["tests/server"])) == 3
