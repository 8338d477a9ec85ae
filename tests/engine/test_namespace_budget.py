"""Quota.spec.gpuQuota is a namespace total: what the namespace's unfinished workloads hold, plus the new one.

The workloads are public manifests (GKE's A3 Ultra NCCL JobSet: 4 x 8 GPUs, on a GKE A3 Ultra pool added to the
bundled policies, since its GPUDirect-RDMA interfaces are a fabric the bundled pools lack; LeaderWorkerSet's
vLLM example: 2 groups of a leader and a worker, 8 GPUs each), stored in team-nlp, whose bundled Quota
allows 64 GPUs. The expected decisions are worked out by hand from those files: 32 + 32 = 64 held, so
any further GPU workload is refused, naming the two that hold the budget."""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from support.builders import job, rules_of
from support.cli import run_cli
from support.manifests import load_yaml
from support.paths import FIXTURES
from support.policies import a3_ultra_policy_dir

from trainadmit.cluster.snapshot import SnapshotCluster
from trainadmit.engine import Request, decide, load_policy

JOBSET = FIXTURES / "real-world" / "gke-ctk-a3ultra-nccl-jobset-example.yaml"  # 4 x 8 nvidia.com/gpu
LWS = FIXTURES / "operators" / "lws" / "examples" / "vllm-gpu-lws.yaml"  # 2 x (8 + 8) nvidia.com/gpu


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    return a3_ultra_policy_dir(tmp_path_factory.mktemp("a3-ultra"))


@pytest.fixture(scope="module")
def policy(policy_dir):
    return load_policy(policy_dir)


def _manifest(path, kind: str, name: str, namespace: str = "team-nlp") -> dict:
    [obj] = [d for d in load_yaml(path) if d.get("kind") == kind]
    obj = copy.deepcopy(obj)
    obj["metadata"] = {**obj["metadata"], "name": name, "namespace": namespace}
    return obj


def _stored(obj: dict, created: str, uid: str, status: dict | None = None) -> dict:
    """The object as the apiserver holds it: a uid, a creation time, and what its controller wrote."""
    obj = copy.deepcopy(obj)
    obj["metadata"].update(uid=uid, creationTimestamp=created, resourceVersion="1")
    if status is not None:
        obj["status"] = status
    return obj


def _holding(*objs: dict) -> SnapshotCluster:
    return SnapshotCluster([{"apiVersion": "v1", "kind": "List", "items": list(objs)}])


def _message(decision, rule: str) -> str:
    return next(v.message for v in decision.violations if v.rule == rule)


A3 = _stored(_manifest(JOBSET, "JobSet", "a3-nccl"), "2026-01-10T08:00:00Z", "11111111-0000-4000-8000-000000000001")
VLLM = _stored(_manifest(LWS, "LeaderWorkerSet", "vllm"), "2026-01-10T09:00:00Z", "11111111-0000-4000-8000-000000000002")


def test_a_workload_beyond_what_the_namespace_already_holds_is_refused_naming_the_holders(policy):
    new = _manifest(JOBSET, "JobSet", "a3-nccl-2")
    alone = decide(policy, Request(new))
    assert alone.allowed, [v.text() for v in alone.denials]  # on its own it fits the budget (32 of 64)
    d = decide(policy, Request(new), _holding(A3, VLLM))
    assert not d.allowed and "quota.namespace-remaining" in rules_of(d)
    message = _message(d, "quota.namespace-remaining")
    assert "needs 32 nvidia.com/gpu" in message
    assert "64 of its 64 nvidia.com/gpu" in message and "(Quota team-nlp: " in message
    assert "JobSet a3-nccl: 32" in message and "LeaderWorkerSet vllm: 32" in message


def test_what_fits_beside_the_holders_is_admitted(policy):
    half = decide(policy, Request(job(name="small", workers=4, gpus=8)), _holding(A3))  # 32 + 32 = 64
    assert half.allowed, [v.text() for v in half.denials]
    over = decide(policy, Request(job(name="one-more", workers=5, gpus=8)), _holding(A3))  # 32 + 40 = 72
    assert "quota.namespace-remaining" in rules_of(over)
    hint = next(v.hint for v in over.violations if v.rule == "quota.namespace-remaining")
    assert hint == "wait for running jobs to finish, or set spec.parallelism: 4 and spec.completions: 4"  # 32 free


def test_finished_workloads_and_other_namespaces_hold_nothing(policy):
    done = _stored(A3, "2026-01-10T08:00:00Z", A3["metadata"]["uid"],
                   {"conditions": [{"type": "Completed", "status": "True", "reason": "AllJobsCompleted"}]})
    elsewhere = _stored(_manifest(LWS, "LeaderWorkerSet", "vllm", namespace="team-vision"), "2026-01-10T09:00:00Z",
                        "11111111-0000-4000-8000-000000000003")
    d = decide(policy, Request(_manifest(JOBSET, "JobSet", "a3-nccl-2")), _holding(done, elsewhere, VLLM))
    assert d.allowed, [v.text() for v in d.denials]  # only vLLM's 32 are held in team-nlp


def test_a_child_is_held_by_its_parent_only(policy):
    """A JobSet's Jobs carry the same GPUs as their JobSet: counted once, through the parent."""
    child = job(name="a3-nccl-w-0", workers=4, gpus=8)
    child["metadata"]["ownerReferences"] = [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                             "name": "a3-nccl", "uid": A3["metadata"]["uid"], "controller": True}]
    d = decide(policy, Request(job(name="small", workers=4, gpus=8)), _holding(A3, child))
    assert d.allowed, [v.text() for v in d.denials]


def test_re_checking_a_stored_workload_does_not_count_it_twice(policy):
    d = decide(policy, Request(_manifest(JOBSET, "JobSet", "a3-nccl")), _holding(A3, VLLM))
    assert d.allowed, [v.text() for v in d.denials]  # itself and vLLM: 64 of 64


def test_check_takes_the_namespace_workloads_from_cluster_lists(tmp_path, policy_dir):
    stored = tmp_path / "stored.json"
    stored.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [A3, VLLM]}))
    manifest = tmp_path / "new.yaml"
    manifest.write_text(json.dumps(_manifest(JOBSET, "JobSet", "a3-nccl-2")))
    without = run_cli("check", "-p", str(policy_dir), str(manifest))
    assert without.returncode == 0, without.stdout
    result = run_cli("check", "-p", str(policy_dir), "--cluster", str(stored), str(manifest))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "[quota.namespace-remaining]" in result.stdout and "JobSet a3-nccl: 32" in result.stdout


def test_one_check_run_counts_the_workloads_it_admitted_before(tmp_path):
    """Three 40-GPU Jobs into team-nlp (64): with the namespace's workloads known (here: none, an empty
    JobList), the run applies them in order: the first is admitted, the second and third are refused
    naming the first."""
    empty = tmp_path / "jobs.json"
    empty.write_text(json.dumps({"apiVersion": "batch/v1", "kind": "JobList", "metadata": {}, "items": []}))
    manifests = tmp_path / "jobs.yaml"
    manifests.write_text(yaml.safe_dump_all([job(name=f"forty-{i}", workers=5, gpus=8) for i in (1, 2, 3)]))
    result = run_cli("check", "--cluster", str(empty), str(manifests), "-o", "json")
    assert result.returncode == 1
    records = json.loads(result.stdout)
    assert [r["allowed"] for r in records] == [True, False, False]
    for record in records[1:]:
        [v] = [v for v in record["violations"] if v["rule"] == "quota.namespace-remaining"]
        assert "Job forty-1: 40" in v["message"] and "forty-2" not in v["message"].split("(")[-1]
