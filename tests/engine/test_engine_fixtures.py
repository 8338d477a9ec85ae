"""The engine on the apiserver's own requests and on the user's YAML: same result, valid output."""

from __future__ import annotations

import json

import pytest
from support.manifests import deep, load_yaml, review
from support.patches import apply_patch, injected_leaves
from support.paths import EXAMPLES, FIXTURES
from support.policies import write_policy
from support.schemas import schema_errors

from trainadmit.engine import Request, decide, load_policy


def _objects():
    """(label, object, namespace) for every Job/Pod we check: examples and fixtures, both forms."""
    out = [(p.name, d, None) for p in sorted(EXAMPLES.glob("*.yaml")) for d in load_yaml(p)]
    out.append(("submitted-job.yaml", load_yaml(FIXTURES / "admission-reviews" / "submitted-job.yaml")[0], None))
    for name in ("job-03-mutate-Job-CREATE.json", "job-05-mutate-Job-CREATE.json",
                 "job-07-mutate-Job-CREATE.json", "pod-01-mutate-Pod-CREATE.json"):
        req = review(name)["request"]
        out.append((name, req["object"], req["namespace"]))
    for path in sorted((FIXTURES / "real-world").glob("*.y*ml")):
        for i, doc in enumerate(load_yaml(path)):
            if (doc.get("apiVersion"), doc.get("kind")) in (("batch/v1", "Job"), ("v1", "Pod")):  # Kubernetes' own
                out.append((f"{path.name}#{i}", doc, None))
    return out


def test_user_yaml_and_apiserver_defaulted_object_get_the_same_injected_fields(policy):
    """DESIGN §4: the CLI reads objects as written, the server gets them defaulted; same result."""
    user = load_yaml(FIXTURES / "admission-reviews" / "submitted-job.yaml")[0]
    server = review("job-03-mutate-Job-CREATE.json")["request"]["object"]
    d_user = decide(policy, Request(deep(user)))
    d_server = decide(policy, Request(deep(server), namespace="team-nlp"))
    assert d_user.allowed and d_server.allowed
    assert injected_leaves(user, d_user.mutated) == injected_leaves(server, d_server.mutated)
    assert [v.as_dict() for v in d_user.violations] == [v.as_dict() for v in d_server.violations]
    # the defaulted schedulerName is not a user choice: it must not block anything
    assert server["spec"]["template"]["spec"]["schedulerName"] == "default-scheduler"


def test_every_backend_injects_its_documented_keys(backend_policy):
    name, policy = backend_policy
    obj = load_yaml(EXAMPLES / "llama-pretrain.yaml")[0]
    d = decide(policy, Request(deep(obj)))
    assert d.allowed, [v.text() for v in d.violations]
    m, tmpl = d.mutated, d.mutated["spec"]["template"]
    if name == "native-job":
        assert m["spec"]["scheduling"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
        assert m["spec"]["scheduling"]["schedulingConstraints"] == {"topology": [{"key": "topology.kubernetes.io/rack"}]}
        assert "schedulingGroup" not in tmpl["spec"]  # the Job controller builds the PodGroup itself
    elif name == "native-podgroup":
        assert tmpl["spec"]["schedulingGroup"] == {"podGroupName": "llama-pretrain-gang"}
        [pg] = d.companions
        assert pg["kind"] == "PodGroup" and pg["apiVersion"] == "scheduling.k8s.io/v1beta1"
        assert pg["spec"]["schedulingPolicy"]["gang"]["minCount"] == 4
        assert schema_errors(pg) == []
    elif name == "coscheduling":
        assert tmpl["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "llama-pretrain"
        assert tmpl["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
        [pg] = d.companions
        assert pg["spec"]["minMember"] == 4 and pg["spec"]["minResources"] == {"nvidia.com/gpu": "32"}
        # the rack: the placement gate (coscheduling forms the gang, the ungater chooses the rack), not pod affinity
        assert tmpl["spec"]["schedulingGates"] == [{"name": "trainadmit.io/placement"}]
        assert "podAffinity" not in (tmpl["spec"].get("affinity") or {})
    elif name == "volcano":
        assert m["metadata"]["annotations"]["scheduling.volcano.sh/group-min-member"] == "4"
        assert tmpl["metadata"]["annotations"]["scheduling.volcano.sh/queue-name"] == "training"
        assert tmpl["spec"]["schedulerName"] == "volcano"
        assert d.companions == []  # Volcano's pg-controller builds the PodGroup from the owner annotation
    elif name == "kueue":
        assert m["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-queue"
        assert m["spec"]["suspend"] is True
        assert tmpl["metadata"]["annotations"]["kueue.x-k8s.io/podset-required-topology"] == \
            "topology.kubernetes.io/rack"
    assert schema_errors(m) == []


OBJECTS = _objects()


@pytest.mark.parametrize("entry", OBJECTS, ids=[o[0] for o in OBJECTS])
def test_mutated_objects_are_schema_valid_patch_exact_and_idempotent(backend_policy, entry):
    _, policy = backend_policy
    label, obj, ns = deep(entry)
    original = deep(obj)
    d = decide(policy, Request(obj, namespace=ns))
    assert obj == original, f"{label}: the engine modified its input"
    if not d.matched:
        assert d.patch == [] and d.mutated is None
        return
    # 1. the patch, applied strictly as the apiserver would, gives exactly the engine's object
    assert apply_patch(original, d.patch) == json.loads(json.dumps(d.mutated)), label
    # 2. the mutated object is valid for Kubernetes 1.37 (every Job and Pod here starts valid)
    assert schema_errors(original) == [], label
    assert schema_errors(d.mutated) == [], label
    # 3. mutating the mutated object changes nothing
    again = decide(policy, Request(deep(d.mutated), namespace=ns))
    assert again.patch == [], f"{label}: second pass patched {again.patch}"
    assert [v.as_dict() for v in again.violations] == [v.as_dict() for v in d.violations]


def test_generate_name_job_is_named_and_ganged_on_every_backend(backend_policy):
    """With generateName the mutating webhook sees no name (job-07): on every backend the decision names the Job
    first (the name the request carries, else <generateName>xxxxx) and derives its gang from that name; it is
    never refused for it. A second pass over the mutated Job (a reinvocation) keeps the name and patches nothing."""
    _, policy = backend_policy
    req = review("job-07-mutate-Job-CREATE.json")["request"]
    assert "name" not in req["object"]["metadata"]
    d = decide(policy, Request(deep(req["object"]), namespace=req["namespace"], generated_name="sweep-k5r2d"))
    assert d.allowed, [v.text() for v in d.violations]
    assert "gang.name-required" not in {v.rule for v in d.violations}
    assert d.mutated["metadata"]["name"] == "sweep-k5r2d" and d.summary["name"] == "sweep-k5r2d"
    assert d.summary["gang"] != "none"
    for companion in d.companions:  # the PodGroups named after the Job
        assert companion["metadata"]["name"].startswith("sweep-k5r2d"), companion
    again = decide(policy, Request(deep(d.mutated), namespace=req["namespace"], generated_name="sweep-other"))
    assert again.patch == [] and again.allowed
    predicted = decide(policy, Request(deep(req["object"]), namespace=req["namespace"]))
    assert predicted.mutated["metadata"]["name"] == "sweep-xxxxx"


def test_validate_phase_accepts_what_mutate_produced(policy):
    obj = load_yaml(EXAMPLES / "llama-pretrain.yaml")[0]
    d = decide(policy, Request(deep(obj)))
    final = apply_patch(obj, d.patch)
    v = decide(policy, Request(final, phase="validate"))
    assert v.allowed, [x.text() for x in v.violations]
    assert v.patch == []


@pytest.mark.parametrize(("version", "api", "mode"), [("1.36", "scheduling.k8s.io/v1alpha2", "PodGroup"),
                                                      ("1.37", "scheduling.k8s.io/v1beta1", {"all": {}})])
def test_native_podgroup_uses_the_api_of_the_target_kubernetes_version(tmp_path, version, api, mode):
    """1.36 serves native PodGroups as v1alpha2 (disruptionMode an enum), 1.37 as v1beta1 (a struct) and
    no longer v1alpha2: the companion must be one the target apiserver accepts."""
    policy = load_policy(write_policy(tmp_path, {"kubernetesVersion": version, "featureGates": ["GenericWorkload"],
                                                 "gang": {"backend": "native", "nativeMode": "pod-group",
                                                          "disruptionMode": "all", "topologyMethod": "podAffinity"}}))
    d = decide(policy, Request(load_yaml(EXAMPLES / "llama-pretrain.yaml")[0]))
    [pg] = d.companions
    assert (pg["apiVersion"], pg["spec"]["disruptionMode"]) == (api, mode)
    assert schema_errors({**pg, "metadata": {"name": "x", "namespace": "team-nlp"}}, f"{version}.0") == []
    assert not any("needs Kubernetes" in v.message for v in d.violations)


def test_a_native_gang_the_policys_own_version_lacks_is_left_out_with_a_note(tmp_path):
    """1.35 has no standalone PodGroup, 1.36 no Job.spec.scheduling: the apiserver would drop what trainadmit
    wrote, so it writes no gang and says which field the version lacks (gang.unavailable, a note by default: the
    platform's to change)."""
    for version, mode, lacks in (("1.35", "pod-group", "standalone PodGroup"),
                                 ("1.36", "job-scheduling", "Job.spec.scheduling")):
        policy = load_policy(write_policy(tmp_path / version, {"kubernetesVersion": version,
                                                               "gang": {"backend": "native", "nativeMode": mode}}))
        d = decide(policy, Request(load_yaml(EXAMPLES / "llama-pretrain.yaml")[0]))
        [v] = [v for v in d.violations if v.rule == "gang.unavailable"]
        assert v.action.value == "note" and lacks in v.message and f"Kubernetes {version} does not have" in v.message
        assert d.allowed and d.summary["gang"] == "none" and not d.companions
        assert "scheduling" not in d.mutated["spec"] and "schedulingGroup" not in d.mutated["spec"]["template"]["spec"]
