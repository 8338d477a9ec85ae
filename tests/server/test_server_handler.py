"""The server's answer as a plain function (``handler.answer_review``): bytes of a review the kube-apiserver
sent in, the HTTP answer, its log records and metric facts out, without Flask or a network.

The reviews are the captured ones (tests/fixtures/admission-reviews: a real kube-apiserver 1.36.2); the
expectations are the submitted Job's (tests/fixtures/admission-reviews/submitted-job.yaml: 4 workers of 8
GPUs on h100-ib, rack topology, dataset c4, priority high) as docs/injections.md's table states them.
"""

from __future__ import annotations

import base64
import json

import pytest
from support.manifests import review
from support.patches import apply_patch
from support.paths import POLICIES

from trainadmit.engine.clusterview import NoCluster
from trainadmit.server.app import create_app
from trainadmit.server.cost import MemoryBudget
from trainadmit.server.decisions import DecisionCache
from trainadmit.server.floors import Floors
from trainadmit.server.handler import answer_review
from trainadmit.server.limits import ReadLimits
from trainadmit.server.settings import ServerSettings, replace

LIMITS = ReadLimits()


@pytest.fixture(scope="module")
def memo(policy):
    return DecisionCache(policy)


def answer(memo, webhook: str, body: bytes, limits: ReadLimits = LIMITS, budget: int | None = None):
    memory = MemoryBudget(budget or limits.decide_memory_bytes, 0.1)
    return answer_review(webhook, body, decisions=memo, cluster=NoCluster(), limits=limits, memory=memory)


def raw(name: str) -> bytes:
    return json.dumps(review(name)).encode()


def test_a_captured_create_is_patched_with_the_gang_and_logged_once(memo):
    result = answer(memo, "mutate", raw("job-03-mutate-Job-CREATE.json"))
    assert result.status == 200 and result.outcome == "patched"
    response = result.body["response"]
    assert response["uid"] == "7ac09409-3bd2-4597-99ca-1e964a7f49f3" and response["patchType"] == "JSONPatch"
    job = apply_patch(review("job-03-mutate-Job-CREATE.json")["request"]["object"],
                      json.loads(base64.b64decode(response["patch"])))
    assert job["spec"]["template"]["spec"]["schedulingGroup"] == {"podGroupName": "llama-pretrain-gang"}
    assert job["spec"]["template"]["spec"]["priorityClassName"] == "training-high"
    [decision] = result.records
    assert decision["event"] == "decision" and decision["uid"] == response["uid"]
    assert (decision["kind"], decision["operation"], decision["namespace"], decision["name"]) == \
        ("Job", "CREATE", "team-nlp", "llama-pretrain")
    assert decision["generation"] == memo.policy.generation and decision["allowed"] is True
    assert (result.kind, result.operation, result.denied) == ("Job", "CREATE", ())


def test_validate_denies_what_the_mutating_webhook_did_not_touch(memo):
    """job-04 reached /validate without trainadmit's mutation (a recording webhook mutated nothing)."""
    result = answer(memo, "validate", raw("job-04-validate-Job-CREATE.json"))
    assert result.status == 200 and result.outcome == "denied"
    assert "final.not-mutated" in result.body["response"]["status"]["message"]
    assert "final.not-mutated" in result.denied and "final.not-mutated" in result.records[-1]["denied"]


def test_delete_and_subresources_pass_without_a_decision(memo):
    for name in ("job-16-mutate-Job-DELETE.json", "job-13-mutate-Job-UPDATE-status.json"):
        result = answer(memo, "mutate", raw(name))
        assert result.outcome == "allowed" and "patch" not in result.body["response"], name
        assert result.records[-1]["denied"] == result.records[-1]["warned"] == []


def test_without_a_policy_nothing_is_admitted(memo):
    result = answer(None, "mutate", raw("job-03-mutate-Job-CREATE.json"))
    status = result.body["response"]["status"]
    assert result.outcome == "denied" and status["code"] == 503 and "no policy loaded" in status["message"]


@pytest.mark.parametrize("body,status,words", [
    (b"[]", 400, "must be a JSON object"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}).encode(), 400,
     "expected apiVersion admission.k8s.io/v1"),
])
def test_what_is_no_admission_review_gets_a_4xx_and_a_bad_request_record(memo, body, status, words):
    result = answer(memo, "validate", body)
    assert result.status == status and words in result.body["error"] and result.outcome is None
    assert [r["event"] for r in result.records] == ["bad_request"] and result.records[0]["code"] == status


def test_a_body_over_its_webhooks_limit_is_413_naming_both_sizes(memo):
    body = raw("job-03-mutate-Job-CREATE.json")
    small = ReadLimits(mutate_body_bytes=1000)
    result = answer(memo, "mutate", body, small)
    assert result.status == 413 and result.body["error"] == f"request body is {len(body)} bytes; the limit is 1000"
    assert answer(memo, "validate", body, small).status == 200  # /validate has its own limit


def test_a_review_too_costly_for_the_memory_budget_is_413(memo):
    result = answer(memo, "mutate", raw("job-03-mutate-Job-CREATE.json"), budget=1000)
    assert result.status == 413 and "MiB of memory" in result.body["error"]


def test_the_floors_replay_the_first_patch_and_are_not_in_the_production_app(memo, tmp_path):
    first = review("job-03-mutate-Job-CREATE.json")
    other = json.loads(json.dumps(first))
    other["request"]["object"]["metadata"]["name"] = "another-job"
    floors = Floors()
    store = type("Store", (), {"current": memo.policy})()
    memory = MemoryBudget(LIMITS.decide_memory_bytes, 0.1)
    replayed = floors.answer("noop-patch", json.dumps(first).encode(), store, LIMITS, memory)
    decided = answer(memo, "mutate", json.dumps(first).encode())
    assert replayed.body["response"]["patch"] == decided.body["response"]["patch"]
    again = floors.answer("noop-patch", json.dumps(other).encode(), store, LIMITS, memory)
    assert again.body["response"]["patch"] == decided.body["response"]["patch"]  # the first Job's, as is
    assert replayed.records == () and replayed.outcome == "patched"
    noop = floors.answer("noop", json.dumps(first).encode(), store, LIMITS, memory)
    assert noop.outcome == "allowed" and "patch" not in noop.body["response"]

    production = create_app(replace(ServerSettings(), app={"policy_dir": str(POLICIES), "reload_interval": 3600}))
    assert production.test_client().post("/noop", data=b"{}").status_code == 404
    bench = create_app(replace(ServerSettings(), app={"policy_dir": str(POLICIES), "reload_interval": 3600,
                                                      "enable_noop": True}))
    reply = bench.test_client().post("/noop", data=json.dumps(first), content_type="application/json")
    assert reply.status_code == 200 and reply.get_json()["response"]["allowed"] is True
