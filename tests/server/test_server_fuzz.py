"""Fuzz the server with malformed and mutated AdmissionReviews (hypothesis).

Every answer must be a 4xx with a message, or a 200 carrying a valid AdmissionReview with the
request's uid. Never a 5xx, never a dropped connection, never an engine exception.

The bulk runs in-process through the Flask test client (the same app the server runs, without
the network); a smaller sample goes through the real HTTPS server process on one keep-alive
connection, as the apiserver sends them, and its log is checked for engine errors.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.damage import damaged
from support.manifests import review
from support.paths import POLICIES

from trainadmit.server.app import create_app
from trainadmit.server.settings import ServerSettings, replace

SEEDS = [review(n) for n in ("job-03-mutate-Job-CREATE.json", "job-09-mutate-Job-UPDATE.json",
                             "pod-01-mutate-Pod-CREATE.json", "job-16-mutate-Job-DELETE.json")]
REVIEWS = damaged(SEEDS, min_depth=2, max_edits=4)
RAW = st.binary(max_size=2000) | st.text(max_size=2000).map(str.encode)
SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}


def check_answer(doc: dict, status: int, reply) -> None:
    assert status < 500, reply
    if status == 200:
        assert reply["apiVersion"] == "admission.k8s.io/v1" and reply["kind"] == "AdmissionReview"
        assert reply["response"]["uid"] == doc["request"]["uid"]
        assert isinstance(reply["response"]["allowed"], bool)
        assert "InternalError" not in json.dumps(reply["response"].get("status", {})), reply
    else:
        assert 400 <= status < 500 and reply["error"]


@pytest.fixture(scope="module")
def app_client():
    return create_app(replace(ServerSettings(), app={"policy_dir": str(POLICIES), "reload_interval": 3600})).test_client()


@pytest.fixture(scope="module")
def https(server):
    """One keep-alive connection for the whole fuzz run (reopened only if the server closes it)."""
    client = server.client()
    yield client
    client.close()


@settings(max_examples=400, **SETTINGS)
@given(doc=REVIEWS, path=st.sampled_from(["/mutate", "/validate"]))
def test_damaged_reviews_in_process(app_client, doc, path):
    resp = app_client.post(path, data=json.dumps(doc), content_type="application/json")
    check_answer(doc, resp.status_code, resp.get_json())


@settings(max_examples=200, **SETTINGS)
@given(raw=RAW)
def test_random_bytes_in_process(app_client, raw):
    resp = app_client.post("/mutate", data=raw, content_type="application/json")
    assert 400 <= resp.status_code < 500 or (resp.status_code == 200 and resp.get_json()["response"]["uid"])


@settings(max_examples=40, **SETTINGS)
@given(doc=REVIEWS, path=st.sampled_from(["/mutate", "/validate"]))
def test_damaged_reviews_over_https(https, doc, path):
    status, reply = https.post_review(path, doc)
    check_answer(doc, status, reply)


@settings(max_examples=20, **SETTINGS)
@given(raw=RAW)
def test_random_bytes_over_https(https, raw):
    status, data = https.request("POST", "/mutate", raw)
    assert 400 <= status < 500 or (status == 200 and json.loads(data)["response"]["uid"])


def test_no_engine_errors_after_fuzzing(server):
    # a request after the fuzz: once its line is in the log, the lines of earlier requests are too
    body = review("job-03-mutate-Job-CREATE.json")
    body["request"]["uid"] = "after-fuzz"
    assert server.client().post_review("/mutate", body)[0] == 200
    server.wait_log(lambda x: x.get("uid") == "after-fuzz")
    assert [x for x in server.log_lines() if x.get("event") == "engine_error"] == []
