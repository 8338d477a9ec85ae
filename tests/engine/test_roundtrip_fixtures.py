"""The Kubernetes API round-trip fixtures (every field set) pass through without losing a field."""

from __future__ import annotations

import json

import pytest
from support.manifests import deep
from support.patches import apply_patch, flatten
from support.paths import FIXTURES
from support.schemas import schema_errors

from trainadmit.engine import Request, decide


def _load(name: str) -> dict:
    return json.loads((FIXTURES / "apimachinery" / name).read_text())


def _gpu_job(gang: bool) -> dict:
    job = _load("batch.v1.Job.json")
    job["metadata"]["labels"]["trainadmit.io/pool"] = "h100-ib"
    job["metadata"]["namespace"] = "team-nlp"
    spec = job["spec"]
    spec["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "8"
    spec["template"]["spec"]["priorityClassName"] = "training-normal"
    if gang:
        spec.update(parallelism=4, completions=4, completionMode="Indexed")
        del spec["template"]["spec"]["workloadRef"]  # a 1.35 gang key: trainadmit would not add a second
    return job


def _gpu_pod() -> dict:
    pod = _load("core.v1.Pod.json")
    pod["metadata"]["labels"]["trainadmit.io/pool"] = "h100-ib"
    pod["metadata"]["namespace"] = "team-nlp"
    pod["metadata"]["ownerReferences"] = []
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "8"
    pod["spec"]["priorityClassName"] = "training-normal"
    return pod


@pytest.mark.parametrize("make", [lambda: _gpu_job(False), lambda: _gpu_job(True), _gpu_pod],
                         ids=["job", "gang-job", "pod"])
def test_every_field_survives_and_output_is_valid(policy, make):
    original = make()
    d = decide(policy, Request(deep(original)))
    assert d.matched
    assert d.patch, "the fixture must actually be mutated for this test to mean anything"
    before, after = flatten(original), flatten(d.mutated)
    lost = {k: v for k, v in before.items() if after.get(k, object()) != v}
    # Pods: trainadmit sets spec.priority from the tier (the apiserver resolved it before webhooks ran)
    lost.pop("/spec/priority", None)
    lost.pop("/spec/preemptionPolicy", None)
    assert lost == {}
    assert apply_patch(original, d.patch) == json.loads(json.dumps(d.mutated))
    new_errors = set(schema_errors(d.mutated)) - set(schema_errors(original))
    assert new_errors == set()


def test_roundtrip_fixture_without_unknown_fields_is_fully_valid_after_mutation(policy):
    """Strip the two fields the 1.37 schema does not know; then the output has no schema error at all."""
    job = _gpu_job(True)
    for group in ("containers", "initContainers", "ephemeralContainers"):
        for c in job["spec"]["template"]["spec"][group]:
            c.get("securityContext", {}).pop("ulimits", None)
    assert schema_errors(job) == []
    d = decide(policy, Request(job))
    assert schema_errors(d.mutated) == []


def test_existing_foreign_gang_key_is_respected(policy):
    job = _gpu_job(False)
    job["spec"].update(parallelism=4, completions=4, completionMode="Indexed")
    d = decide(policy, Request(job))
    assert "scheduling" not in d.mutated["spec"]
    assert any(v.rule == "gang.foreign-backend" for v in d.warnings)
