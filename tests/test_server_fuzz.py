"""Fuzz the running server with malformed and mutated AdmissionReviews (hypothesis).

Every answer must be a 4xx with a message, or a 200 carrying a valid AdmissionReview with the
request's uid. Never a 5xx, never a dropped connection, never an engine exception.
"""

from __future__ import annotations

import copy
import json
import time

import pytest
from conftest import POLICIES, review
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


junk = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**63, max_value=2**63) | st.floats(allow_nan=False)
    | st.text(max_size=40),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12,
)


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, (*prefix, i))


@st.composite
def mutated_reviews(draw):
    doc = copy.deepcopy(draw(st.sampled_from(SEEDS)))
    paths = [p for p in _paths(doc) if len(p) >= 2]
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        path = draw(st.sampled_from(paths))
        parent = doc
        try:
            for part in path[:-1]:
                parent = parent[part]
            if draw(st.booleans()) and isinstance(parent, dict):
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = draw(junk)
        except (KeyError, IndexError, TypeError):
            continue
    return doc


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(doc=mutated_reviews(), path=st.sampled_from(["/mutate", "/validate"]))
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
