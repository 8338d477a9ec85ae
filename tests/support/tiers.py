"""pytest plugin: the suite's tiers, so that `make test` on a laptop is the one-minute inner loop and CI runs all.

- **fast** (default): everything not listed below; runs everywhere.
- **slow** (``@pytest.mark.slow``, or listed in ``SLOW`` by file or test): the tests that each cost seconds of a
  core (building and installing the wheel, a pytest inside pytest, real server processes restarted, memory
  counted under tracemalloc, every order or backend walked in full). They run when ``KUBEBUILDER_ASSETS`` is
  set (CI: .ci/run sets it) or ``TRAINADMIT_ALL_TIERS=1``, when a file of theirs is named on the command line
  (``pytest tests/engine/test_cel_kept.py``), or with ``-m slow``; otherwise they are deselected, and the header
  says how many and how to run them.
- **integration** (tests/integration, and the real-apiserver variants elsewhere): needs ``KUBEBUILDER_ASSETS``
  (support.kube_fixtures skips them with one reason otherwise).

A new test lands in the fast tier unless it says otherwise; a new file of tests/integration in the integration
tier. tests/project/test_tiers.py keeps every ``SLOW`` entry naming a test that exists, and docs/testing.md
says what each tier holds and what it costs.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

import pytest

ALL_TIERS_ENV = "TRAINADMIT_ALL_TIERS"
ASSETS_ENV = "KUBEBUILDER_ASSETS"

# node id prefix (a file, file::test, which matches each parametrization, or file::test[param]) -> why it is slow;
# the CPU seconds are of one run on the 2-core machine (docs/testing.md)
_ORDER = "tests/engine/test_concern_order.py::test_every_allowed_order_gives_the_same_decision"
_READER = "tests/cli/test_cli_contract.py::test_a_reader_that_stops_early_fails_the_run"
_FASTYAML = "tests/cli/test_check_fastyaml.py::test_every_project_file_loads_and_dumps_as_pyyaml_does"
SLOW: dict[str, str] = {
    # building, installing and running the wheel in fresh virtualenvs (26 s of CPU)
    "tests/project/test_packaging.py": "builds the wheel and installs it into bare virtualenvs",
    # memory counted under tracemalloc over hundreds of decisions and evaluations (30 s)
    "tests/engine/test_cel_kept.py": "counts memory under tracemalloc over hundreds of decisions",
    # pytest inside pytest, with real servers lost, interrupted and killed (12 s)
    "tests/server/test_server_leftovers.py": "runs pytest sessions that start, lose and kill servers",
    # real server processes restarted, reloaded, swapped, recycled, held by slow clients (21 s)
    "tests/server/test_server_reload.py": "restarts and reloads real server processes under load",
    "tests/server/test_server_hardening.py": "slow clients, deadlines and worker recycling on a real server",
    "tests/server/test_serve_cluster_report.py": "starts a real server per test",
    "tests/cluster/test_livecluster.py::test_server_with_the_live_view": "a real server on a fake apiserver",
    "tests/project/test_bench.py::test_engine_bench_runs_and_its_cache_column_is_the_servers_answer":
        "runs the engine benchmark",
    "tests/server/test_server_logs.py::test_the_log_is_json_from_listening_to_shutdown": "a real server's whole life",
    "tests/policy/test_policy_init.py::test_the_guide_runs_as_written_from_an_empty_directory":
        "runs the authoring guide's every command as a program",
    # the tiers' own end-to-end check: nested pytest collections (the table itself is checked in the fast tier)
    "tests/project/test_tiers.py::test_the_fast_tier_leaves_slow_tests_out_unless_asked": "nested pytest collections",
    "tests/project/test_tiers.py::test_every_parametrized_slow_entry_is_a_parametrization_pytest_collects":
        "a nested pytest collection",
    "tests/server/test_serve_startup.py": "starts a server program per bad setting (each refused in one line)",
    # fuzzing and the largest walks: the fast tier keeps the property test of mutation and the plain fuzz runs
    "tests/server/test_server_fuzz.py::test_damaged_reviews_in_process": "hypothesis over damaged reviews",
    "tests/engine/test_properties.py::test_engine_answers_damaged_objects_without_raising":
        "hypothesis over damaged objects",
    "tests/project/test_deploy.py::test_every_podgroup_the_engine_asks_for_is_in_the_reconcilers_rbac":
        "every backend's PodGroups over the examples",
    "tests/project/test_deploy.py::test_match_conditions_compile_and_select_exactly_the_gpu_workloads":
        "the webhooks' CEL match conditions over every fixture",
    "tests/cli/test_cli_battery.py::test_every_argument_over_the_battery[policy webhooks:*]":
        "each input renders every webhook configuration",
    # walks: the fast tier keeps the bundled policy's concern-order walk, the slow tier adds the five backends (12 s)
    f"{_ORDER}[native-job]": "the concern-order walk under one more backend",
    f"{_ORDER}[kueue]": "the concern-order walk under one more backend",
    f"{_ORDER}[volcano]": "the concern-order walk under one more backend",
    f"{_ORDER}[coscheduling]": "the concern-order walk under one more backend",
    f"{_ORDER}[native-podgroup]": "the concern-order walk under one more backend",
    "tests/server/test_decision_cache.py::test_remembered_equals_fresh": "hypothesis over the decision cache",
    # a reader that stops early: the fast tier keeps -o json; text and yaml decide 600 Jobs each in a program
    f"{_READER}[text]": "check over 600 Jobs in a program",
    f"{_READER}[yaml]": "check over 600 Jobs in a program",
    # the YAML round trip of the operators' CRDs, 0.1-1.4 MB each (the other 220 files stay in the fast tier)
    f"{_FASTYAML}[tests/fixtures/operators/*/crds/*]": "CRDs of up to 1.4 MB through both YAML codecs",
    # per gang backend: the fast tier keeps the native Job backend (the bundled default's), the slow tier the others
    **{f"{test}[{backend}]": "the same check under one more gang backend"
       for test in ("tests/workloads/test_operators.py::test_gpu_examples_mutate_within_their_crd_schema_exactly_and_"
                    "idempotently", "tests/policy/test_check_policy_cache.py::test_a_cached_set_decides_as_the_validated_one")
       for backend in ("coscheduling", "kueue", "native-podgroup", "volcano")},
}


def all_tiers() -> bool:
    """Whether every tier runs: CI (KUBEBUILDER_ASSETS set) or TRAINADMIT_ALL_TIERS=1."""
    return bool(os.environ.get(ASSETS_ENV, "").strip()) or os.environ.get(ALL_TIERS_ENV, "") == "1"


def is_listed_slow(nodeid: str) -> bool:
    """Whether a key of ``SLOW`` names the test: its file, the test (every parametrization), or one parametrization
    (``*`` in a key's brackets matches as in fnmatch)."""
    return any(nodeid == key or nodeid.startswith(key + "::") or nodeid.startswith(key + "[")
               or ("*" in key and fnmatch.fnmatchcase(nodeid, key.replace("[", "[[]"))) for key in SLOW)


def _named_files(config: pytest.Config) -> set[Path]:
    """The test files named on the command line (``tests/x/test_y.py`` or ``tests/x/test_y.py::test_z``)."""
    out = set()
    for arg in config.args:
        path = Path(config.invocation_params.dir, arg.split("::", 1)[0]).resolve()
        if path.is_file():
            out.add(path)
    return out


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: the slow tier (runs with KUBEBUILDER_ASSETS or TRAINADMIT_ALL_TIERS=1; "
                                       "see tests/support/tiers.py)")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if is_listed_slow(item.nodeid):
            item.add_marker(pytest.mark.slow)
    if all_tiers() or "slow" in (config.option.markexpr or ""):
        return
    named = _named_files(config)
    keep, slow = [], []
    for item in items:
        (slow if item.get_closest_marker("slow") and Path(item.path).resolve() not in named else keep).append(item)
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = keep


def pytest_report_header(config: pytest.Config) -> str:
    if all_tiers():
        return f"tiers: all ({ASSETS_ENV} or {ALL_TIERS_ENV}=1 set)"
    return (f"tiers: fast (the slow tier runs with {ALL_TIERS_ENV}=1 or {ASSETS_ENV} set; "
            "the integration tier with KUBEBUILDER_ASSETS)")


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    if not all_tiers() and "slow" not in (config.option.markexpr or "") and not _named_files(config):
        terminalreporter.write_line(f"fast tier only: the slow tier was deselected ({ALL_TIERS_ENV}=1 runs it; CI does)")
