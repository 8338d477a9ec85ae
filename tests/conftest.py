"""What every area of the suite shares: the plugins (the apiserver tier's control plane, every rule made to
fire), the bundled policy and one per gang backend, a private policy cache, and no process outliving its
test. Each area's own fixtures are in its folder's conftest.py; helper code is in ``support`` (imported,
never from a conftest)."""

from __future__ import annotations

import pytest
from support.paths import POLICIES
from support.policies import BACKENDS, write_policy

from trainadmit.engine import load_policy

# the integration tier's control plane; every rule fires; what session fixtures start is theirs to stop; the tiers
pytest_plugins = ["support.kube_fixtures", "support.rule_coverage", "support.fixture_processes", "support.tiers"]


@pytest.fixture(scope="session", autouse=True)
def policy_cache_dir(tmp_path_factory):
    """`check` keeps validated policy sets in $TRAINADMIT_CACHE_DIR (else ~/.cache/trainadmit):
    the tests, and the programs they start, keep theirs in a temporary directory."""
    directory = tmp_path_factory.mktemp("policy-cache")
    patch = pytest.MonkeyPatch()
    patch.setenv("TRAINADMIT_CACHE_DIR", str(directory))
    yield directory
    patch.undo()


@pytest.fixture(scope="session")
def policy():
    return load_policy(POLICIES)


@pytest.fixture(scope="session", params=sorted(BACKENDS))
def backend_policy(request, tmp_path_factory):
    directory = write_policy(tmp_path_factory.mktemp(request.param), BACKENDS[request.param])
    return request.param, load_policy(directory)


# ---- no process outlives the suite (suite_processes) ----------------------------------------------------

def _runs_tests(config) -> bool:
    """This process runs tests (an xdist worker, or pytest without xdist), not only the xdist controller,
    whose workers carry its marker too."""
    return hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    if _runs_tests(config):
        from support import suite_processes

        suite_processes.mark_this_process()


@pytest.fixture(autouse=True)
def _processes_stop_with_their_test():
    """A server a test started and did not stop (it failed first, or was interrupted) stops with the test;
    those of session and module fixtures were started before this point and are their fixtures' to stop."""
    from support import suite_processes

    before = suite_processes.started()
    yield
    suite_processes.stop_started_since(before, fixtures_own=False)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    if _runs_tests(session.config):
        from support import suite_processes

        suite_processes.sweep()
