"""A user who applies every fix of a denial at once gets an object that is admitted, or refused only for reasons no
count fixes: over the examples and the public manifests of tests/fixtures (sources in SOURCES.md), as published and
in a namespace whose quota is tight, with and without a cluster view. No two fixes of one denial set one field to two
values, and the fixed object keeps its kind's own count rules (a Volcano Job's minAvailable within its replicas, an
elastic job's bounds, Kubeflow's minAvailable, a Ray group's bounds, an MPIJob's slots per worker, a GPU request
equal to its limit…), or the kind's own admission would refuse what the fix made.

The fixes are applied as data (``Violation.fix``: field and value), which is what the hint's text says; the values
expected for a few manifests are worked out by hand from the manifests and the bundled policies, below.
"""

from __future__ import annotations

import copy
from functools import cache

import pytest
from support.builders import with_gpus
from support.manifests import load_yaml
from support.paths import EXAMPLES, FIXTURES, ROOT
from support.policies import write_policy

from trainadmit.cluster.snapshot import SnapshotCluster
from trainadmit.engine import Request, decide, load_policy
from trainadmit.engine.paths import get_path
from trainadmit.engine.workloads import workload_of

TIGHT = {"apiVersion": "trainadmit.io/v1alpha1", "kind": "Quota", "metadata": {"name": "tight"},
         "spec": {"namespaces": ["tight"], "maxGPUsPerJob": 16, "maxWorkersPerJob": 2, "gpuQuota": 16}}
HARDWARE = {"nvidia.com/gpu.count": "8", "nvidia.com/cuda.driver.major": "550",
            "feature.node.kubernetes.io/rdma.capable": "true"}


def _node(name: str, rack: str, ready: bool = True, labels: dict | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"trainadmit.io/pool": "h100-ib", "topology.kubernetes.io/rack": rack,
                                                  "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                                                  **HARDWARE, **(labels or {})}},
            "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"nvidia.com/gpu": "8"},
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def _cluster() -> SnapshotCluster:
    """Seven nodes of pool h100-ib in two racks: rack-1 has 4, one NotReady; rack-2 has 3, one whose driver is too
    old; and a ResourceQuota in every namespace used here that leaves 24 GPUs free."""
    nodes = [_node("a1", "rack-1"), _node("a2", "rack-1"), _node("a3", "rack-1"), _node("a4", "rack-1", ready=False),
             _node("b1", "rack-2"), _node("b2", "rack-2"),
             _node("b3", "rack-2", labels={"nvidia.com/cuda.driver.major": "535"})]
    quotas = [{"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpus", "namespace": ns},
               "spec": {"hard": {"requests.nvidia.com/gpu": "32"}},
               "status": {"hard": {"requests.nvidia.com/gpu": "32"}, "used": {"requests.nvidia.com/gpu": "8"}}}
              for ns in ("default", "team-nlp", "team-vision", "tight")]
    return SnapshotCluster([{"kind": "NodeList", "apiVersion": "v1", "items": nodes},
                            {"kind": "ResourceQuotaList", "apiVersion": "v1", "items": quotas}])


def _documents() -> list[tuple[str, dict]]:
    files = [*sorted(EXAMPLES.glob("*.yaml")), *sorted((FIXTURES / "real-world").glob("*.y*ml")),
             *sorted((FIXTURES / "operators").glob("*/examples/*.y*ml")),
             *sorted((FIXTURES / "dra").glob("**/*.y*ml"))]
    out = []
    for path in files:
        for i, doc in enumerate(load_yaml(path)):
            if isinstance(doc, dict) and workload_of(doc) is not None:
                out.append((f"{path.relative_to(ROOT)}#{i + 1}", doc))
    return out


DOCUMENTS = _documents()


@pytest.fixture(scope="module")
def policies(tmp_path_factory):
    return load_policy(write_policy(tmp_path_factory.mktemp("converge"), extra=[TIGHT]))


def _variants(doc: dict) -> list[tuple[str, dict, str | None]]:
    """(how, object, namespace) to decide: as published (in its namespace), and in the tight namespace, with one
    GPU per worker container when the manifest asks for none (the elastic and Volcano samples)."""
    gpu = workload_of(doc)
    asks = any(name.endswith("/gpu") for t in gpu.templates for name in t.resource_names) if gpu else False
    tight = doc if asks else with_gpus(doc, 1)
    return [("as published", doc, None), ("tight", tight, "tight")]


@cache
def _cluster_view() -> SnapshotCluster:
    return _cluster()


def _decide(policy, obj: dict, namespace: str | None, cluster):
    ns = namespace or (obj.get("metadata") or {}).get("namespace") or "default"
    obj = copy.deepcopy(obj)
    if namespace:
        obj.setdefault("metadata", {})["namespace"] = namespace
    obj.setdefault("metadata", {}).setdefault("name", "fixed")
    obj["metadata"].pop("generateName", None)
    return obj, decide(policy, Request(copy.deepcopy(obj), namespace=ns), cluster)


def _apply(obj: dict, fixes: dict) -> dict:
    out = copy.deepcopy(obj)
    for path, value in fixes.items():
        cur = out
        for i, part in enumerate(path[:-1]):
            if isinstance(part, int):
                cur = cur[part]
            else:
                cur = cur.setdefault(part, [] if isinstance(path[i + 1], int) else {})
        cur[path[-1]] = value
    return out


def _count(value, default):
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def broken_invariants(before: dict, after: dict) -> list[str]:
    """The kinds' own count rules the fixed object breaks (written from the kinds' docs and admission code)."""
    out = []
    spec, old = after.get("spec") or {}, before.get("spec") or {}
    kind, api = after.get("kind"), after.get("apiVersion", "")
    if api.startswith("batch.volcano.sh"):
        tasks = [t for t in spec.get("tasks") or [] if isinstance(t, dict)]
        total = sum(_count(t.get("replicas"), 1) for t in tasks)
        if _count(spec.get("minAvailable"), 0) > total:
            out.append(f"Volcano: minAvailable {spec.get('minAvailable')} > {total} replicas")
        out += [f"Volcano: task {t.get('name')} minAvailable > replicas" for t in tasks
                if _count(t.get("minAvailable"), 0) > _count(t.get("replicas"), 1)]
    if api.startswith("kubeflow.org"):
        field = next((k for k in spec if k.endswith("ReplicaSpecs")), None)
        replicas = spec.get(field) or {} if field else {}
        total = sum(_count(r.get("replicas"), 1) for r in replicas.values() if isinstance(r, dict))
        minimum = get_path(after, ("spec", "runPolicy", "schedulingPolicy", "minAvailable"))
        if isinstance(minimum, int) and minimum > total:
            out.append(f"Kubeflow: minAvailable {minimum} > {total} replicas")
        elastic = spec.get("elasticPolicy") or {}
        workers = _count(get_path(replicas, ("Worker", "replicas")), 1)
        if elastic and not _count(elastic.get("minReplicas"), 0) <= workers <= _count(elastic.get("maxReplicas"),
                                                                                       workers):
            out.append(f"elastic: Worker.replicas {workers} outside minReplicas..maxReplicas")
        if kind == "MPIJob":
            slots = spec.get("slotsPerWorker")
            gpus = get_path(replicas, ("Worker", "template", "spec", "containers", 0, "resources", "limits",
                                       "nvidia.com/gpu"))
            was = get_path(old, ("mpiReplicaSpecs", "Worker", "template", "spec", "containers", 0, "resources",
                                 "limits", "nvidia.com/gpu"))
            if old.get("slotsPerWorker") is not None and str(old.get("slotsPerWorker")) == str(was) \
                    and str(slots) != str(gpus):
                out.append(f"MPIJob: slotsPerWorker {slots} no longer one rank per GPU ({gpus})")
    if api.startswith("ray.io"):
        cluster = spec.get("rayClusterSpec", spec)
        for group in cluster.get("workerGroupSpecs") or []:
            replicas = _count(group.get("replicas"), 0)
            if not _count(group.get("minReplicas"), 0) <= replicas <= _count(group.get("maxReplicas"), replicas):
                out.append(f"Ray: group {group.get('groupName')} replicas outside its bounds")
    if (api, kind) == ("batch/v1", "Job") and old.get("completions") == old.get("parallelism") \
            and spec.get("completions") != spec.get("parallelism"):
        out.append("Job: completions no longer equal parallelism")
    if kind == "JobSet":
        for i, rjob in enumerate(spec.get("replicatedJobs") or []):
            was = get_path(old, ("replicatedJobs", i, "template", "spec")) or {}
            now = get_path(rjob, ("template", "spec")) or {}
            if was.get("completions") is not None and was.get("completions") == was.get("parallelism") \
                    and now.get("completions") != now.get("parallelism"):
                out.append(f"JobSet: replicatedJobs[{i}] completions no longer equal parallelism")
    if kind == "LeaderWorkerSet":
        size = _count(get_path(spec, ("leaderWorkerTemplate", "size")), 1)
        sub = get_path(spec, ("leaderWorkerTemplate", "subGroupPolicy", "subGroupSize"))
        if size < 1 or (isinstance(sub, int) and (size < sub or (size % sub and (size - 1) % sub))):
            out.append(f"LeaderWorkerSet: size {size}")
    if kind == "TrainJob" and _count(get_path(spec, ("trainer", "numNodes")), 1) < 1:
        out.append("TrainJob: numNodes < 1")
    workload = workload_of(after)
    for template in workload.templates if workload is not None else ():
        for ref in template.all_containers:
            resources = ref.body.get("resources") or {}
            for name, request in (resources.get("requests") or {}).items():
                limit = (resources.get("limits") or {}).get(name)
                if name.endswith("/gpu") and limit is not None and str(limit) != str(request):
                    out.append(f"{template.label} {ref.name}: {name} request {request} ≠ limit {limit}")
    return out


SCENARIOS = [(name, document, how, obj, ns) for name, document in DOCUMENTS for how, obj, ns in _variants(document)]
RESULTS: dict[tuple[str, str, bool], tuple[bool, bool]] = {}  # (document, how, cluster) -> (denied, passes after)


@pytest.mark.parametrize("view", [False, True], ids=["no-view", "cluster-view"])
def test_every_fix_of_every_denial_applied_at_once_converges(policies, view):
    cluster = _cluster_view() if view else None
    problems = []
    for name, _, how, doc, ns in SCENARIOS:
        obj, d = _decide(policies, doc, ns, cluster)
        if not d.matched or d.allowed:
            continue
        fixes: dict = {}
        for v in d.denials:
            for f in v.fix:
                if fixes.setdefault(f.path, f.value) != f.value:
                    problems.append(f"{name} ({how}): two fixes set {f.field}: {fixes[f.path]} and {f.value}")
        fixed = _apply(obj, fixes)
        again = decide(policies, Request(copy.deepcopy(fixed), namespace=ns or obj["metadata"].get("namespace")
                                         or "default"), cluster)
        left = [f"[{v.rule}] {v.hint}" for v in again.denials if v.fix]
        if left:
            problems.append(f"{name} ({how}): still refused with a fix after applying all fixes: {left}")
        problems += [f"{name} ({how}): {b}" for b in broken_invariants(obj, fixed)]
        RESULTS[(name, how, view)] = (True, again.allowed)
    assert not problems, "\n".join(problems)


def _denials(policies, name: str, how: str = "as published", cluster=None):
    _, doc = next((n, d) for n, d in DOCUMENTS if n == name)
    obj = next(o for h, o, _ in _variants(doc) if h == how)
    return _decide(policies, obj, "tight" if how == "tight" else None, cluster)[1].denials


def _one_fix(denials) -> dict:
    """The fields every denial with a fix sets, as text; each denial with a fix must give all of them."""
    found = [{f.field: f.value for f in v.fix} for v in denials if v.fix]
    assert found, [v.hint for v in denials]
    return found[0]


def test_a_job_bigger_than_a_rack_and_its_quota_is_told_one_size(policies):
    """examples/denied-bigger-than-a-rack.yaml: 24 workers of 8 GPUs in team-nlp (Quota team-nlp: 16 workers, 128 GPUs
    per job, gpuQuota 64; racks of 16 nodes): 64 GPUs are 8 whole nodes, so every rule says parallelism 8."""
    denials = _denials(policies, "examples/denied-bigger-than-a-rack.yaml#1")
    assert {v.rule for v in denials} == {"topology.domain-fit", "quota.gpus-per-job", "quota.workers-per-job",
                                         "quota.namespace-hard"}
    for v in denials:
        assert v.hint == "set spec.parallelism: 8 and spec.completions: 8", (v.rule, v.hint)
        assert {f.field: f.value for f in v.fix} == {"spec.parallelism": 8, "spec.completions": 8}


def test_whole_nodes_keep_the_gpus_asked_for(policies):
    """examples/denied-partial-nodes.yaml: 4 workers of 6 GPUs on a pool of 8 GPUs per node are 24 GPUs: 3 workers of
    8."""
    (v,) = _denials(policies, "examples/denied-partial-nodes.yaml#1")
    assert _one_fix([v]) == {'spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"]': 8,
                             "spec.parallelism": 3, "spec.completions": 3}


def test_a_volcano_job_keeps_its_minimum_within_its_replicas(policies):
    """volcano-mindspore-gpu.yaml: a master and 2 workers of 1 GPU, minAvailable 3. Whole nodes: 1 worker of 8 GPUs,
    so minAvailable, which held every replica, becomes the 2 replicas left (Volcano refuses more than the replicas)."""
    denials = _denials(policies, "tests/fixtures/real-world/volcano-mindspore-gpu.yaml#1")
    assert _one_fix(denials) == {'spec.tasks[1].template.spec.containers[0].resources.limits["nvidia.com/gpu"]': 8,
                                 "spec.tasks[1].replicas": 1, "spec.minAvailable": 2}


def test_an_mpijob_keeps_one_rank_per_gpu(policies):
    """dranet-mpi-operator-nccl-test-job.yaml: 2 workers of 1 GPU with slotsPerWorker 1 (one rank per GPU): 1 worker
    of 8 GPUs gets 8 slots."""
    denials = _denials(policies, "tests/fixtures/real-world/dranet-mpi-operator-nccl-test-job.yaml#1")
    assert _one_fix(denials) == {
        'spec.mpiReplicaSpecs.Worker.template.spec.containers[0].resources.limits["nvidia.com/gpu"]': 8,
        "spec.mpiReplicaSpecs.Worker.replicas": 1, "spec.slotsPerWorker": 8}


def test_a_gpu_request_moves_with_its_limit(policies):
    """schedplugins-sakkara-job-a.yaml asks for 1 GPU in limits and requests in each of 8 Pods: whole nodes make one
    Pod of 8 GPUs, request and limit together (a limit of 8 with a request of 1 is gpu.requests-limits)."""
    denials = _denials(policies, "tests/fixtures/real-world/schedplugins-sakkara-job-a.yaml#1")
    at = 'spec.template.spec.containers[0].resources'
    assert _one_fix(denials) == {f'{at}.limits["nvidia.com/gpu"]': 8, f'{at}.requests["nvidia.com/gpu"]': 8,
                                 "spec.parallelism": 1, "spec.completions": 1}


def test_an_elastic_job_keeps_its_bounds(policies):
    """pytorch_elastic_imagenet.yaml with a GPU per worker in the tight namespace (2 workers, 16 GPUs per job):
    2 workers of 1 GPU become 1 of 8 (whole nodes), within elasticPolicy minReplicas 1 .. maxReplicas 3."""
    denials = _denials(policies, "tests/fixtures/operators/kubeflow-training-operator-v1/examples/"
                       "pytorch_elastic_imagenet.yaml#1", "tight")
    assert _one_fix(denials) == {
        'spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources.limits["nvidia.com/gpu"]': 8,
        "spec.pytorchReplicaSpecs.Worker.replicas": 1}
