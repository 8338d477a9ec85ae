"""The reports trainadmit writes: valid for the installed report CRDs, one result per workload and rule,
bounded, and unchanged when nothing changed (so the writer need not write).

The CRDs and the real reports are tests/fixtures/reports (OpenReports' and Kyverno's CRDs; reports as
Kyverno and Kubewarden write them). The workloads are public manifests stored in team-nlp; what each
result says is worked out by hand from them and the bundled policy with a GKE A3 Ultra pool, on which GKE's
A3 Ultra JobSet runs (see each test)."""

from __future__ import annotations

import copy
import json

import pytest
from support.manifests import load_yaml
from support.paths import EXAMPLES, FIXTURES
from support.policies import BACKENDS, a3_ultra_policy_dir
from support.reports import REPORTS, problems

from trainadmit.cluster.judge import Status, judge
from trainadmit.cluster.reports import (
    MAX_BYTES,
    MAX_RESULTS,
    OPENREPORTS,
    WGPOLICY,
    build_report,
    results_of,
    same_content,
)
from trainadmit.engine import load_policy


def _real(name: str) -> list[dict]:
    out = []
    for doc in load_yaml(REPORTS / "examples" / name):
        out.extend(doc["items"] if doc.get("kind") == "List" else [doc])
    return out


def test_the_check_accepts_real_reports_and_refuses_broken_ones():
    [kyverno] = _real("kyverno-policyreport-pod.from-docs.yaml")
    [openreport] = _real("kyverno-openreports-report-list.from-docs.yaml")
    [kubewarden] = _real("kubewarden-policyreport-deployment.from-readme.yaml")
    assert problems(kyverno) == [] and problems(openreport) == []
    assert problems(kubewarden) == ["wgpolicyk8s.io/v1beta1 PolicyReport is served by neither CRD"]  # see README
    as_string = copy.deepcopy(kyverno)
    as_string["results"][0]["timestamp"] = "2023-12-06T13:19:22Z"  # RFC 3339: not what the CRDs declare
    assert any("timestamp" in p for p in problems(as_string))
    wrong = copy.deepcopy(openreport)
    wrong["results"][0]["result"] = "failed"
    wrong["results"][0]["owner"] = "someone"  # a field the CRD does not declare: pruned
    found = problems(wrong)
    assert any("'failed' is not one of" in p for p in found) and "pruned: results[0].owner" in found


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    """The bundled policy with the A3 Ultra pool, on the cluster these reports were worked out for: 1.37 with the
    Workload API gates declared (the bundled default declares none, and then every rack-colocated workload also
    warns topology.colocation-risk)."""
    return load_policy(a3_ultra_policy_dir(tmp_path_factory.mktemp("a3-ultra"), BACKENDS["native-job"]))


def _stored(path, kind: str, name: str, namespace: str = "team-nlp", uid: str = "") -> dict:
    [obj] = [d for d in load_yaml(path) if d.get("kind") == kind]
    obj = copy.deepcopy(obj)
    obj["metadata"] = {**obj["metadata"], "name": name, "namespace": namespace,
                       "uid": uid or f"00000000-0000-4000-8000-{abs(hash(name)) % 10**12:012d}",
                       "creationTimestamp": "2026-01-10T08:00:00Z"}
    return obj


def _workloads() -> list[dict]:
    return [
        # 4 x 8 GPUs, Kueue's queue label, GKE's GPUDirect-RDMA interfaces: on the A3 Ultra pool, admitted with a
        # warning (a gang of another backend); its own network keeps the RDMA concern out
        _stored(FIXTURES / "real-world" / "gke-ctk-a3ultra-nccl-jobset-example.yaml", "JobSet", "a3-nccl"),
        # 2 x (8 + 8) GPUs: admitted with a warning (LeaderWorkerSet has no native gang)
        _stored(FIXTURES / "operators" / "lws" / "examples" / "vllm-gpu-lws.yaml", "LeaderWorkerSet", "vllm"),
        # Kubeflow's NCCL example: 1 GPU per pod in its Master and Worker templates, on a pool of 8-GPU nodes
        _stored(FIXTURES / "real-world" / "kftrainingop-pytorch_job_mnist_nccl.yaml", "PyTorchJob", "mnist"),
        # the project's own example: 6 GPUs per worker on 8-GPU nodes, and no owner label
        _stored(EXAMPLES / "denied-partial-nodes.yaml", "Job", "partial-nodes"),
        # a Job of the JobSet above: a child, judged through its parent, so no result of its own
        {**_stored(FIXTURES / "real-world" / "kueue-sample-job.yaml", "Job", "a3-nccl-w-0"),
         "metadata": {"name": "a3-nccl-w-0", "namespace": "team-nlp", "ownerReferences": [
             {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "a3-nccl", "uid": "x",
              "controller": True}]}},
    ]


def _results(policy) -> list[dict]:
    return [r for obj in _workloads() for r in results_of(judge(policy, obj))]


def test_one_result_per_workload_and_rule(policy):
    got = sorted((r["resources"][0]["kind"], r["resources"][0]["name"], r.get("rule", ""), r["result"])
                 for r in _results(policy))
    assert got == [
        ("Job", "partial-nodes", "custom.owner-label", "warn"),
        ("Job", "partial-nodes", "topology.whole-node", "fail"),
        ("JobSet", "a3-nccl", "final.not-admitted", "warn"),  # stored without admission: what it lacks is no pass
        ("JobSet", "a3-nccl", "gang.foreign-backend", "warn"),
        ("LeaderWorkerSet", "vllm", "final.not-admitted", "warn"),
        ("PyTorchJob", "mnist", "topology.whole-node", "fail"),  # Master and Worker: one result, both fields
    ]  # (LWS's gang.unsupported is a note, the platform's to change: named in its results' properties.notes, not a warn)
    [mnist] = [r for r in _results(policy) if r["resources"][0]["name"] == "mnist"]
    assert mnist["properties"]["path"].count("resources.limits") == 2
    [a3] = [r for r in _results(policy) if r["resources"][0]["name"] == "a3-nccl" and r["rule"] == "final.not-admitted"]
    assert a3["properties"]["would-set"] == "placement, priority"  # the A3 Ultra pool sets only a nodeSelector
    assert a3["message"] == ("it was not admitted through trainadmit's webhooks (created while they were away, or "
                             "skipped): it lacks 2 fields the policy sets (placement, priority) and runs without them")
    assert a3["resources"][0] == {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "namespace": "team-nlp",
                                  "name": "a3-nccl", "uid": a3["resources"][0]["uid"]}


def test_a_compliant_workload_gets_one_pass(policy, tmp_path):
    from trainadmit.engine import Request, decide

    [stored] = [d for d in load_yaml(EXAMPLES / "llama-pretrain.yaml") if d.get("kind") == "Job"]
    mutated = decide(policy, Request(stored)).mutated  # as admission stored it
    verdict = judge(policy, mutated)
    assert verdict.status is Status.compliant and verdict.changes == []
    [result] = results_of(verdict)
    assert result["result"] == "pass" and "would-set" not in result["properties"]


def test_a_workload_that_bypassed_admission_is_no_pass_and_by_a_setting_a_failure(policy, tmp_path):
    """llama-pretrain as written (created while the webhooks were away: no gang, no pool toleration, it may never
    schedule) beside the same Job as admission stored it: a warning naming what it lacks, not a pass; with
    ``final.not-admitted: deny`` a failure (audit: denied)."""
    from trainadmit.engine import Request, decide

    [written] = [d for d in load_yaml(EXAMPLES / "llama-pretrain.yaml") if d.get("kind") == "Job"]
    admitted = decide(policy, Request(written)).mutated
    [passed] = results_of(judge(policy, admitted))
    assert passed["result"] == "pass"
    [bypassed] = results_of(judge(policy, written))
    assert (bypassed["rule"], bypassed["result"], bypassed["severity"]) == ("final.not-admitted", "warn", "medium")
    assert bypassed["message"].startswith("it was not admitted through trainadmit's webhooks (created while they "
                                          "were away, or skipped): it lacks ")
    assert bypassed["properties"]["would-set"] == "gang, hardware, nccl, placement, preflight, priority, rdma, storage"
    strict = load_policy(a3_ultra_policy_dir(tmp_path / "strict", {**BACKENDS["native-job"],
                                                                    "rules": {"final.not-admitted": "deny"}}))
    verdict = judge(strict, written)
    [failed] = results_of(verdict)
    assert verdict.status is Status.denied and (failed["rule"], failed["result"]) == ("final.not-admitted", "fail")


@pytest.mark.parametrize("api", [OPENREPORTS, WGPOLICY], ids=lambda a: a.kind)
def test_reports_validate_against_their_crd(policy, api):
    report = build_report(api, "team-nlp", _results(policy), policy.generation, 1_800_000_000)
    assert problems(report) == []
    assert report["summary"] == {"pass": 0, "fail": 2, "warn": 4, "error": 0, "skip": 0}
    assert [r["result"] for r in report["results"]] == ["fail", "fail", "warn", "warn", "warn", "warn"]
    assert ("source" in report) is (api is OPENREPORTS)
    assert report["scope"] == {"apiVersion": "v1", "kind": "Namespace", "name": "team-nlp"}


def _many_results(policy, n: int) -> list[dict]:
    """The results of ``n`` stored Jobs: every third the partial-nodes example (a fail, and a warning: no
    owner label), the rest llama-pretrain as admission stored it (a pass). Two judged, the rest renamed."""
    from trainadmit.engine import Request, decide

    [llama] = [d for d in load_yaml(EXAMPLES / "llama-pretrain.yaml") if d.get("kind") == "Job"]
    [partial] = [d for d in load_yaml(EXAMPLES / "denied-partial-nodes.yaml") if d.get("kind") == "Job"]
    denied, admitted = results_of(judge(policy, partial)), results_of(judge(policy, decide(policy, Request(llama)).mutated))
    out = []
    for i in range(n):
        for result in denied if i % 3 == 0 else admitted:
            out.append({**result, "resources": [{**result["resources"][0], "name": f"job-{i:05d}"}]})
    return out


def test_a_report_is_bounded_failures_first_and_counts_every_result(policy):
    results = _many_results(policy, 2500)
    report = build_report(OPENREPORTS, "team-nlp", results, policy.generation, 1_800_000_000)
    denied = len(range(0, 2500, 3))  # 834 workloads, each one fail and one warn (no owner label)
    assert report["summary"] == {"pass": 2500 - denied, "fail": denied, "warn": denied, "error": 0, "skip": 0}
    kept = report["results"]
    assert len(kept) == MAX_RESULTS and len(json.dumps(kept, separators=(",", ":"))) <= MAX_BYTES
    assert [r["result"] for r in kept] == ["fail"] * denied + ["warn"] * (MAX_RESULTS - denied)
    assert report["metadata"]["annotations"]["trainadmit.io/results-omitted"] == str(len(results) - MAX_RESULTS)
    assert report["configuration"] == {"limits": {"maxResults": MAX_RESULTS}}
    assert problems(report) == []


def test_a_report_of_large_results_stays_under_the_byte_bound(policy):
    long = [{**r, "message": "x" * 5000} for r in _many_results(policy, 300)]
    report = build_report(WGPOLICY, "team-nlp", long, policy.generation, 1_800_000_000)
    assert len(json.dumps(report["results"], separators=(",", ":"))) <= MAX_BYTES < len(json.dumps(long))
    assert sum(report["summary"].values()) == len(long) and problems(report) == []


def test_an_unchanged_namespace_gives_an_unchanged_report(policy):
    first = build_report(WGPOLICY, "team-nlp", _results(policy), policy.generation, 1_800_000_000)
    again = build_report(WGPOLICY, "team-nlp", _results(policy), policy.generation, 1_800_000_999, previous=first)
    assert same_content(first, again) and again["results"] == first["results"]  # the first timestamps are kept
    changed = [r for r in _results(policy) if r["resources"][0]["name"] != "vllm"]
    later = build_report(WGPOLICY, "team-nlp", changed, policy.generation, 1_800_000_999, previous=first)
    assert not same_content(first, later)
