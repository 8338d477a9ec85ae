"""Outcome tier: whose Pods are the Job's (the cluster: see test_outcome_gangs.py, with the real Job, quota
and garbage-collection controllers and the scheduler).

A user who may create Pods may write any ownerReference. The Pods the Job controller creates for an admitted
Job never reach the webhook (the generated matchConditions skip a Pod whose controller is a Job only when
the request comes from the Job controller's ServiceAccount), while a user's Pod carrying a forged controller
ownerReference to that same Job is decided as the Pod it is: here refused over the namespace's GPU quota,
which the Job's own Pods already fill.
"""

from __future__ import annotations

import copy

import pytest
from support.controlplane import KubeError, wait_until
from support.kube_fixtures import OUTCOME
from support.outcome import FITS, JOB_NAME_LABEL, all_bound, gpu_job, scene, submit

pytestmark = OUTCOME


def _dry_run_refusal(http, obj) -> str:
    try:
        http.create(obj, dry_run=True)
    except KubeError as exc:
        return exc.message
    return ""


def test_a_forged_ownerreference_is_decided_while_the_job_controllers_pods_are_not(outcome_cluster):
    cp, hook = outcome_cluster.cp, outcome_cluster.webhook
    with scene(cp, hook, "topology-constraint", FITS, "forged") as s:
        http = s.http
        http.apply([{"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpus", "namespace": s.namespace},
                     "spec": {"hard": {"requests.nvidia.com/gpu": "16"}}},
                    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",  # a user who may run Jobs and Pods
                     "metadata": {"name": "trainer", "namespace": s.namespace},
                     "rules": [{"apiGroups": ["", "batch"], "resources": ["pods", "jobs"],
                                "verbs": ["create", "get", "list", "delete"]}]},
                    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                     "metadata": {"name": "alice-trains", "namespace": s.namespace},
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "trainer"},
                     "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]}])
        wait_until(lambda: http.get("v1", "ResourceQuota", "gpus", s.namespace)["status"]["hard"], timeout=30,
                   what="the ResourceQuota controller to fill the quota's status")
        alice = cp.http_as("alice")
        job = gpu_job("my-small-job", s.namespace, 2, annotations={"trainadmit.io/topology": "rack"})  # 16 GPUs
        assert submit(cp, job).admitted
        stored = http.get("batch/v1", "Job", "my-small-job", s.namespace)
        pods = all_bound(http, s.namespace, f"{JOB_NAME_LABEL}=my-small-job", 2).bound
        wait_until(lambda: http.get("v1", "ResourceQuota", "gpus", s.namespace)["status"]["used"][
            "requests.nvidia.com/gpu"] == "16", timeout=30, what="the quota to count the Job's 2 Pods")
        template = http.get("v1", "Pod", next(iter(pods)), s.namespace)
        forged = {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "extra-worker", "namespace": s.namespace,
            "annotations": dict(template["metadata"].get("annotations") or {}), "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "my-small-job", "uid": stored["metadata"]["uid"],
                 "controller": True}]},
            "spec": copy.deepcopy(template["spec"])}
        for key in ("nodeName", "priority", "preemptionPolicy", "schedulingGroup"):
            forged["spec"].pop(key, None)
        # trainadmit's live view sees the quota's use once its watch delivers it: a dry run shows when
        message = wait_until(lambda: (m := _dry_run_refusal(alice, forged)) and "[quota.namespace-remaining]" in m
                             and m, timeout=30, what="trainadmit to refuse the forged Pod over the quota")
        assert "trainadmit denied this object" in message and f"namespace {s.namespace} has 0 of 16 free" in message
        with pytest.raises(KubeError) as err:
            alice.create(forged)
        assert "trainadmit denied this object" in err.value.message
        decisions = [x for x in hook.server.log_lines() if x.get("event") == "decision"  # type: ignore[attr-defined]
                     and x.get("namespace") == s.namespace and x.get("kind") == "Pod"]
        assert decisions and {x.get("name") for x in decisions} == {"extra-worker"}, decisions  # the Job's: never
