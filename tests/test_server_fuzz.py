"""Fuzz the running server with malformed and mutated AdmissionReviews (hypothesis).

Every answer must be a 4xx with a message, or a 200 carrying a valid AdmissionReview with the
request's uid. Never a 5xx, never a dropped connection, never an engine exception.
"""

from __future__ import annotations

import json
import time

import pytest
from conftest import POLICIES, review
from damage import damaged
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_util import Server, issue_certs

SEEDS = [review(n) for n in ("job-03-mutate-Job-CREATE.json", "job-09-mutate-Job-UPDATE.json",
                             "pod-01-mutate-Pod-CREATE.json", "job-16-mutate-Job-DELETE.json")]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(POLICIES, issue_certs(tmp_path_factory.mktemp("fuzz-certs")))
    srv.wait_ready()
    yield srv
    srv.stop()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(doc=damaged(SEEDS, min_depth=2, max_edits=4), path=st.sampled_from(["/mutate", "/validate"]))
def test_mutated_reviews(server, doc, path):
    client = server.client()
    status, reply = client.post_review(path, doc)
    assert status < 500
    if status == 200:
        assert reply["apiVersion"] == "admission.k8s.io/v1" and reply["kind"] == "AdmissionReview"
        assert reply["response"]["uid"] == doc["request"]["uid"]
        assert isinstance(reply["response"]["allowed"], bool)
    else:
        assert 400 <= status < 500 and reply["error"]


@settings(max_examples=100, deadline=None)
@given(raw=st.binary(max_size=2000) | st.text(max_size=2000).map(str.encode))
def test_random_bytes(server, raw):
    status, data = server.client().request("POST", "/mutate", raw)
    assert 400 <= status < 500 or (status == 200 and json.loads(data)["response"]["uid"])


def test_no_engine_errors_after_fuzzing(server):
    time.sleep(0.3)
    errors = [x for x in server.log_lines() if x.get("event") == "engine_error"]
    assert errors == []
