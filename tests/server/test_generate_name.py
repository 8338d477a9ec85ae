"""A ``generateName`` gang Job through the server's answer (``handler.answer_review``, with the decision cache):
the mutating webhook names it as the apiserver would, before its PodGroup, and every answer draws its own name.

The review is the one a real kube-apiserver 1.36.2 sent for a ``generateName: sweep-`` Job
(tests/fixtures/admission-reviews/job-07: no name and no uid during admission); the bundled policy gives it the
native PodGroup ``<name>-gang``.
"""

from __future__ import annotations

import base64
import copy
import json
import re

import pytest
from support.manifests import review
from support.patches import apply_patch

from trainadmit.engine.clusterview import NoCluster
from trainadmit.engine.naming import ALPHABET, MAX_PREFIX, generated
from trainadmit.server.cost import MemoryBudget
from trainadmit.server.decisions import DecisionCache
from trainadmit.server.handler import answer_review, draw_name
from trainadmit.server.limits import ReadLimits

LIMITS = ReadLimits()
DRAWN = re.compile(rf"^sweep-[{ALPHABET}]{{5}}$")


@pytest.fixture
def memo(policy):
    return DecisionCache(policy)


def answer(memo: DecisionCache, webhook: str, body: dict):
    memory = MemoryBudget(LIMITS.decide_memory_bytes, 0.1)
    return answer_review(webhook, json.dumps(body).encode(), decisions=memo, cluster=NoCluster(), limits=LIMITS,
                         memory=memory)


def mutated(result, obj: dict) -> tuple[dict, list[dict]]:
    response = result.body["response"]
    ops = json.loads(base64.b64decode(response["patch"])) if response.get("patch") else []
    return apply_patch(copy.deepcopy(obj), ops), ops


def with_object(body: dict, obj: dict) -> dict:
    out = copy.deepcopy(body)
    out["request"]["object"] = obj
    return out


def test_a_generate_name_gang_job_is_named_by_mutate_before_its_podgroup(memo):
    body = review("job-07-mutate-Job-CREATE.json")
    obj = body["request"]["object"]
    assert "name" not in obj["metadata"] and obj["metadata"]["generateName"] == "sweep-"
    result = answer(memo, "mutate", body)
    assert result.status == 200 and result.outcome == "patched" and result.denied == ()
    job, ops = mutated(result, obj)
    name = job["metadata"]["name"]
    assert DRAWN.match(name), name
    assert ops[0] == {"op": "add", "path": "/metadata/name", "value": name}  # first: all else derives from it
    assert job["spec"]["template"]["spec"]["schedulingGroup"] == {"podGroupName": f"{name}-gang"}
    podgroup = json.loads(job["metadata"]["annotations"]["trainadmit.io/podgroup"])
    assert podgroup["metadata"]["name"] == f"{name}-gang"
    assert result.records[-1]["name"] == name  # the log names the Job as it will be stored


def test_every_generate_name_create_draws_its_own_name_also_from_a_remembered_decision(memo):
    """Two creates of one manifest share the cache's entry (the name is its sentinel), never the name: a shared
    name would make the second create fail with 409."""
    body = review("job-07-mutate-Job-CREATE.json")
    names = set()
    for _ in range(4):
        job, _ = mutated(answer(memo, "mutate", body), body["request"]["object"])
        names.add(job["metadata"]["name"])
        assert job["spec"]["template"]["spec"]["schedulingGroup"]["podGroupName"] == f"{job['metadata']['name']}-gang"
    assert memo.hits >= 2, (memo.hits, memo.misses, memo.bypassed)
    assert len(names) == 4, names


def test_a_reinvoked_mutate_and_validate_keep_the_name(memo):
    """reinvocationPolicy IfNeeded sends the mutated object to /mutate again; /validate then sees it: neither
    renames it nor finds anything missing."""
    body = review("job-07-mutate-Job-CREATE.json")
    job, _ = mutated(answer(memo, "mutate", body), body["request"]["object"])
    again = answer(memo, "mutate", with_object(body, job))
    assert again.outcome == "allowed" and "patch" not in again.body["response"]
    check = answer(memo, "validate", with_object(body, job))
    assert check.outcome == "allowed" and check.denied == (), check.body


def test_an_object_that_has_a_name_is_not_renamed(memo):
    body = review("job-03-mutate-Job-CREATE.json")
    obj = body["request"]["object"]
    obj["metadata"]["generateName"] = "other-"  # a name wins over generateName, as in the apiserver
    job, ops = mutated(answer(memo, "mutate", body), obj)
    assert job["metadata"]["name"] == "llama-pretrain"
    assert not [op for op in ops if op["path"] == "/metadata/name"]


def test_a_drawn_name_is_the_apiservers_prefix_cut_and_alphabet():
    picks = iter("bcd2z")
    assert draw_name({"metadata": {"generateName": "a" * 70}}, lambda _: next(picks)) == "a" * MAX_PREFIX + "bcd2z"
    assert len(generated("a" * 70)) == 63
    assert draw_name({"metadata": {"name": "x", "generateName": "y-"}}) == ""
    assert draw_name({"metadata": {}}) == "" and draw_name([]) == ""
    assert DRAWN.match(draw_name({"metadata": {"generateName": "sweep-"}}))
