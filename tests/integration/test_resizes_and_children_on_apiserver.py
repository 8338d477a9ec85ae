"""Resizes and children through a real kube-apiserver, with the real Job controller where children are made.

A resize through `kubectl patch` is refused with the rule a CREATE of that size meets (`topology.domain-fit`
against the cluster's racks of 16 nodes, `gang.parallelism-completions`); one within the rules is stored, and
the coscheduling PodGroup the reconciler owns follows it, while a resize a 1.36 native PodGroup cannot
follow (its `schedulingPolicy` cannot change) is refused. Then, with kube-controller-manager running the Job and
ResourceQuota controllers: the Pods the Job controller creates for an admitted Job never reach the webhook
(the generated matchConditions skip them by their creator), while a user's Pod carrying a forged controller
ownerReference to that same Job is decided as the Pod it is, and refused over the namespace's GPU quota.
"""

from __future__ import annotations

import copy
import json
import subprocess

import pytest
from controlplane import KubeError, wait_until
from helpers import job, run_cli
from kube_fixtures import APISERVER, BARE_NS

pytestmark = APISERVER
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"


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


@pytest.fixture
def controller_manager(cluster):
    """kube-controller-manager with the Job and ResourceQuota controllers, for one test."""
    component = cluster.cp.start_controller_manager(["job", "resourcequota"])
    yield component
    component.stop()


def test_a_forged_ownerreference_is_decided_while_the_job_controllers_pods_are_not(webhook, cluster,
                                                                                   controller_manager):
    http, namespace = cluster.http, "forged"
    webhook.use("coscheduling")
    cluster.cp.ensure_namespace(namespace)
    http.apply([{"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpus", "namespace": namespace},
                 "spec": {"hard": {"requests.nvidia.com/gpu": "16"}}},
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",  # a user who may run Jobs and Pods
                 "metadata": {"name": "trainer", "namespace": namespace},
                 "rules": [{"apiGroups": ["", "batch"], "resources": ["pods", "jobs"],
                            "verbs": ["create", "get", "list", "delete"]}]},
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                 "metadata": {"name": "alice-trains", "namespace": namespace},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "trainer"},
                 "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]}])
    wait_until(lambda: http.get("v1", "ResourceQuota", "gpus", namespace)["status"]["hard"], timeout=30,
               what="the ResourceQuota controller to fill the quota's status")
    alice = cluster.cp.http_as("alice")
    stored = alice.create(job(name="my-small-job", namespace=namespace, workers=2))  # 16 GPUs: the whole quota
    try:
        pods = wait_until(lambda: len(items := http.list("v1", "Pod", namespace)["items"]) == 2 and items,
                          timeout=60, what="the Job controller to create the Job's 2 Pods")
        assert all(p["metadata"]["ownerReferences"][0]["uid"] == stored["metadata"]["uid"] for p in pods)
        wait_until(lambda: http.get("v1", "ResourceQuota", "gpus", namespace)["status"]["used"][
            "requests.nvidia.com/gpu"] == "16", timeout=30, what="the quota to count the 2 Pods")
        forged = {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "extra-worker", "namespace": namespace, "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "my-small-job", "uid": stored["metadata"]["uid"],
                 "controller": True}]},
            "spec": copy.deepcopy(pods[0]["spec"])}
        for key in ("nodeName", "priority", "preemptionPolicy"):
            forged["spec"].pop(key, None)
        # trainadmit's live view sees the quota used once its watch delivers it: a dry run shows when
        message = wait_until(lambda: (m := _dry_run_refusal(alice, forged)) and "[quota.namespace-remaining]" in m
                             and m, timeout=30, what="trainadmit to refuse the forged Pod over the quota")
        assert "trainadmit denied this object" in message and f"namespace {namespace} has 0 of 16 free" in message
        assert "trainadmit denied this object" in _refusal(alice, forged)
        logged = webhook.server.log_lines()
        pod_decisions = [x for x in logged if x.get("event") == "decision" and x.get("namespace") == namespace
                         and x.get("kind") == "Pod"]
        assert {x.get("name") for x in pod_decisions} == {"extra-worker"}, pod_decisions  # the Job's own: never
    finally:
        alice.delete(stored, propagation="Background")
        for pod in http.list("v1", "Pod", namespace)["items"]:  # list items carry no apiVersion and kind
            http.delete({"apiVersion": "v1", "kind": "Pod", "metadata": pod["metadata"]})


def _dry_run_refusal(http, obj) -> str:
    try:
        http.create(obj, dry_run=True)
    except KubeError as exc:
        return exc.message
    return ""
