"""engine.naming: which decisions name a ``generateName`` workload, and the retired ``gang.name-required``.

The objects are the Kubernetes documentation's Indexed Job (tests/fixtures/real-world) with GPUs, under the
bundled policies; the expected names are the apiserver's rule (``generateName`` cut to 58 + 5 characters).
"""

from __future__ import annotations

import copy

import pytest
from support.builders import with_gpus
from support.manifests import load_yaml
from support.paths import FIXTURES
from support.policies import write_policy

from trainadmit.engine import Request, decide, load_policy
from trainadmit.engine.naming import PLACEHOLDER, generated


def indexed_job(prefix: str, workers: int = 4) -> dict:
    obj = with_gpus(copy.deepcopy(load_yaml(FIXTURES / "real-world" / "k8s-website-indexed-job.yaml")[0]))
    meta = obj["metadata"]
    meta.pop("name", None)
    meta["generateName"] = prefix
    obj["spec"].update(parallelism=workers, completions=workers)
    return obj


def name_ops(d) -> list[dict]:
    return [op for op in d.patch if op["path"] == "/metadata/name"]


def test_a_job_without_a_gang_or_colocation_keeps_generate_name_for_the_apiserver(policy):
    """One Pod: no gang and nothing to colocate, so nothing derives from the name and the apiserver names it."""
    d = decide(policy, Request(indexed_job("eval-", workers=1), namespace="team-nlp", generated_name="eval-bcdfg"))
    assert d.allowed and not name_ops(d)


def test_a_gang_job_is_named_with_the_drawn_name_or_the_placeholder(policy):
    obj = indexed_job("sweep-")
    d = decide(policy, Request(copy.deepcopy(obj), namespace="team-nlp", generated_name="sweep-q7z2k"))
    assert name_ops(d) == [{"op": "add", "path": "/metadata/name", "value": "sweep-q7z2k"}]
    assert d.patch[0] == name_ops(d)[0]
    p = decide(policy, Request(copy.deepcopy(obj), namespace="team-nlp"))
    assert name_ops(p)[0]["value"] == f"sweep-{PLACEHOLDER}" == generated("sweep-")
    assert p.companions[0]["metadata"]["name"] == "sweep-xxxxx-gang"
    assert any(i.location == ("metadata", "name") and i.concern == "gang" for i in p.injections)


def test_an_update_is_never_named(policy):
    obj = indexed_job("sweep-")
    d = decide(policy, Request(obj, "UPDATE", old=copy.deepcopy(obj), namespace="team-nlp", phase="validate",
                               generated_name="sweep-q7z2k"))
    assert not d.patch


@pytest.mark.parametrize("action", ["deny", "off"])
def test_a_policy_that_still_overrides_the_retired_rule_loads(tmp_path, action):
    """``gang.name-required`` is retired: a policy written for an earlier release keeps loading, with no effect."""
    policy = load_policy(write_policy(tmp_path, {"rules": {"gang.name-required": action}}))
    d = decide(policy, Request(indexed_job("sweep-"), namespace="team-nlp"))
    assert d.allowed and "gang.name-required" not in {v.rule for v in d.violations}


def test_an_operator_kind_with_generate_name_is_named_before_its_podgroup(policy):
    """KubeRay's RayJob sample (generateName, 4 GPU workers; tests/fixtures/real-world): the native PodGroup is
    named after the RayJob, so the decision names it first; its refusal is only the pool's whole-node rule."""
    [obj] = [d for d in load_yaml(FIXTURES / "real-world" / "kuberay-ray-job.pytorch-image-classifier.yaml")
             if d.get("kind") == "RayJob"]
    assert "name" not in obj["metadata"]
    d = decide(policy, Request(copy.deepcopy(obj), namespace="team-nlp", generated_name="pytorch-image-classifier-x2"))
    assert {v.rule for v in d.denials} == {"topology.whole-node"}
    assert name_ops(d) == [{"op": "add", "path": "/metadata/name", "value": "pytorch-image-classifier-x2"}]
    assert [c["metadata"]["name"] for c in d.companions] == ["pytorch-image-classifier-x2-gang"]
