"""Property tests over generated Jobs and Pods, for every gang backend.

For any workload: the engine never modifies its input, the patch applied strictly equals the
engine's object, that object is valid for Kubernetes 1.37, and mutating it again changes nothing.
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.damage import damaged
from support.manifests import deep
from support.patches import apply_patch
from support.policies import BACKENDS
from support.schemas import schema_errors
from support.strategies import policy_for, workloads

from trainadmit.engine import Request, decide


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=workloads(), backend=st.sampled_from(sorted(BACKENDS)))
def test_mutation_is_exact_valid_and_idempotent(obj, backend):
    policy = policy_for(backend)
    original = deep(obj)
    d = decide(policy, Request(obj))
    assert obj == original
    if not d.matched:
        assert d.patch == []
        return
    assert apply_patch(original, d.patch) == json.loads(json.dumps(d.mutated))
    assert schema_errors(d.mutated) == []
    for companion in d.companions:
        if companion["apiVersion"].startswith("scheduling.k8s.io/"):
            assert schema_errors(companion) == []
    again = decide(policy, Request(deep(d.mutated)))
    assert again.patch == []
    assert [v.as_dict() for v in again.violations] == [v.as_dict() for v in d.violations]
    # the validating phase agrees with the mutating one on the final object
    final = decide(policy, Request(deep(d.mutated), phase="validate"))
    assert {v.rule for v in final.denials} == {v.rule for v in d.denials}


# ---- the engine never raises on malformed objects (the server would have to turn it into an error) --

_SEEDS = None


def _seeds():
    global _SEEDS
    if _SEEDS is None:
        from support.manifests import load_yaml
        from support.paths import EXAMPLES

        _SEEDS = [d for p in sorted(EXAMPLES.glob("*.yaml")) for d in load_yaml(p)]
    return _SEEDS


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(doc=st.deferred(lambda: damaged(_seeds())), phase=st.sampled_from(["mutate", "validate"]))
def test_engine_answers_damaged_objects_without_raising(doc, phase):
    d = decide(policy_for("native-job"), Request(doc, namespace="team-nlp", phase=phase))
    if any(v.rule == "object.malformed" for v in d.violations):
        assert not d.allowed and d.patch == []
