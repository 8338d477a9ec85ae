"""What the concerns declare they read is all the engine's first stage sees (``engine.reads``).

The projection keeps exactly what some concern declares and the shape of what none reads, never changes
the object it is given, is its own fixed point, and the decision on it is the decision: a concern that
writes where it declared no read is refused rather than allowed to overwrite what it could not see.
"""

from __future__ import annotations

import copy
import importlib
import json

import pytest
from support.builders import job
from support.manifests import load_yaml, review
from support.paths import FIXTURES, ROOT

from trainadmit.engine import Request, decide
from trainadmit.engine.concern import Concern
from trainadmit.engine.decide import project
from trainadmit.engine.patch import UndeclaredWrite
from trainadmit.engine.reads import Reads
from trainadmit.engine.workloads import adapter_for

decide_module = importlib.import_module("trainadmit.engine.decide")
reads_module = importlib.import_module("trainadmit.engine.reads")


def objects() -> list[dict]:
    out = []
    for path in sorted([*FIXTURES.glob("operators/*/examples/*.yaml"), *FIXTURES.glob("real-world/**/*.yaml"),
                        *(ROOT / "examples").glob("*.yaml")]):
        out += [d for d in load_yaml(path) if isinstance(d, dict) and adapter_for(d.get("apiVersion"), d.get("kind"))]
    return out


def test_the_projection_keeps_what_is_read_and_the_shape_of_the_rest(policy):
    obj = review("job-03-mutate-Job-CREATE.json")["request"]["object"]
    obj = copy.deepcopy(obj)
    obj["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": "{\"big\": 1}",
                                      "trainadmit.io/topology": "rack", "k8s.v1.cni.cncf.io/networks": "a,b"}
    container = obj["spec"]["template"]["spec"]["containers"][0]
    container.update(image="registry.local/x:1", command=["python"], env=[
        {"name": "NCCL_DEBUG", "value": "INFO"}, {"name": "RUN_ID", "value": "abc"},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}])
    before = json.dumps(obj, sort_keys=True)
    got = project(policy, obj)
    assert json.dumps(obj, sort_keys=True) == before  # the object itself is never changed
    assert got["metadata"]["annotations"] == {"kubectl.kubernetes.io/last-applied-configuration": "",
                                              "trainadmit.io/topology": "rack", "k8s.v1.cni.cncf.io/networks": "a,b"}
    assert "uid" not in got["metadata"] and "status" not in got and "creationTimestamp" not in got["metadata"]
    shown = got["spec"]["template"]["spec"]["containers"][0]
    assert "image" not in shown and "command" not in shown and shown["name"] == container["name"]
    assert shown["env"] == [{"name": "NCCL_DEBUG", "value": "INFO"}, {"name": "RUN_ID", "value": ""},
                            {"name": "POD", "valueFrom": {}}]
    assert shown["resources"] == container["resources"]
    assert got["spec"]["parallelism"] == obj["spec"]["parallelism"]  # the kind's own spec: whole


def test_the_projection_is_its_own_fixed_point_on_every_public_manifest(policy):
    found = objects()
    assert len(found) > 60
    for obj in found:
        once = project(policy, obj)
        assert project(policy, once) == once


def test_a_mutation_writing_where_it_declares_no_read_is_refused(policy, monkeypatch):
    """A concern that sets a container's image without declaring that it reads images cannot see the image
    there: its patch would silently replace it. The engine refuses that patch."""
    def pin(ctx):
        for template in ctx.workload.templates:
            ctx.inject((*template.container_path(template.main_containers[0]), "image"), "registry.local/pinned",
                       "pin", ctx.platform_source("spec"))

    monkeypatch.setattr(decide_module, "MUTATIONS", (*decide_module.MUTATIONS, Concern("pin", mutate=pin,
                                                                                       reads=Reads())))
    with pytest.raises(UndeclaredWrite, match="image"):
        decide(policy, Request(job(container={"image": "registry.local/mine:1"})))
    monkeypatch.setattr(decide_module, "MUTATIONS", (*decide_module.MUTATIONS[:-1], Concern(
        "pin", mutate=pin, reads=Reads(container=("image",)))))
    monkeypatch.setattr(decide_module, "READS", decide_module.READS | Reads(container=("image",)))
    d = decide(policy, Request(job(container={"image": "registry.local/mine:1"})))
    assert d.mutated["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.local/pinned"


def test_the_registry_refuses_a_mutation_that_declares_no_reads():
    from trainadmit.engine import registry

    with pytest.raises(RuntimeError, match="without declaring what it reads"):
        registry._check((*registry.CONCERNS, Concern("pin", mutate=lambda ctx: None)))


@pytest.mark.parametrize("limit", [4096, 1])  # 1: the memo of names is emptied before each name it learns
def test_env_names_decided_once_cut_the_same_entries_every_time(limit, monkeypatch):
    """``Projection`` remembers per env name whether its value is read (a name and a prefix test once per name):
    a name remembered, forgotten or met again gives the same entry, and a non-str name is never remembered."""
    monkeypatch.setattr(reads_module, "_ENV_MEMO_LIMIT", limit)
    projection = reads_module.Projection(Reads(object=("spec",), pod=("containers",), container=("env",),
                                               env_values=("NCCL_*", "RUN_ID")), "trainadmit.io")
    env = [{"name": "NCCL_DEBUG", "value": "INFO"}, {"name": "RUN_ID", "value": "abc"},
           {"value": "x", "name": "OTHER"}, {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "a"}}},
           {"name": "BOTH", "value": "v", "valueFrom": {"x": 1}}, {"name": "NUM", "value": 3}, {"name": 7, "value": "s"},
           {"name": ["x"], "value": "s"}, {"name": "BARE"}, "not-a-map", {"name": "OTHER", "value": "again"},
           {"name": "NCCL_DEBUG", "value": "WARN"}]
    want = [{"name": "NCCL_DEBUG", "value": "INFO"}, {"name": "RUN_ID", "value": "abc"}, {"name": "OTHER", "value": ""},
            {"name": "POD", "valueFrom": {}}, {"name": "BOTH", "value": "", "valueFrom": {}}, {"name": "NUM", "value": 3},
            {"name": 7, "value": "s"}, {"name": ["x"], "value": "s"}, {"name": "BARE"}, "not-a-map",
            {"name": "OTHER", "value": ""}, {"name": "NCCL_DEBUG", "value": "WARN"}]
    obj = {"spec": {"containers": [{"name": "c", "image": "i", "env": env}, "not-a-container", {"env": env}]}}
    for _ in range(2):
        got = projection.project(obj, [()])
        assert got["spec"]["containers"] == [{"env": want}, "not-a-container", {"env": want}]
        assert [list(e) for e in got["spec"]["containers"][0]["env"] if type(e) is dict] == \
            [list(e) for e in want if type(e) is dict]  # the keys in the same order
    assert all(type(name) is str for name in projection._env_cut) and len(projection._env_cut) == min(limit, 7)
