"""`trainadmit audit --kubeconfig` on a real kube-apiserver: Jobs and operator custom resources created
while trainadmit's webhooks were away (some breaking the policy), then judged.

What it must show: audit lists exactly the violations `trainadmit check` gives for each object (as
written, with a snapshot of the same cluster), the fields an unconfigured but compliant workload would
get, nothing for a child (judged through its parent) or a CPU Job, compliance for the same workload once
it went through the webhook, and the served policy read from the ConfigMap the webhook mounts (without one,
the clone's policies/, said in one line, or one line asking for -p)."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys

from support.cli import run_cli
from support.kube_compare import save_snapshot
from support.kube_fixtures import APISERVER, OPERATOR_CRDS, SYSTEM_NS, webhooks_removed
from support.manifests import load_yaml
from support.paths import EXAMPLES, FIXTURES, ROOT

from trainadmit.engine import load_policy

pytestmark = APISERVER
NS = "team-audit"  # Quota "teams" (team-*): 32 GPUs and 8 workers per job, tiers normal and low, no budget
CRDS = ("jobset/crds/jobset.x-k8s.io_jobsets.yaml", "lws/crds/leaderworkerset.x-k8s.io_leaderworkersets.yaml",
        "kubeflow-training-operator-v1/crds/kubeflow.org_pytorchjobs.yaml")


def _doc(path, kind: str, name: str | None = None) -> dict:
    [obj] = [d for d in load_yaml(path) if d.get("kind") == kind]
    obj = copy.deepcopy(obj)
    meta = obj["metadata"]
    meta["namespace"] = NS
    if name:
        meta.pop("generateName", None)
        meta["name"] = name
    return obj


def workloads() -> list[dict]:
    return [
        _doc(EXAMPLES / "denied-partial-nodes.yaml", "Job"),  # 6 GPUs per worker on 8-GPU nodes: denied
        _doc(EXAMPLES / "single-node-eval.yaml", "Job", "eval"),  # one 4-GPU Pod: admitted, nothing configured
        _doc(FIXTURES / "real-world" / "schedplugins-sakkara-job-a.yaml", "Job", "sakkara-a"),  # 8 x 1 GPU: denied
        _doc(FIXTURES / "real-world" / "gke-ctk-a3ultra-nccl-jobset-example.yaml", "JobSet", "a3-nccl"),
        _doc(OPERATOR_CRDS / "lws" / "examples" / "vllm-gpu-lws.yaml", "LeaderWorkerSet"),
        _doc(FIXTURES / "real-world" / "kftrainingop-pytorch_job_mnist_nccl.yaml", "PyTorchJob"),  # 1 GPU each
        _doc(FIXTURES / "real-world" / "kueue-sample-job.yaml", "Job", "cpu-only"),  # no GPU: not trainadmit's
    ]


def test_audit_lists_what_check_says_of_each_stored_workload(webhook, cluster, tmp_path):
    cp, http = cluster.cp, cluster.http
    cp.install_crds(*(OPERATOR_CRDS / f for f in CRDS))
    cp.ensure_namespace(NS)
    webhook.use("default")
    written = workloads()
    stored: list[dict] = []
    try:
        with webhooks_removed(cp, webhook):
            for obj in written:
                stored.append(http.create(obj))
            [jobset] = [s for s in stored if s["kind"] == "JobSet"]
            child = _doc(EXAMPLES / "single-node-eval.yaml", "Job", "a3-nccl-w-0")  # as JobSet's controller made it
            child["metadata"]["ownerReferences"] = [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                                     "name": "a3-nccl", "uid": jobset["metadata"]["uid"],
                                                     "controller": True, "blockOwnerDeletion": True}]
            stored.append(http.create(child))
        snapshot = save_snapshot(http, tmp_path / "snapshot")
        result = run_cli("audit", "--kubeconfig", str(cp.kubeconfig), "-p", str(webhook.policy_dir), "-o", "json")
        assert result.returncode == 1, result.stderr  # some are denied
        audited = {w["object"]: w for w in json.loads(result.stdout)["workloads"] if w["object"].split()[1]
                   .startswith(NS + "/")}
        # exactly the GPU workloads, parents only: not the CPU Job, not the JobSet's Job
        assert sorted(audited) == sorted(f"{s['kind']} {NS}/{s['metadata']['name']}" for s in stored[:6])
        for obj, saved in zip(written[:6], stored[:6], strict=True):
            (tmp_path / "one.json").write_text(json.dumps(obj))
            check = run_cli("check", str(tmp_path / "one.json"), "-p", str(webhook.policy_dir), "-o", "json",
                            *(a for path in snapshot for a in ("--cluster", path)))
            [record] = json.loads(check.stdout)
            verdict = audited[f"{saved['kind']} {NS}/{saved['metadata']['name']}"]
            assert verdict["violations"] == record["violations"], saved["metadata"]["name"]
            # and, only audit, what a stored workload lacks (check is asked of a submission)
            lacks = [w for w in verdict["warnings"] if w["rule"] == "final.not-admitted"]
            assert len(lacks) == (verdict["status"] == "changes"), saved["metadata"]["name"]
            assert [w for w in verdict["warnings"] if w not in lacks] == record["warnings"], saved["metadata"]["name"]
            assert (verdict["status"] == "denied") is (not record["allowed"])
        # by hand, from the files: whole nodes (6 of 8 GPUs per worker; 1 GPU per Pod on 8-GPU nodes)
        for name in ("Job team-audit/partial-nodes", "Job team-audit/sakkara-a", "PyTorchJob team-audit/pytorch-dist-mnist-nccl"):
            assert audited[name]["status"] == "denied"
            assert "topology.whole-node" in {v["rule"] for v in audited[name]["violations"]}
        # the one-Pod eval Job: admitted, and what the pool and the policy would have given it
        eval_job = audited["Job team-audit/eval"]
        assert eval_job["status"] == "changes"
        changes = {c["path"]: c for c in eval_job["changes"]}
        assert changes["spec.template.spec.priorityClassName"]["value"] == "training-normal"
        assert changes["spec.template.spec.priorityClassName"]["source"] == "PriorityTier normal: spec.className"
        assert changes["spec.template.spec.nodeSelector"]["value"] == {
            "trainadmit.io/pool": "h100-ib", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
        assert {c["concern"] for c in eval_job["changes"]} == {"hardware", "nccl", "placement", "preflight",
                                                                "priority", "rdma", "storage"}
        text = run_cli("audit", "--kubeconfig", str(cp.kubeconfig), "-p", str(webhook.policy_dir)).stdout
        assert ('+ spec.template.spec.priorityClassName = "training-normal"  <- PriorityTier normal: '
                "spec.className") in text
        # the same Job through the webhook: stored configured, so compliant
        through = http.create(_doc(EXAMPLES / "single-node-eval.yaml", "Job", "eval-through-webhook"))
        stored.append(through)
        again = json.loads(run_cli("audit", "--kubeconfig", str(cp.kubeconfig), "-p", str(webhook.policy_dir),
                                   "-o", "json").stdout)
        [configured] = [w for w in again["workloads"] if w["object"] == f"Job {NS}/eval-through-webhook"]
        assert configured["status"] == "compliant" and configured["changes"] == []
    finally:
        for obj in reversed(stored):
            http.delete(obj, propagation="Background")


def test_audit_judges_by_the_served_policy(webhook, cluster, tmp_path):
    """Without -p, the policy is the ConfigMap the webhook mounts (deploy/base/policies.yaml's), read whole."""
    cp, http = cluster.cp, cluster.http
    configmap = subprocess.run([sys.executable, "-m", "trainadmit.cli", "policy", "configmap", str(webhook.policy_dir),
                                "--namespace", SYSTEM_NS], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    (tmp_path / "cm.yaml").write_text(configmap)
    [cm] = load_yaml(tmp_path / "cm.yaml")
    http.apply(cm)
    try:
        result = run_cli("audit", "--kubeconfig", str(cp.kubeconfig))
        assert result.returncode in (0, 1), result.stderr
        assert result.stdout.rstrip().endswith(f"(policy generation {load_policy(webhook.policy_dir).generation})")
    finally:
        http.delete(cm)
    # no served ConfigMap (a server run from a clone's policies/): the local policy, said in one line, or -p asked for
    program = [sys.executable, "-m", "trainadmit.cli", "audit", "--kubeconfig", str(cp.kubeconfig)]
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "TRAINADMIT_POLICY_DIR"}
    missing = subprocess.run(program, cwd=empty, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert missing.returncode == 2 and missing.stderr.splitlines() == [
        "trainadmit audit: the cluster has no served policy ConfigMap trainadmit-system/trainadmit-policies and there "
        "is no ./policies: pass the policy to judge by with -p POLICY_DIR"]
    clone = tmp_path / "clone"
    shutil.copytree(webhook.policy_dir, clone / "policies")
    local = subprocess.run(program, cwd=clone, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert local.returncode in (0, 1), local.stderr
    assert local.stderr.splitlines()[0] == ("trainadmit audit: the cluster has no served policy ConfigMap "
                                            "trainadmit-system/trainadmit-policies; judging by ./policies (-p "
                                            "POLICY_DIR names another)")
    assert local.stdout.rstrip().endswith(f"(policy generation {load_policy(webhook.policy_dir).generation})")
