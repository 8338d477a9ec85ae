"""The policy cache (`trainadmit.policy.cache`): a set read back from it decides exactly as the
validated set it was saved from, for every backend and every kind of object the project has; any
changed byte of what it depends on is a miss; a damaged, foreign or planted file is never served."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml
from support.builders import job
from support.corpus import generated_jobs
from support.paths import EXAMPLES, FIXTURES, POLICIES
from support.policies import BACKENDS, write_policy

from trainadmit.authoring.explain import Explainer
from trainadmit.cli.inputs import Item
from trainadmit.cli.render import Options, record, text
from trainadmit.engine import Request, decide, load_policy
from trainadmit.policy import cache, models


def saved_and_read(directory: Path, cache_dir: Path):
    """(the validated set the first load returns, the set a later process reads back)."""
    first = cache.load_policy_cached(directory, load_policy, cache_dir)
    again = cache.load_policy_cached(directory, load_policy, cache_dir)
    assert not isinstance(first.platform_doc, cache.Record)
    assert isinstance(again.platform_doc, cache.Record), "the second load must come from the cache"
    return first, again


def requests() -> list[tuple[str, Request]]:
    """Every kind of object the project has, as check and the webhook ask about them."""
    out = []
    for path in sorted(EXAMPLES.glob("*.yaml")) + sorted((FIXTURES / "real-world").glob("*.y*ml")):
        for i, doc in enumerate(d for d in yaml.safe_load_all(path.read_text()) if d):
            out.append((f"{path.name}#{i}", Request(doc, namespace="team-nlp")))
    for path in sorted((FIXTURES / "admission-reviews").glob("*.json")):
        req = json.loads(path.read_text())["review"]["request"]
        phase = "validate" if "-validate-" in path.name else "mutate"
        out.append((path.name, Request(req.get("object"), operation=req["operation"], old=req.get("oldObject"),
                                       namespace=req.get("namespace"), user=req.get("userInfo") or {},
                                       phase=phase)))
    out += [(f"generated-{i}", Request(obj)) for i, obj in enumerate(generated_jobs(40))]
    out += [("team-vision", Request(job(namespace="team-vision", annotations={"trainadmit.io/priority": "high"}))),
            ("exempt", Request(job(namespace="kube-system"))),
            ("nccl", Request(job(env=[{"name": "NCCL_IB_HCA", "value": "mlx5_0:1,"}])))]
    return out


REQUESTS = requests()


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_a_cached_set_decides_as_the_validated_one(backend, tmp_path):
    directory = write_policy(tmp_path / "policy", BACKENDS[backend])
    fresh, cached = saved_and_read(directory, tmp_path / "cache")
    assert cached.generation == fresh.generation
    explain_fresh, explain_cached = Explainer(fresh, directory), Explainer(cached, directory)
    assert len(REQUESTS) > 80
    for name, request in REQUESTS:
        a, b = decide(fresh, request), decide(cached, request)
        assert b.as_dict() == a.as_dict(), name
        assert (b.mutated, b.companions) == (a.mutated, a.companions), name
        item = Item(name, 1, request.obj)
        assert text(item, b, Options(explainer=explain_cached)) == text(item, a, Options(explainer=explain_fresh)), name
        assert record(item, b) == record(item, a)


def test_the_bundled_set_round_trips_field_by_field(tmp_path):
    fresh, cached = saved_and_read(POLICIES, tmp_path)
    assert cached.pools["h100-ib"].topology.level("rack").maxNodes == 16
    assert cached.pools["h100-ib"].toleration_dicts == fresh.pools["h100-ib"].toleration_dicts
    assert cached.actions == fresh.actions and cached.enforced == fresh.enforced
    assert cached.sources == fresh.sources and cached.keys == fresh.keys
    assert [r.rule_id for r in cached.compiled_rules] == [r.rule_id for r in fresh.compiled_rules]
    assert cache.to_record(fresh.platform_doc) == cached.platform_doc
    with pytest.raises(AttributeError):
        cached.platform.gang.backend = "volcano"


def test_every_model_method_the_engine_can_reach_is_on_the_records(tmp_path):
    """A model's properties are computed into its record and its methods come from ``vocab`` mixins;
    a method defined on a model itself is missing from the record. The only one is as_k8s, which
    only computes PoolSpec.toleration_dicts (a property, so carried). A new one fails here: move it to
    a vocab mixin (as Topology.level), make it a property, or add it below if no engine code calls it."""
    from pydantic import BaseModel

    classes = [c for c in vars(models).values() if isinstance(c, type) and issubclass(c, BaseModel)
               and c.__module__ == models.__name__]
    missing = {f"{c.__name__}.{m}" for c in classes for m in cache.model_behaviour(c)[1]}
    assert missing == {"Toleration.as_k8s"}
    fresh, cached = saved_and_read(POLICIES, tmp_path)
    assert cached.pools["h100-ib"].topology.level("zone") == cache.to_record(fresh.pools["h100-ib"].topology.level("zone"))


def test_odd_values_round_trip_and_uncacheable_ones_load_every_time(tmp_path):
    params = {"n": 3, "f": 0.5, "neg": -0.0, "b": False, "z": None, "l": [1, "two", {"3": [4]}],
              "\0tag": "a NUL key", "\0record": ["not", "a", "record"]}
    rule = {"apiVersion": "trainadmit.io/v1alpha1", "kind": "Rule", "metadata": {"name": "odd"},
            "spec": {"params": params, "validations": [{"expression": "true", "message": "m"}]}}
    directory = write_policy(tmp_path / "p", extra=[rule])
    fresh, cached = saved_and_read(directory, tmp_path / "cache")
    assert cached.rules["odd"].params == fresh.rules["odd"].params == params

    rule["spec"]["params"] = {"when": yaml.safe_load("2026-01-01")}  # a date: JSON cannot carry it
    (directory / "extra.yaml").write_text(yaml.safe_dump(rule))
    before = set((tmp_path / "cache").iterdir())
    for _ in range(2):
        policy = cache.load_policy_cached(directory, load_policy, tmp_path / "cache")
        assert not isinstance(policy.platform_doc, cache.Record)
        assert str(policy.rules["odd"].params["when"]) == "2026-01-01"
    assert set((tmp_path / "cache").iterdir()) == before


def test_any_changed_byte_is_a_miss(tmp_path):
    directory = write_policy(tmp_path / "p")
    key = cache.cache_key(directory)
    assert key == cache.cache_key(write_policy(tmp_path / "elsewhere"))  # content, not location
    saved_and_read(directory, tmp_path / "cache")

    pools = directory / "pools.yaml"
    pools.write_text(pools.read_text().replace("perNode: 8", "perNode: 4"))
    assert cache.cache_key(directory) != key
    changed = cache.load_policy_cached(directory, load_policy, tmp_path / "cache")
    assert changed.pools["h100-ib"].gpu.perNode == 4  # validated again, not the saved set
    assert cache.load_policy_cached(directory, load_policy, tmp_path / "cache").pools["h100-ib"].gpu.perNode == 4

    (directory / "pools.yaml").rename(directory / "pools2.yaml")
    assert cache.cache_key(directory) not in (key, None)


@pytest.mark.parametrize("module, miss", [
    ("policy/models.py", True), ("grammars/nccl.py", True),  # what validates
    ("engine/registry.py", True), ("engine/workloads/__init__.py", True),  # rule ids, handled kinds
    ("engine/concerns/gang.py", True),  # a concern declares rule ids
    ("cli/render.py", False), ("server/app.py", False),  # above the engine: validation cannot read them
])
def test_a_change_to_the_code_validation_reads_is_a_miss(module, miss, tmp_path, monkeypatch):
    code = tmp_path / "trainadmit"
    shutil.copytree(cache._CODE_ROOT, code, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(cache, "_CODE_ROOT", code)
    before = cache.cache_key(POLICIES)
    changed = code / module
    changed.write_text(changed.read_text() + "\n# one more line\n")
    assert (cache.cache_key(POLICIES) != before) is miss


def test_the_loader_reads_only_the_layers_the_key_covers():
    """engine.load_policy (the loader the CLI hands the cache) and what it imports stay in the layers
    whose source is in the key; tests/project/test_layout.py holds every module to importing downward only."""
    from support.layout import LAYERS

    assert {name for name, level in LAYERS.items() if level <= LAYERS["engine"]} == set(cache._CODE_LAYERS)


def plant(cache_dir: Path, directory: Path, payload_from: Path, mode: int = 0o600) -> Path:
    """Put the saved form of another policy under ``directory``'s key (what an attacker or a bug would do)."""
    [other] = [p for p in payload_from.glob("policy-*.json")]
    target = cache_dir / f"policy-{cache.cache_key(directory)}.json"
    cache_dir.mkdir(exist_ok=True)
    target.write_text(other.read_text())
    target.chmod(mode)
    return target


def test_damaged_foreign_and_others_writable_files_are_never_served(tmp_path):
    directory = write_policy(tmp_path / "p")
    other = write_policy(tmp_path / "other", {"shm": {"sizeLimit": "8Gi"}})
    saved_and_read(other, tmp_path / "other-cache")
    cache_dir = tmp_path / "cache"
    target = plant(cache_dir, directory, tmp_path / "other-cache", mode=0o666)  # others may write it
    assert cache.load_policy_cached(directory, load_policy, cache_dir).platform.shm.sizeLimit == "64Gi"

    for damage in ("{not json", '{"\\u0000record": ["PoolSpec", ["StrEnum"], {}]}',
                   '{"\\u0000record": ["PoolSpec", ["Record"], {}]}', '{"\\u0000nope": 1}',
                   json.dumps({"\0enum": ["os", "environ", "x"]}),
                   json.dumps({"\0enum": ["trainadmit.grammars.nope", "X", "x"]}),
                   json.dumps({"\0enum": ["trainadmit.grammars.preflight", "Expectations", "x"]}), ""):
        target.write_text(damage)
        target.chmod(0o600)
        policy = cache.load_policy_cached(directory, load_policy, cache_dir)
        assert policy.platform.shm.sizeLimit == "64Gi" and not isinstance(policy.platform_doc, cache.Record)
        assert isinstance(cache.load_policy_cached(directory, load_policy, cache_dir).platform_doc, cache.Record)


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="giving a file to another user needs root")
def test_a_file_another_user_owns_is_never_served(tmp_path):
    directory, cache_dir = write_policy(tmp_path / "p"), tmp_path / "cache"
    saved_and_read(directory, cache_dir)  # served from the cache while it is ours
    target = cache_dir / f"policy-{cache.cache_key(directory)}.json"
    os.chown(target, 12345, 12345)  # someone else's file
    policy = cache.load_policy_cached(directory, load_policy, cache_dir)
    assert policy.platform.shm.sizeLimit == "64Gi" and not isinstance(policy.platform_doc, cache.Record)


def test_an_unwritable_cache_directory_costs_speed_not_correctness(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    policy = cache.load_policy_cached(POLICIES, load_policy, blocked / "cache")
    assert set(policy.pools) == {"h100-ib", "l40s-eth"}


def test_a_missing_directory_is_the_loaders_error(tmp_path):
    from trainadmit.policy import PolicyError

    with pytest.raises(PolicyError, match="does not exist"):
        cache.load_policy_cached(tmp_path / "missing", load_policy, tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def test_a_cached_node_label_requirement_reads_as_the_models(policy):
    """Messages name a pool's required node labels (hardware.matching-nodes): `check` from the policy cache
    (records, not pydantic models) must print them as the server does."""
    from trainadmit.policy.cache import to_record

    requirements = [r for pool in policy.pools.values() for r in pool.requiredNodeLabels]
    assert requirements
    for requirement in requirements:
        assert str(to_record(requirement)) == str(requirement)
        assert requirement.key in str(requirement) and "NodeLabelRequirement(" not in str(requirement)
