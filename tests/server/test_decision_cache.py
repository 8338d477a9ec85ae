"""The server's remembered decision equals ``decide``'s, whatever the concerns read.

Over generated Jobs and Pods, every gang backend, operator custom resources, validate as well as
mutate, and cluster views whose answers change between calls: ``DecisionCache.decide`` gives the same
verdict, the same violations in the same order and the same patch as ``decide``. Siblings that differ
only in what no concern declares reading (name, image, command, env values, uid) must be hits, which
shows the cache really remembers; a sibling whose cluster answers changed must be recomputed. A built-in
rule that reads a field no other rule reads (a container's image) is served exactly as ``decide`` answers.
"""

from __future__ import annotations

import copy
import gc
import json
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.builders import with_gpus
from support.manifests import deep, load_yaml, review
from support.paths import FIXTURES
from support.policies import BACKENDS
from support.strategies import names, policy_for, workloads

from trainadmit.cluster.index import ClusterIndex
from trainadmit.engine import Request, decide
from trainadmit.engine.decide import project
from trainadmit.engine.workloads import adapter_for
from trainadmit.server.decisions import DecisionCache, _token, _tokens_replaced


def same(remembered, fresh) -> None:
    assert remembered.matched == fresh.matched
    assert remembered.allowed == fresh.allowed
    assert [(v.rule, v.action, v.path, v.message, v.hint) for v in remembered.violations] == \
        [(v.rule, v.action, v.path, v.message, v.hint) for v in fresh.violations]
    if fresh.matched:  # a remembered decision carries its patch serialized; one the cache passed by, as a list
        patch = json.loads(remembered.patch_json) if remembered.patch_json is not None else remembered.patch
        assert patch == fresh.patch


def sibling(obj: dict, name: str) -> dict:
    """The same workload as another user submits it: other name, image, command, env values, uid."""
    other = copy.deepcopy(obj)
    meta = other["metadata"]
    if "name" in meta:
        meta["name"] = name
    meta["uid"] = "6b0e5f7a-0000-4000-8000-000000000002"
    spec = other["spec"].get("template", {}).get("spec") if other["kind"] == "Job" else other["spec"]
    for c in spec["containers"]:
        c["image"] = "registry.local/other:2"
        c["command"] = ["python", "other.py"]
        for e in c.get("env", []):
            if "value" in e and not e["name"].startswith("NCCL_"):
                e["value"] = "changed"
    return other


def only_in_metadata(policy, obj: dict) -> bool:
    """The object's name occurs nowhere but in metadata.name (else the sibling's key differs: a miss)."""
    name = obj["metadata"].get("name")
    return name is None or len(_token(name).findall(json.dumps(project(policy, obj)))) == 1


def cluster(nodes: int, used: int) -> ClusterIndex:
    view = ClusterIndex()
    for i in range(nodes):
        view.put_node({"metadata": {"name": f"n{i}", "labels": {
            "trainadmit.io/pool": "h100-ib", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "topology.kubernetes.io/rack": f"r{i % 3}", "topology.kubernetes.io/zone": "z1"}}})
    view.put_quota({"metadata": {"namespace": "team-nlp", "name": "gpu"},
                    "spec": {"hard": {"requests.nvidia.com/gpu": "64"}},
                    "status": {"hard": {"requests.nvidia.com/gpu": "64"}, "used": {"requests.nvidia.com/gpu": str(used)}}})
    return view


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=workloads(), backend=st.sampled_from(sorted(BACKENDS)), other=names,
       nodes=st.sampled_from([0, 3, 30]), used=st.sampled_from([0, 40, 64]))
def test_remembered_equals_fresh(obj, backend, other, nodes, used):
    policy = policy_for(backend)
    cache = DecisionCache(policy)
    view = cluster(nodes, used) if nodes else None
    first = cache.decide(Request(copy.deepcopy(obj)), view)
    same(first, decide(policy, Request(copy.deepcopy(obj)), view))
    twin = sibling(obj, other)
    before = cache.hits
    same(cache.decide(Request(copy.deepcopy(twin)), view), decide(policy, Request(copy.deepcopy(twin)), view))
    if first.matched and cache.bypassed == 0 and only_in_metadata(policy, obj) and only_in_metadata(policy, twin):
        assert cache.hits == before + 1, "a sibling that differs only in unread fields must be a hit"
    if view is not None:  # the namespace's quota use changes: the answer must follow, never the memory
        changed = cluster(nodes, 64 - used)
        same(cache.decide(Request(copy.deepcopy(twin)), changed), decide(policy, Request(copy.deepcopy(twin)), changed))
    if first.matched and first.patch_json:
        mutated = decide(policy, Request(copy.deepcopy(obj))).mutated
        same(cache.decide(Request(copy.deepcopy(mutated), phase="validate"), view),
             decide(policy, Request(copy.deepcopy(mutated), phase="validate"), view))


def test_operator_resources_remembered_equal_fresh():
    policy = policy_for("native-podgroup")
    cache = DecisionCache(policy)
    count = 0
    for path in sorted((FIXTURES / "operators").glob("*/examples/*.yaml")):
        for doc in load_yaml(path):
            if adapter_for(doc.get("apiVersion"), doc.get("kind")) is None:
                continue
            for obj in (doc, with_gpus(doc)):
                for phase in ("mutate", "validate"):
                    same(cache.decide(Request(copy.deepcopy(obj), phase=phase)),
                         decide(policy, Request(copy.deepcopy(obj), phase=phase)))
                    count += 1
    assert count > 100


def test_custom_rule_results_follow_the_fields_they_read():
    """The bundled memory-per-gpu rule reads the containers: a sibling with too little memory is warned
    although everything the built-in engine reads is the same."""
    policy = policy_for("native-job")
    cache = DecisionCache(policy)
    job = load_yaml(FIXTURES.parent.parent / "examples" / "llama-pretrain.yaml")[0]
    ok = cache.decide(Request(copy.deepcopy(job)))
    low = copy.deepcopy(job)
    low["metadata"]["name"] = "llama-low-memory"
    low["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] = "8Gi"
    warned = cache.decide(Request(copy.deepcopy(low)))
    same(warned, decide(policy, Request(copy.deepcopy(low))))
    assert "custom.memory-per-gpu" in {v.rule for v in warned.warnings} - {v.rule for v in ok.warnings}


def as_validated(job: dict, uid: str) -> dict:
    """A Job as /validate receives it: the apiserver gave it a uid and derived its selector and template
    labels from it (the Job strategy runs between the mutating and the validating webhooks)."""
    out = copy.deepcopy(job)
    out["metadata"]["uid"] = uid
    labels = {"batch.kubernetes.io/controller-uid": uid, "controller-uid": uid,
              "batch.kubernetes.io/job-name": out["metadata"]["name"], "job-name": out["metadata"]["name"]}
    out["spec"]["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    template_meta = out["spec"]["template"].setdefault("metadata", {})
    template_meta["labels"] = {**(template_meta.get("labels") or {}), **labels}
    return out


def test_jobs_at_validate_with_their_own_uids_share_an_entry():
    policy = policy_for("coscheduling")
    cache = DecisionCache(policy)
    job = load_yaml(FIXTURES.parent.parent / "examples" / "llama-pretrain.yaml")[0]
    for i in range(5):
        sub = copy.deepcopy(job)
        sub["metadata"]["name"] = f"llama-{i}"
        mutated = decide(policy, Request(copy.deepcopy(sub))).mutated
        validated = as_validated(mutated, f"6b0e5f7a-0000-4000-8000-00000000000{i}")
        same(cache.decide(Request(copy.deepcopy(validated), phase="validate")),
             decide(policy, Request(copy.deepcopy(validated), phase="validate")))
        damaged = copy.deepcopy(validated)  # a lost injection is still seen, whatever the uid
        del damaged["spec"]["template"]["spec"]["tolerations"]
        lost = cache.decide(Request(copy.deepcopy(damaged), phase="validate"))
        same(lost, decide(policy, Request(copy.deepcopy(damaged), phase="validate")))
        assert not lost.allowed
    assert cache.hits == 8 and cache.misses == 2, (cache.hits, cache.misses, cache.bypassed)


@given(text=st.text(alphabet="ab-.\"x0:", max_size=60), name=st.sampled_from(["ab", "a-b", "x0", "b.a"]))
def test_token_replacement_by_find_equals_the_regex(text, name):
    assert _tokens_replaced(text, name, "S") == _token(name).sub("S", text)


def test_an_exempt_users_decision_is_never_given_to_another_user(tmp_path):
    """Same object, one user exempt (Platform.spec.exemptUsers / exemptGroups) and one not: each gets their
    own decision, in either order."""
    from support.policies import write_policy

    from trainadmit.engine import load_policy

    policy = load_policy(write_policy(tmp_path, {"exemptUsers": ["break-glass"], "exemptGroups": ["sre"]}))
    job = load_yaml(FIXTURES.parent.parent / "examples" / "llama-pretrain.yaml")[0]
    users = [{"username": "alice", "groups": ["team-nlp"]}, {"username": "break-glass", "groups": []},
             {"username": "bob", "groups": ["sre"]}, {"username": "carol", "groups": []}]
    for order in (users, users[::-1]):
        cache = DecisionCache(policy)
        for user in order:
            got = cache.decide(Request(copy.deepcopy(job), user=user))
            same(got, decide(policy, Request(copy.deepcopy(job), user=user)))
            assert got.matched == (user["username"] in ("alice", "carol")), user


def test_remembered_decisions_do_not_keep_their_objects(policy):
    """Keys are as large as the object's projection: the cache keeps a digest of each, not the object, so
    distinct large objects do not stay in memory until the table starts over at 4,096 entries."""
    cache = DecisionCache(policy)
    template = review("job-03-mutate-Job-CREATE.json")["request"]["object"]
    count, size = 20, 100_000
    tracemalloc.start()
    try:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for i in range(count):
            obj = deep(template)
            # labels are read whole, so each of these objects has a key of its own, as large as the label
            obj["metadata"].setdefault("labels", {})["example.com/notes"] = f"{i:06d}" + "x" * size
            decision = cache.decide(Request(obj, operation="CREATE", namespace="team-nlp", phase="mutate"))
            assert decision.allowed
        del obj, decision
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert cache.misses == count  # each object a different key: each remembered
    assert kept < count * size / 10, f"{kept:,} bytes kept for {count} decisions of {size:,}-byte objects"


def _image_rule(reads):
    """A built-in rule no bundled rule resembles: it reads container images, which nothing else reads."""
    from trainadmit.engine.concern import Concern
    from trainadmit.engine.paths import field_path
    from trainadmit.engine.rule import rule
    from trainadmit.policy.vocab import Action

    latest = rule("image.latest", Action.deny, "a container image tagged :latest")

    def validate(ctx, view):
        for template in view.templates:
            for ref in template.main_containers:
                image = ref.body.get("image")
                if isinstance(image, str) and image.endswith(":latest"):
                    ctx.report(latest, field_path((*template.container_path(ref), "image")),
                               f"{image} is not a version", "pin the image to a tag or a digest")

    return Concern("image", rules=(latest,), validate=validate, reads=reads)


def _register(monkeypatch, concern) -> None:
    """Add ``concern`` to the registry as a built-in one is (what the engine and the cache derive from it)."""
    import importlib

    from trainadmit.engine import registry
    from trainadmit.server import decisions

    decide_module = importlib.import_module("trainadmit.engine.decide")
    if concern.reads is None:
        whole = (*registry.WHOLE_OBJECT_VALIDATIONS, concern)
        monkeypatch.setattr(decide_module, "WHOLE_OBJECT_VALIDATIONS", whole)
        monkeypatch.setattr(decisions, "WHOLE_OBJECT_VALIDATIONS", whole)
    else:
        monkeypatch.setattr(decide_module, "VALIDATIONS", (*registry.VALIDATIONS, concern))
        monkeypatch.setattr(decide_module, "READS", registry.READS | concern.reads)


@pytest.mark.parametrize("declared", ["reads the image", "reads the whole object"])
def test_a_new_rule_reading_a_field_no_other_rule_reads_is_served_as_decide_answers(monkeypatch, declared):
    """The old memo keyed decisions by the object without the fields the built-in engine never read (a
    hand-written list: images among them), so a new built-in rule reading images got, from the server, the
    decision remembered for another image. A rule declares what it reads next to itself (or nothing: then
    it reads the whole object) and the server's answer is decide()'s, image by image."""
    from trainadmit.engine.reads import Reads

    policy = policy_for("native-job")
    _register(monkeypatch, _image_rule(Reads(container=("image",)) if declared == "reads the image" else None))
    cache = DecisionCache(policy)
    job = load_yaml(FIXTURES.parent.parent / "examples" / "llama-pretrain.yaml")[0]
    served = []
    for i, image in enumerate(["registry.local/llama:1.0", "registry.local/llama:latest", "registry.local/llama:1.0"]):
        obj = copy.deepcopy(job)
        obj["metadata"]["name"] = f"llama-{i}"
        obj["spec"]["template"]["spec"]["containers"][0]["image"] = image
        got, fresh = cache.decide(Request(copy.deepcopy(obj))), decide(policy, Request(copy.deepcopy(obj)))
        same(got, fresh)
        served.append(got.allowed)
    assert served == [True, False, True]
    assert cache.hits >= 1  # the third Job is the first one under another name: remembered, not recomputed
