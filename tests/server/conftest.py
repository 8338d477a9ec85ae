"""The server area: the real HTTPS server process, its handler, settings, limits, certificates and decision
cache. ``server`` is one real server process for the area's tests to share."""

from __future__ import annotations

import pytest
from support.paths import POLICIES
from support.server import Server, issue_certs


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """One real server process for the whole session (bundled policies, real certificates, the
    no-op endpoint on): the HTTPS tests share it, as the apiserver shares its connections."""
    srv = Server(POLICIES, issue_certs(tmp_path_factory.mktemp("server-certs")), extra=["--enable-noop"])
    srv.wait_ready()
    yield srv
    assert srv.stop() == 0, "graceful shutdown must exit cleanly"
