"""Provenance is never trusted from the object (``engine.provenance``), decided in-process as the server decides the
``/validate`` request the apiserver sends for a StatefulSet.

The StatefulSet is the one LeaderWorkerSet's controller makes for the workers of LWS's own vLLM example
(tests/fixtures/operators/lws/examples/vllm-gpu-lws.yaml: its ``workerTemplate``, 8 GPUs a Pod), with trainadmit's
provenance annotation in its pod template: written by a namespace user it is a forgery (its Pods would be left alone
as already decided, skipping both webhooks), written by the LWS controller it is what LWS does. Expected decisions by
hand from the rule's definition."""

from __future__ import annotations

import copy

from support.manifests import load_yaml
from support.paths import FIXTURES, POLICIES

from trainadmit.engine import Request, decide, load_policy

LWS_EXAMPLE = FIXTURES / "operators" / "lws" / "examples" / "vllm-gpu-lws.yaml"
LWS_CONTROLLER = "system:serviceaccount:lws-system:lws-controller-manager"


def _statefulset(annotated: bool) -> dict:
    [lws] = [d for d in load_yaml(LWS_EXAMPLE) if d.get("kind") == "LeaderWorkerSet"]
    template = copy.deepcopy(lws["spec"]["leaderWorkerTemplate"]["workerTemplate"])
    meta = template.setdefault("metadata", {})
    meta.setdefault("labels", {})["leaderworkerset.sigs.k8s.io/name"] = "vllm"
    if annotated:
        meta.setdefault("annotations", {})["trainadmit.io/applied"] = "{}"
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "vllm-0", "namespace": "team-nlp"},
            "spec": {"replicas": 1, "serviceName": "vllm", "template": template,
                     "selector": {"matchLabels": {"leaderworkerset.sigs.k8s.io/name": "vllm"}}}}


def _rules(obj: dict, user: str) -> set[str]:
    policy = load_policy(POLICIES)
    decision = decide(policy, Request(obj, operation="CREATE", namespace="team-nlp", phase="validate",
                                      user={"username": user, "groups": ["system:authenticated"]}))
    return {v.rule for v in decision.denials}


def test_a_namespace_user_forging_the_provenance_annotation_is_refused():
    assert _rules(_statefulset(annotated=True), "alice") == {"final.forged-provenance"}


def test_the_lws_controller_writing_it_is_what_lws_does():
    assert "final.forged-provenance" not in _rules(_statefulset(annotated=True), LWS_CONTROLLER)


def test_without_the_annotation_the_statefulset_is_not_refused_for_it():
    assert "final.forged-provenance" not in _rules(_statefulset(annotated=False), "alice")
