"""pytest plugin: what a session or module fixture starts is that fixture's to stop, even when a test's setup
was the first to ask for it (a function fixture's ``request.getfixturevalue("control_plane")``); the test's
own leftovers are stopped with the test (tests/conftest.py).

A plugin, not a conftest hook: pytest calls ``pytest_fixture_setup`` of a session fixture on the session's
hooks, which see only the conftest files of the rootdir, not tests/conftest.py.
"""

from __future__ import annotations

import pytest

from support import suite_processes


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    before = suite_processes.started()
    yield
    if fixturedef.scope != "function":
        suite_processes.owned_by_a_fixture(before)
