"""Resizes through a real kube-apiserver: `kubectl patch` as a user scales a stored Job.

A resize through `kubectl patch` is refused with the rule a CREATE of that size meets (`topology.domain-fit`
against the cluster's racks of 16 nodes, `gang.parallelism-completions`); one within the rules is stored, and
the coscheduling PodGroup the reconciler owns follows it, while a resize a 1.36 native PodGroup cannot
follow (its `schedulingPolicy` cannot change) is refused. (Children made by the real Job controller:
test_outcome_children.py.)
"""

from __future__ import annotations

import copy
import json
import subprocess

import pytest
from support.builders import job
from support.cli import run_cli
from support.controlplane import KubeError
from support.kube_fixtures import APISERVER, BARE_NS

pytestmark = APISERVER


def _kubectl(cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["kubectl", "--kubeconfig", str(cluster.cp.kubeconfig), *args], capture_output=True,
                          text=True, timeout=60)


def _patch(cluster, name: str, spec: dict) -> subprocess.CompletedProcess:
    return _kubectl(cluster, "patch", "job", name, "-n", BARE_NS, "--type=merge", "-p", json.dumps({"spec": spec}))


def _refusal(http, obj) -> str:
    with pytest.raises(KubeError) as err:
        http.create(obj)
    return err.value.message


def _rule_text(message: str, rule: str) -> str:
    """One violation of a denial message, as `[rule] path: message (hint)`."""
    start = message.index(f"[{rule}]")
    end = message.find("; [", start)
    return message[start:end if end >= 0 else len(message)]


def _reconcile(webhook, policy) -> list[str]:
    from kubernetes import client, config

    from trainadmit.cluster.reconciler import PodGroupReconciler

    api = config.new_client_from_config(config_file=str(webhook.kubeconfig))
    return PodGroupReconciler(client.CustomObjectsApi(api), key=policy.keys.podgroup, log=lambda m: None,
                              kinds=[("batch", "v1", "jobs")]).step()


def test_kubectl_patch_past_a_rule_is_refused_with_the_creates_rule_and_the_podgroup_follows(webhook, cluster):
    http = cluster.http
    policy = webhook.use("coscheduling")
    stored = http.create(job(name="elastic", namespace=BARE_NS, workers=4))
    try:
        assert any(r.endswith("elastic: created") for r in _reconcile(webhook, policy))
        # past the rack: the CREATE of 20 and the resize to 20 are refused by the same violation
        created = _refusal(http, job(name="elastic-20", namespace=BARE_NS, workers=20))
        patched = _patch(cluster, "elastic", {"parallelism": 20, "completions": 20})
        assert patched.returncode != 0 and "validate.trainadmit.io" in patched.stderr, patched.stderr
        expected = _rule_text(created, "topology.domain-fit")
        assert "20 workers need 20 nodes in one rack" in expected and "(in the cluster)" in expected
        assert expected in patched.stderr
        # the gang's shape: parallelism 8 with completions left at 4, as a CREATE of that shape
        created = _refusal(http, job(name="elastic-shape", namespace=BARE_NS, workers=8, completions=4))
        patched = _patch(cluster, "elastic", {"parallelism": 8})
        assert patched.returncode != 0 and _rule_text(created, "gang.parallelism-completions") in patched.stderr
        # within the rules: stored, and the reconciler's PodGroup follows (4 -> 8 Pods, 32 -> 64 GPUs)
        ok = _patch(cluster, "elastic", {"parallelism": 8, "completions": 8})
        assert ok.returncode == 0, ok.stderr
        assert http.get("batch/v1", "Job", "elastic", BARE_NS)["spec"]["parallelism"] == 8
        assert any(r.endswith("elastic: resized 4 -> 8") for r in _reconcile(webhook, policy))
        pg = http.get("scheduling.x-k8s.io/v1alpha1", "PodGroup", "elastic", BARE_NS)
        assert pg["spec"]["minMember"] == 8 and pg["spec"]["minResources"] == {"nvidia.com/gpu": "64"}
    finally:
        http.delete(stored, propagation="Background")
        http.delete({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                     "metadata": {"name": "elastic", "namespace": BARE_NS}})


def test_a_resize_a_136_native_podgroup_cannot_follow_is_refused(webhook, cluster, tmp_path):
    """Kubernetes 1.36's PodGroup (scheduling.k8s.io/v1alpha2) cannot change its schedulingPolicy, so the
    reconciler could not follow a resize: `check --old` refuses it, saying what to do, and this apiserver
    itself refuses the Job's parallelism change once its template names a gang PodGroup."""
    http = cluster.http
    policy = webhook.use("native-podgroup")
    stored = http.create(job(name="fixed", namespace=BARE_NS, workers=4))
    try:
        _reconcile(webhook, policy)
        pg = http.get("scheduling.k8s.io/v1alpha2", "PodGroup", "fixed-gang", BARE_NS)
        with pytest.raises(KubeError) as err:  # the fact the rule rests on, on this apiserver
            http.patch(pg, {"spec": {"schedulingPolicy": {"gang": {"minCount": 8}}}})
        assert err.value.status == 422 and "immutable" in err.value.message
        resized = copy.deepcopy(stored)
        resized["spec"].update(parallelism=8, completions=8)
        (tmp_path / "old.yaml").write_text(json.dumps(stored))
        (tmp_path / "new.yaml").write_text(json.dumps(resized))
        r = run_cli("check", str(tmp_path / "new.yaml"), "--old", str(tmp_path / "old.yaml"), "-p",
                    str(webhook.policy_dir))
        assert r.returncode == 1 and "[gang.resize-not-followed]" in r.stdout, r.stdout
        assert "scheduling.k8s.io/v1alpha2" in r.stdout and "delete the Job and create it with the new size" in r.stdout
        patched = _patch(cluster, "fixed", {"parallelism": 8, "completions": 8})
        assert patched.returncode != 0 and "cannot change parallelism for a Job referencing gang-scheduled PodGroup" \
            in patched.stderr, patched.stderr
    finally:
        http.delete(stored, propagation="Background")
        http.delete({"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
                     "metadata": {"name": "fixed-gang", "namespace": BARE_NS}})
