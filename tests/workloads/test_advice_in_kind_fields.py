"""Advice speaks the submitted kind's own language: over one public object of every kind trainadmit handles, every
rule made to fire reports a path that is a field of that object (or an intent key to add, or a field its fix sets),
and every field its fix names exists in the kind's schema (the CRD's openAPIV3Schema; Kubernetes' own for a Job
or a Pod). Numbers in a fix are values that pass: applying a count fix makes the rule go away.

The objects are public manifests (tests/fixtures; sources in SOURCES.md) as a training user sends them: with
GPUs, and with what each scenario adds (a tight quota, a partial node, an unknown intent key…).
"""

from __future__ import annotations

import copy
import json
import re
from functools import cache

import importlib_resources
import pytest
from support.builders import with_gpus
from support.crd_prune import crd_schema
from support.manifests import load_yaml
from support.operators import CRDS
from support.paths import FIXTURES
from support.policies import write_policy
from support.schemas import K8S_VERSION

from trainadmit.engine import Request, decide, load_policy
from trainadmit.engine.workloads import workload_of

OPS = FIXTURES / "operators"
REAL = FIXTURES / "real-world"
KINDS = {  # one public object per handled kind
    ("batch/v1", "Job"): REAL / "k8s-website-indexed-job.yaml",
    ("v1", "Pod"): REAL / "netop-rdma-gpu-test-pod1.yml",
    ("kubeflow.org/v1", "PyTorchJob"): REAL / "kftrainingop-pytorch_job_mnist_nccl.yaml",
    ("kubeflow.org/v1", "MPIJob"): OPS / "kubeflow-training-operator-v1/examples/mpijob_v1_tensorflow-mnist.yaml",
    ("kubeflow.org/v2beta1", "MPIJob"): REAL / "mpiop-tensorflow-benchmarks.yaml",
    ("ray.io/v1", "RayCluster"): REAL / "kueue-ray-cluster-sample.yaml",
    ("ray.io/v1", "RayJob"): REAL / "kuberay-ray-job.pytorch-image-classifier.yaml",
    ("batch.volcano.sh/v1alpha1", "Job"): REAL / "volcano-mpi-example.yaml",
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): REAL / "jobset-resnet.yaml",
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): REAL / "lws-sglang-lws.yaml",
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): REAL / "kftrainer-02-multi-node.yaml",
}
QUOTA = {"apiVersion": "trainadmit.io/v1alpha1", "kind": "Quota", "metadata": {"name": "research"},
         "spec": {"namespaces": ["research"], "maxGPUsPerJob": 8, "maxWorkersPerJob": 1, "gpuQuota": 8,
                  "allowedPools": ["l40s-eth"], "allowedPriorities": ["low"]}}
SMALL = {"apiVersion": "trainadmit.io/v1alpha1", "kind": "Quota", "metadata": {"name": "small"},
         "spec": {"namespaces": ["small"], "maxWorkersPerJob": 2}}
DATASET = {"apiVersion": "trainadmit.io/v1alpha1", "kind": "Dataset", "metadata": {"name": "inputs"},
           "spec": {"claimName": "inputs", "mountPath": "/mnt/taken"}}


def _object(key) -> dict:
    obj = next(d for d in load_yaml(KINDS[key]) if (d.get("apiVersion"), d.get("kind")) == key)
    obj = copy.deepcopy(obj)
    meta = obj.setdefault("metadata", {})
    meta.setdefault("name", "example")
    meta.pop("generateName", None)
    return obj


def _containers(obj: dict) -> list[dict]:
    """The GPU-side containers as the user writes them (a TrainJob's in spec.trainer)."""
    if obj["kind"] == "TrainJob":
        return [obj["spec"]["trainer"]]
    return [ref.body for t in workload_of(obj).templates for ref in t.main_containers]


def _resources(obj: dict, gpu: str = "nvidia.com/gpu", count: int = 8, section: str = "limits") -> dict:
    if obj["kind"] == "TrainJob":
        obj["spec"]["trainer"]["resourcesPerNode"] = {section: {gpu: count}}
        return obj
    for c in _containers(obj):
        c["resources"] = {section: {gpu: count}}
    return obj


def _env(obj: dict, entries: list[dict]) -> dict:
    for c in _containers(obj):
        c["env"] = [*entries, *(c.get("env") or [])]
    return obj


def _meta(obj: dict, labels: dict | None = None, annotations: dict | None = None) -> dict:
    obj["metadata"].setdefault("labels", {}).update(labels or {})
    obj["metadata"].setdefault("annotations", {}).update(annotations or {})
    return obj


def _templates(obj: dict):
    return workload_of(obj).templates


def _pod_specs(obj: dict) -> list[dict]:
    if obj["kind"] == "TrainJob":
        return []
    from trainadmit.engine.paths import get_path
    return [get_path(obj, t.spec_path) for t in _templates(obj)]


def _mount(obj: dict, path: str) -> dict:
    for c in _containers(obj) if obj["kind"] != "TrainJob" else ():
        c.setdefault("volumeMounts", []).append({"name": "mine", "mountPath": path})
    for spec in _pod_specs(obj):
        spec.setdefault("volumes", []).append({"name": "mine", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}})
    return obj


def _with_memory(obj: dict) -> dict:
    for c in _containers(obj) if obj["kind"] != "TrainJob" else ():
        c["resources"]["limits"]["memory"] = "32Gi"
    return obj


# scenario -> what the user adds; each makes several rules fire
SCENARIOS = {
    "quota": lambda o: _meta(with_gpus(o, 8), annotations={"trainadmit.io/priority": "normal"}),
    "partial-nodes": lambda o: with_gpus(o, 6),
    "one-big-pod": lambda o: with_gpus(o, 16),
    "one-node-domain": lambda o: _meta(with_gpus(o, 8), annotations={"trainadmit.io/topology": "node"}),
    "requests-only": lambda o: _resources(o, section="requests"),
    "nccl": lambda o: _env(with_gpus(o, 8), [{"name": "NCCL_IB_HCA", "value": "mlx5_0:x"},
                                             {"name": "NCCL_ALGO", "value": "ring"}]),
    "typos": lambda o: _meta(with_gpus(o, 8), {"trainadmit.io/pool": "h100"},
                             {"trainadmit.io/gang": "yes", "trainadmit.io/datasets": "c5",
                              "trainadmit.io/checkpoint": "nightly", "trainadmit.io/priority": "urgent"}),
    "unknown-level": lambda o: _meta(with_gpus(o, 8), annotations={"trainadmit.io/topology": "pod"}),
    "rdma-on-ethernet": lambda o: _meta(_nic(with_gpus(o, 4)), {"trainadmit.io/pool": "l40s-eth"}),
    "amd": lambda o: _resources(o, gpu="amd.com/gpu"),
    "efa": lambda o: _efa(with_gpus(o, 8)),
    "own-shm": lambda o: _with_memory(_mount(with_gpus(o, 8), "/dev/shm")),
    "taken-mount": lambda o: _meta(_mount(with_gpus(o, 8), "/mnt/taken"), annotations={"trainadmit.io/datasets": "inputs"}),
    "enforced-selector": lambda o: _selector(with_gpus(o, 8)),
}


def _nic(obj: dict) -> dict:
    for c in _containers(obj) if obj["kind"] != "TrainJob" else ():
        c["resources"]["limits"]["rdma/ib"] = 1
    return obj


def _efa(obj: dict) -> dict:
    for c in _containers(obj) if obj["kind"] != "TrainJob" else ():
        c["resources"]["limits"]["vpc.amazonaws.com/efa"] = 4
    return obj


def _selector(obj: dict) -> dict:
    for spec in _pod_specs(obj):
        spec["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    return obj


@pytest.fixture(scope="module")
def policies(tmp_path_factory):
    return load_policy(write_policy(tmp_path_factory.mktemp("advice"), extra=[QUOTA, SMALL, DATASET]))


# ---- paths in objects and in schemas -----------------------------------------------------------------------

_TOKEN = re.compile(r'\.?([A-Za-z_][\w-]*)|\[(\d+)\]|\["([^"]+)"\]')
FIELD = re.compile(r'(?<![\w.\]"])((?:spec|metadata)(?:\.[A-Za-z_][\w-]*|\[\d+\]|\["[^"]+"\])*)')


def parse(path: str) -> list[str | int]:
    return [int(i) if i else (k if k else n) for n, i, k in _TOKEN.findall(path)]


def exists(obj, parts) -> bool:
    cur = obj
    for part in parts:
        if isinstance(part, int):
            if not isinstance(cur, list) or part >= len(cur):
                return False
        elif not isinstance(cur, dict) or part not in cur:
            return False
        cur = cur[part]
    return True


@cache
def _k8s(kind: str) -> tuple[dict, dict]:
    base = importlib_resources.files("kubernetes_validate").joinpath(f"kubernetes-json-schema/v{K8S_VERSION}-local-strict")
    name = {"Job": "job-batch-v1.json", "Pod": "pod-v1.json"}[kind]
    return json.loads(base.joinpath(name).read_text()), json.loads(base.joinpath("_definitions.json").read_text())


def _deref(schema: dict, defs: dict) -> dict:
    while "$ref" in schema:
        schema = defs["$defs"][schema["$ref"].rsplit("/", 1)[-1]]
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return _deref(schema["allOf"][0], defs)
    return schema


def in_schema(key, parts) -> bool:
    """Whether the field path names a field the kind's schema declares (maps' keys are any key)."""
    if key[0] in ("batch/v1", "v1") and key[1] in ("Job", "Pod"):
        schema, defs = _k8s(key[1])
    else:
        crd, version = CRDS[key]
        schema, defs = crd_schema(OPS / crd, version), {"$defs": {}}
    for part in parts:
        schema = _deref(schema, defs)
        if isinstance(part, int):
            schema = schema.get("items")
        elif "properties" in schema and part in schema["properties"]:
            schema = schema["properties"][part]
        elif isinstance(schema.get("additionalProperties"), dict):
            schema = schema["additionalProperties"]
        else:  # ObjectMeta, which CRDs leave out of their schemas, or a field the kind does not have
            return part in ("labels", "annotations", "name", "namespace") and parts[0] == "metadata"
        if schema is None:
            return False
    return True


def _intent_key(path: str) -> bool:
    return re.fullmatch(r'metadata\.(labels|annotations)\["trainadmit\.io/[^"]+"\]', path) is not None


CASES = [(key, scenario) for key in KINDS for scenario in SCENARIOS]


@pytest.mark.parametrize(("key", "scenario"), CASES, ids=[f"{k[1]}-{k[0]}-{s}" for k, s in CASES])
def test_paths_are_the_objects_fields_and_fixes_name_the_kinds_fields(policies, key, scenario):
    obj = SCENARIOS[scenario](_object(key))
    d = decide(policies, Request(copy.deepcopy(obj), namespace="research"))
    for v in d.violations:
        if not v.hint or v.rule.startswith("custom."):
            continue
        named = FIELD.findall(v.hint)
        assert exists(obj, parse(v.path)) or _intent_key(v.path) or v.path in named, \
            f"[{v.rule}] path {v.path} is not in the {key[1]}"
        for field in named:
            assert in_schema(key, parse(field)), f"[{v.rule}] fix names {field}, which a {key[1]} does not have"
    FIRED.update(v.rule for v in d.violations if v.hint)


FIRED: set[str] = set()

# Every rule with a fix that can fire without a cluster view, for these objects.
WITH_FIXES = {
    "quota.gpus-per-job", "quota.workers-per-job", "quota.namespace-hard", "quota.pool-not-allowed",
    "quota.priority-not-allowed", "topology.whole-node", "topology.single-node-fit", "topology.domain-fit",
    "gpu.requests-limits", "nccl.syntax", "nccl.debugging-variable", "intent.unknown-pool", "intent.invalid",
    "intent.unknown-dataset", "intent.unknown-checkpoint", "intent.unknown-priority", "intent.unknown-topology",
    "intent.no-pool", "rdma.pool-without-rdma", "storage.shm-exceeds-memory", "storage.mount-conflict",
    "placement.contradiction", "enforced.conflict", "gang.unsupported", "hardware.matching-nodes",
}


def test_the_walk_made_every_rule_with_a_fix_fire(policies):
    if not WITH_FIXES - {"hardware.matching-nodes"} <= FIRED:  # run alone, or xdist ran part of the walk elsewhere
        for key, scenario in CASES:
            test_paths_are_the_objects_fields_and_fixes_name_the_kinds_fields(policies, key, scenario)
    assert WITH_FIXES - {"hardware.matching-nodes"} <= FIRED, sorted(WITH_FIXES - FIRED)


COUNT_FIX = re.compile(r'((?:spec|metadata)(?:\.[A-Za-z_][\w-]*|\[\d+\]|\["[^"]+"\])*): (\d+)')


@pytest.mark.parametrize("key", list(KINDS), ids=[f"{k[1]}-{k[0]}" for k in KINDS])
def test_the_values_a_count_fix_gives_pass(policies, key):
    """A quota of two Pods per job: applying the count values the fix gives makes the workers-per-job rule go
    away (a kind of at most two Pods is skipped)."""
    obj = with_gpus(_object(key), 8)
    d = decide(policies, Request(copy.deepcopy(obj), namespace="small"))
    found = [v for v in d.violations if v.rule == "quota.workers-per-job"]
    if not found:
        pytest.skip(f"one {key[1]} Pod at most")
    if found[0].hint.startswith("no count of"):  # its Pods in other roles alone fill the quota
        pytest.skip(found[0].hint)
    changes = COUNT_FIX.findall(found[0].hint)
    assert changes, found[0].hint
    for field, value in changes:
        parts = parse(field)
        cur = obj
        for part in parts[:-1]:
            cur = cur[part]
        cur[parts[-1]] = int(value)
    again = decide(policies, Request(copy.deepcopy(obj), namespace="small"))
    assert "quota.workers-per-job" not in {v.rule for v in again.violations}, found[0].hint
