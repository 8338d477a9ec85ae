"""`trainadmit check` imports only what checking needs: it runs per file in pre-commit hooks and CI
steps, where every import is paid on every call. Real program runs (a fresh interpreter each, as
the console script starts one) report the modules they loaded; a heavy module that creeps back onto
the check path fails here. With the policy cache warm, not even pydantic is loaded."""

from __future__ import annotations

import json

import pytest
from support.cli import loaded, program_modules
from support.paths import EXAMPLES, FIXTURES, POLICIES

NEVER = ("kubernetes", "flask", "werkzeug", "gunicorn", "prometheus_client", "cryptography", "jinja2", "urllib3",
         "requests", "http.server", "ssl", "trainadmit.server", "trainadmit.certs", "trainadmit.cluster.live",
         "trainadmit.cluster.kube", "trainadmit.cluster.lease", "trainadmit.cluster.reconciler",
         "trainadmit.authoring")
# pydantic validates a policy the cache has not seen (and imports shutil, as argparse's help does)
WARM_NEVER = ("pydantic", "pydantic_core", "trainadmit.policy.models", "shutil")
# one manifest with the policy cache warm (a pre-commit hook's call): the engine, the cached policy, the YAML reader
# and the text output, nothing else of the program (other commands, the cluster side, the node checks) and none of
# the standard library's heavier modules, which each cost milliseconds of every call
ONE_MANIFEST_NEVER = ("trainadmit.cluster", "trainadmit.preflight", "trainadmit.engine.platform",
                      "trainadmit.policy.loader", "trainadmit.cli.audit", "trainadmit.cli.serve", "trainadmit.cli.policy",
                      "trainadmit.cli.cireports", "trainadmit.cli.streamlists", "jsonpatch", "jsonschema", "orjson",
                      "subprocess", "socket", "tempfile", "logging", "email", "http", "asyncio", "concurrent",
                      "multiprocessing", "uuid", "random", "zipfile", "tarfile", "bz2", "lzma", "zlib",
                      "importlib.metadata", "pkgutil", "statistics", "pprint", "textwrap", "signal", "selectors")

def check_modules(cache_dir, *args: str) -> tuple[int, str, set[str]]:
    return program_modules("check", "-p", str(POLICIES), *args, env={"TRAINADMIT_CACHE_DIR": str(cache_dir)})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    cache_dir = tmp_path_factory.mktemp("cache")
    llama = str(EXAMPLES / "llama-pretrain.yaml")
    return {
        "cold": check_modules(cache_dir, llama, "-o", "yaml"),
        "warm": check_modules(cache_dir, llama),
        "warm-cluster-json": check_modules(cache_dir, str(EXAMPLES), "-o", "json",
                                           "--cluster", str(FIXTURES / "apiserver" / "nodes-list.json")),
    }


def test_the_runs_really_checked(runs):
    assert runs["cold"][0] == 0 and "kind: Job" in runs["cold"][1]
    assert runs["warm"][0] == 0 and "ADMITTED" in runs["warm"][1]
    assert runs["warm-cluster-json"][0] == 1 and json.loads(runs["warm-cluster-json"][1])
    assert "trainadmit.engine.decide" in runs["warm"][2]
    assert "trainadmit.cluster.snapshot" in runs["warm-cluster-json"][2]  # --cluster reads the snapshot ...
    assert "trainadmit.cluster.snapshot" not in runs["warm"][2]  # ... only when asked


@pytest.mark.parametrize("run", ["cold", "warm", "warm-cluster-json"])
def test_no_server_metrics_kubernetes_or_certificate_modules(runs, run):
    assert loaded(runs[run][2], NEVER) == []


@pytest.mark.parametrize("run", ["warm", "warm-cluster-json"])
def test_with_the_policy_cache_warm_no_pydantic(runs, run):
    assert loaded(runs[run][2], WARM_NEVER) == []


def test_one_manifest_loads_only_what_deciding_it_needs(runs):
    assert loaded(runs["warm"][2], ONE_MANIFEST_NEVER) == []


def test_the_first_run_validates_with_pydantic(runs):
    assert "pydantic" in runs["cold"][2]  # the cache is filled by a full validation


# the modules `check` loads make their dataclasses with grammars.lazydataclass (methods compiled on first use: about
# 0.4 ms a class less at start-up)
EAGER_DATACLASSES_ALLOWED: set[str] = set()


def _makes_eager_dataclasses(module: str) -> bool:
    import ast
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return False
    from pathlib import Path

    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "dataclasses" and any(
                a.name == "dataclass" for a in node.names):
            return True
        if isinstance(node, ast.Attribute) and node.attr == "dataclass" and getattr(node.value, "id", "") == "dataclasses":
            return True
    return False


def test_one_manifests_dataclasses_are_made_lazily(runs):
    eager = sorted(m for m in runs["warm"][2] if m.startswith("trainadmit.") and m != "trainadmit.grammars.lazydataclass"
                   and _makes_eager_dataclasses(m))
    assert set(eager) <= EAGER_DATACLASSES_ALLOWED, eager
