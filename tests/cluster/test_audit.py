"""`trainadmit audit` on saved lists: every stored workload re-decided by the engine, per workload and per
namespace, with `check`'s exit codes.

The stored workloads are public manifests and the project's examples, stored in team-nlp as the
apiserver keeps them (a uid, a creation time); the expected verdicts are worked out by hand from them
and the bundled policy. The live-cluster form (--kubeconfig) runs in the integration tier."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from support.builders import job
from support.cli import run_cli
from support.manifests import load_yaml
from support.paths import EXAMPLES, FIXTURES
from support.reports import problems

from trainadmit.cli import streamlists
from trainadmit.engine import Request, decide, load_policy

POLICIES = str(EXAMPLES.parent / "policies")


def _only(path, kind: str) -> dict:
    [obj] = [d for d in load_yaml(path) if d.get("kind") == kind]
    return copy.deepcopy(obj)


def _stored(obj: dict, name: str, created: str, namespace: str = "team-nlp") -> dict:
    obj = copy.deepcopy(obj)
    obj["metadata"] = {**obj["metadata"], "name": name, "namespace": namespace, "creationTimestamp": created,
                       "uid": f"00000000-0000-4000-8000-{sum(map(ord, name)):012d}", "resourceVersion": "7"}
    return obj


@pytest.fixture(scope="module")
def stored_lists(tmp_path_factory) -> str:
    """`kubectl get jobs,jobsets,pytorchjobs -A -o json` of a team-nlp that holds:
    - llama-pretrain as admission stored it (mutated by this policy): compliant;
    - llama-pretrain as written, created while the webhook was away: admitted, but it lacks the gang, the
      pool's placement, RDMA, NCCL, storage, the preflight and the priority;
    - a Job of a JobSet (its controller): judged through its parent, not on its own;
    and namespace default (Quota teams: no GPU budget; the owner-label rule is for team-* namespaces) the
    partial-nodes example (4 workers of 6 GPUs on 8-GPU nodes): denied, topology.whole-node."""
    policy = load_policy(POLICIES)
    written = _only(EXAMPLES / "llama-pretrain.yaml", "Job")
    # decided under the name it is stored with: the native gang's PodGroup is named after the workload
    admitted = decide(policy, Request(_stored(written, "llama-admitted", "2026-01-10T08:00:00Z"))).mutated
    child = _stored(_only(FIXTURES / "real-world" / "kueue-sample-job.yaml", "Job"), "a3-w-0", "2026-01-10T07:00:00Z")
    child["metadata"]["ownerReferences"] = [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                             "name": "a3", "uid": "u", "controller": True}]
    items = [_stored(admitted, "llama-admitted", "2026-01-10T08:00:00Z"),
             _stored(written, "llama-unconfigured", "2026-01-10T08:01:00Z"),
             _stored(_only(EXAMPLES / "denied-partial-nodes.yaml", "Job"), "partial-nodes", "2026-01-10T08:02:00Z",
                     namespace="default"),
             child]
    path = tmp_path_factory.mktemp("audit") / "workloads.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items}, indent=1))
    return str(path)


def test_text_output_per_workload_and_namespace(stored_lists):
    result = run_cli("audit", stored_lists, "-p", POLICIES)
    assert result.returncode == 1, result.stderr  # one is denied
    out = result.stdout
    assert "Job team-nlp/llama-admitted: COMPLIANT" in out
    assert "Job team-nlp/llama-unconfigured: WOULD CHANGE (27 fields: gang, hardware, nccl, placement, preflight, " \
           "priority, rdma, storage, topology)" in out
    # the --explain style: each field, the value it would get, the policy setting behind it
    assert '+ spec.template.spec.priorityClassName = "training-high"  <- PriorityTier high: spec.className' in out
    assert "+ spec.template.spec.containers[0].env[0] = " in out and "<- Pool h100-ib: spec.nccl.env.NCCL_IB_HCA" in out
    assert "Job default/partial-nodes: DENIED (1 problem)" in out
    assert "✗ [topology.whole-node] spec.template.spec.containers[0].resources.limits[\"nvidia.com/gpu\"]" in out
    # the bundled policy declares no TopologyAwareWorkloadScheduling (discovery cannot see a scheduler's gates):
    # the placement gate holds each rack-colocated Job in one rack (no note); the one created without admission is
    # warned that it runs without what it lacks (the gate among it); nothing else warns
    assert {line.split("]")[0] for line in out.splitlines() if "! warning [" in line} == {
        "  ! warning [final.not-admitted"}
    assert ("! warning [final.not-admitted] metadata: it was not admitted through trainadmit's webhooks (created "
            "while they were away, or skipped): it lacks 27 fields the policy sets (gang, placement, hardware, "
            "topology, rdma, nccl, storage, preflight, priority) and runs without them") in out
    assert not [line for line in out.splitlines() if line.startswith("  note [")]
    assert "a3-w-0" not in out  # a child
    assert ("namespace team-nlp: 2 workloads: 0 denied, 1 would change, 1 compliant; nvidia.com/gpu: 64 held by 2 "
            "of its budget 64 (Quota team-nlp)") in out  # the child holds nothing of its own
    assert ("namespace default: 1 workload: 1 denied, 0 would change, 0 compliant; nvidia.com/gpu: 24 held by 1; "
            "rules: topology.whole-node (1)") in out
    assert out.rstrip().endswith("3 workloads: 1 denied, 1 would change, 1 compliant; 1 object not judged "
                                 "(children of a judged workload, not GPU workloads, exempt) (policy generation "
                                 f"{load_policy(POLICIES).generation})")


def test_explain_adds_the_policy_line(stored_lists):
    out = run_cli("audit", stored_lists, "-p", POLICIES, "--explain").stdout
    line = next(x for x in out.splitlines() if x.lstrip().startswith("+ spec.template.spec.priorityClassName"))
    assert line.endswith("(priorities.yaml:8)")  # spec.className of PriorityTier high


def test_audit_says_what_check_says_of_each_object(stored_lists, tmp_path):
    """One decision: the violations audit lists for each stored object are those `check` gives for it,
    given the same lists (here every namespace is within its budget: see the next test for one that is not)."""
    audited = json.loads(run_cli("audit", stored_lists, "-p", POLICIES, "-o", "json").stdout)
    by_name = {w["object"]: w for w in audited["workloads"]}
    for item in json.loads(Path(stored_lists).read_text())["items"]:
        one = tmp_path / "one.json"
        one.write_text(json.dumps(item))
        [checked] = json.loads(run_cli("check", str(one), "--cluster", stored_lists, "-p", POLICIES,
                                       "-o", "json").stdout)
        name = f"Job {item['metadata']['namespace']}/{item['metadata']['name']}"
        assert checked["matched"] is (name in by_name)
        if not checked["matched"]:
            assert name not in by_name
            continue
        assert by_name[name]["violations"] == checked["violations"]
        # and what a stored object lacks, which only audit can say (check is asked of a submission)
        lacks = [w for w in by_name[name]["warnings"] if w["rule"] == "final.not-admitted"]
        assert len(lacks) == (by_name[name]["status"] == "changes")
        assert [w for w in by_name[name]["warnings"] if w not in lacks] == checked["warnings"]
        assert (by_name[name]["status"] == "denied") is (not checked["allowed"])


def test_json_output_is_one_document_with_namespaces_and_summary(stored_lists):
    result = run_cli("audit", stored_lists, "-p", POLICIES, "-o", "json")
    doc = json.loads(result.stdout)
    assert [w["status"] for w in doc["workloads"]] == ["compliant", "changes", "denied"]
    unconfigured = doc["workloads"][1]
    assert {c["concern"] for c in unconfigured["changes"]} == {"gang", "hardware", "nccl", "placement", "preflight",
                                                                "priority", "rdma", "storage", "topology"}
    priority = next(c for c in unconfigured["changes"] if c["concern"] == "priority")
    assert priority == {"path": "spec.template.spec.priorityClassName", "value": "training-high", "stored": None,
                        "concern": "priority", "source": "PriorityTier high: spec.className"}
    assert doc["namespaces"]["team-nlp"]["statuses"] == {"compliant": 1, "changes": 1}
    assert doc["namespaces"]["team-nlp"]["gpus"] == [{"resource": "nvidia.com/gpu", "held": 64, "workloads": 2,
                                                      "budget": 64, "quota": "team-nlp"}]
    assert doc["namespaces"]["default"]["statuses"] == {"denied": 1}
    assert doc["summary"]["skipped"] == 1


@pytest.mark.parametrize("api,flag", [("openreports.io/v1alpha1", "openreports"), ("wgpolicyk8s.io/v1alpha2",
                                                                                      "wgpolicyk8s")])
def test_report_output_is_what_the_reconciler_writes(stored_lists, api, flag):
    result = run_cli("audit", stored_lists, "-p", POLICIES, "-o", "report", "--report-api", flag)
    reports = {d["metadata"]["namespace"]: d for d in yaml.safe_load_all(result.stdout) if d}
    assert set(reports) == {"default", "team-nlp"}
    for report in reports.values():
        assert report["apiVersion"] == api and problems(report) == []
    # no TopologyAwareWorkloadScheduling declared: the placement gate holds the rack, nothing is risked (no
    # topology.colocation-risk); the one created without admission warns what it lacks
    assert reports["default"]["summary"] == {"pass": 0, "fail": 1, "warn": 0, "error": 0, "skip": 0}
    assert reports["team-nlp"]["summary"] == {"pass": 1, "fail": 0, "warn": 1, "error": 0, "skip": 0}
    assert {(r["resources"][0]["name"], r.get("rule"), r["result"]) for r in reports["team-nlp"]["results"]
            if r["result"] != "pass"} == {("llama-unconfigured", "final.not-admitted", "warn")}


def test_a_budget_is_judged_in_creation_order_and_check_counts_every_other(tmp_path):
    """Three 40-GPU Jobs in team-nlp (budget 64), created one after the other while the webhook was away.
    audit asks which of them are beyond the budget: the first fits, the second and third did not, each
    naming the ones before it. `check` of one of them against the same lists asks whether it could be
    submitted now, beside the other two: none could."""
    items = [_stored(job(name=f"forty-{i}", workers=5, gpus=8), f"forty-{i}", f"2026-01-10T08:0{i}:00Z")
             for i in (3, 1, 2)]  # listed by name order, created 1, 2, 3
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps({"apiVersion": "batch/v1", "kind": "JobList", "items": items}))
    doc = json.loads(run_cli("audit", str(path), "-p", POLICIES, "-o", "json").stdout)
    status = {w["object"]: w for w in doc["workloads"]}
    assert status["Job team-nlp/forty-1"]["status"] == "changes"
    for later, before in (("forty-2", "(Quota team-nlp: Job forty-1: 40)"),
                          ("forty-3", "(Quota team-nlp: Job forty-1: 40, Job forty-2: 40)")):
        [v] = [v for v in status[f"Job team-nlp/{later}"]["violations"] if v["rule"] == "quota.namespace-remaining"]
        assert before in v["message"], v["message"]
    first = tmp_path / "first.json"
    first.write_text(json.dumps(items[1]))
    [checked] = json.loads(run_cli("check", str(first), "--cluster", str(path), "-p", POLICIES, "-o", "json").stdout)
    [v] = [v for v in checked["violations"] if v["rule"] == "quota.namespace-remaining"]
    assert "(Quota team-nlp: Job forty-2: 40, Job forty-3: 40)" in v["message"]


def test_a_list_is_read_item_by_item_across_chunks(tmp_path, monkeypatch):
    items = [_stored(job(name=f"j{i}"), f"j{i}", "2026-01-10T08:00:00Z") for i in range(40)]
    typed = {"kind": "JobList", "apiVersion": "batch/v1", "metadata": {"resourceVersion": "9"},
             "items": [{k: v for k, v in item.items() if k not in ("kind", "apiVersion")} for item in items]}
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps(typed, indent=2))
    monkeypatch.setattr(streamlists, "CHUNK", 97)  # items and strings cut at chunk edges
    assert list(streamlists.iter_objects(str(path))) == items  # the list's kind on each item
    kubectl = tmp_path / "kubectl.json"  # `kubectl get -o json`: items first, kind List last
    kubectl.write_text(json.dumps({"apiVersion": "v1", "items": items, "kind": "List", "metadata": {}}))
    assert list(streamlists.iter_objects(str(kubectl))) == items
    events = tmp_path / "watch.jsonl"
    events.write_text("\n".join(json.dumps({"type": "ADDED", "object": item}) for item in items[:3]))
    assert list(streamlists.iter_objects(str(events))) == items[:3]


@pytest.mark.parametrize("content", ['{"apiVersion": "v1", "items": [{"a": 1}, {"b": ', "- a\n- b\n", "7\n"])
def test_unreadable_or_non_object_input_is_one_line_and_exit_2(tmp_path, content):
    path = tmp_path / "broken.json"
    path.write_text(content)
    result = run_cli("audit", str(path), "-p", POLICIES)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("trainadmit audit: ") and "Traceback" not in result.stderr


def test_bad_arguments_are_one_line_and_exit_2(tmp_path):
    missing = run_cli("audit", str(tmp_path / "nope.json"), "-p", POLICIES)
    assert missing.returncode == 2 and "no such file or directory" in missing.stderr
    both = run_cli("audit", "--kubeconfig", str(tmp_path / "k"), str(tmp_path / "x.json"))
    assert both.returncode == 2 and both.stderr == "trainadmit audit: give --kubeconfig/--context or saved lists, not both\n"
    no_config = run_cli("audit", "--kubeconfig", str(tmp_path / "missing-kubeconfig"), "-p", POLICIES)
    assert no_config.returncode == 2 and no_config.stderr.startswith("trainadmit audit: cannot use the cluster: ")
    assert no_config.stderr.count("\n") == 1


def test_stdin_is_read_twice_through_a_spool(stored_lists):
    result = run_cli("audit", "-", "-p", POLICIES, stdin=Path(stored_lists).read_text())
    assert result.returncode == 1 and "Job default/partial-nodes: DENIED" in result.stdout


def test_the_served_policy_default_is_the_configmap_the_webhook_mounts():
    """audit's --served-policy default (written out for a light parser) and the lister's are one ConfigMap:
    the one deploy/ mounts at /policies."""
    from support.paths import ROOT

    from trainadmit.cli.audit import SERVED_POLICY
    from trainadmit.cluster.listed import SERVED_POLICY as LISTED

    assert "/".join(LISTED) == SERVED_POLICY
    deployment = yaml.safe_load((ROOT / "deploy" / "base" / "deployment.yaml").read_text())
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert {"name": "policies", "configMap": {"name": LISTED[1]}} in volumes
    assert deployment["metadata"].get("namespace", LISTED[0]) == LISTED[0]
