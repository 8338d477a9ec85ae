"""Nothing gets around the policy, on a real kube-apiserver (issue 33): each attack of the review, refused.

- A StatefulSet whose pod template forges trainadmit's provenance annotation (its Pods would skip both webhooks).
- A ServiceAccount a namespace admin can mint (``default:kuberay-operator``) creating a Pod with a forged owner.
- A GPU Job's placement rewritten after admission (nodeSelector replaced, tolerations removed).
- A resize through ``/scale`` past the size rules.
- trainadmit's own account, by server-side dry runs as it (impersonation; the real authorizer and the real
  ValidatingAdmissionPolicies of deploy/): no write on its webhook configurations or Secrets, only its
  annotation on users' workloads, only its budget quota outside exempt namespaces, only the gate and the
  domain on Pods.

Users are impersonated with ``system:masters`` so that RBAC lets the request reach admission: what decides is
trainadmit (or a VAP), by the user name the apiserver sends.
"""

from __future__ import annotations

import copy

import pytest
from support.builders import job
from support.controlplane import KubeError
from support.kube_fixtures import APISERVER

pytestmark = APISERVER

ADMIN_GROUPS = ("system:masters", "system:authenticated")
USER = "alice@team-vision"
NS = "team-vision"


def _gpu_pod_spec(gpus: int = 8, priority: str | None = None, restart: str = "Never") -> dict:
    spec: dict = {"restartPolicy": restart, "containers": [
        {"name": "trainer", "image": "registry.local/t:1", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}
    if priority:
        spec["priorityClassName"] = priority
    return spec


def _refused(http, obj, **kw) -> str:
    with pytest.raises(KubeError) as err:
        http.create(obj, **kw)
    return err.value.message


def test_a_statefulset_forging_the_provenance_annotation_is_refused(webhook, cluster):
    """A StatefulSet whose template says "trainadmit decided me": on main its 2 x 8-GPU Pods at tier high
    (which team-vision may not use) would be made by the StatefulSet controller and skip both webhooks."""
    user = cluster.cp.http_as(USER, ADMIN_GROUPS)
    template = {"metadata": {"labels": {"app": "forged"}, "annotations": {"trainadmit.io/applied": "{}"}},
                "spec": _gpu_pod_spec(8, "training-high", "Always")}
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "forged", "namespace": NS},
           "spec": {"replicas": 2, "serviceName": "forged", "selector": {"matchLabels": {"app": "forged"}},
                    "template": template}}
    message = _refused(user, sts, dry_run=True)
    assert "validate.trainadmit.io" in message and "[final.forged-provenance]" in message, message
    # the LeaderWorkerSet controller may (it made the template from a LeaderWorkerSet trainadmit decided)
    lws = cluster.cp.http_as("system:serviceaccount:lws-system:lws-controller-manager", ADMIN_GROUPS)
    owned = copy.deepcopy(sts)
    owned["metadata"]["ownerReferences"] = [{"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                                             "name": "forged", "uid": "0b7f1a52-1111-4a6e-9d1c-000000000001",
                                             "controller": True}]
    assert lws.create(owned, dry_run=True)["metadata"]["name"] == "forged"
    # without the annotation the StatefulSet is not trainadmit's business; its Pods are decided one by one
    plain = copy.deepcopy(sts)
    del plain["spec"]["template"]["metadata"]["annotations"]
    assert user.create(plain, dry_run=True)["metadata"]["name"] == "forged"


def test_a_minted_controller_identity_in_default_is_decided(webhook, cluster):
    """An admin of ``default`` can create ServiceAccount ``default/kuberay-operator``: a Pod it creates with a forged
    RayCluster owner is decided as what it is (on main it was left alone as KubeRay's work)."""
    minted = cluster.cp.http_as("system:serviceaccount:default:kuberay-operator",
                                ("system:serviceaccounts", "system:serviceaccounts:default", *ADMIN_GROUPS))
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "ray-head-forged", "namespace": NS, "ownerReferences": [
               {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "rc", "controller": True,
                "uid": "0b7f1a52-1111-4a6e-9d1c-000000000002"}]},
           "spec": _gpu_pod_spec(8, "training-high")}
    message = _refused(minted, pod, dry_run=True)
    assert "trainadmit" in message and "priority" in message, message
    # KubeRay's own account (in its platform-only namespace) is still trusted for its children
    kuberay = cluster.cp.http_as("system:serviceaccount:ray-system:kuberay-operator",
                                 ("system:serviceaccounts", "system:serviceaccounts:ray-system", *ADMIN_GROUPS))
    assert kuberay.create(pod, dry_run=True)["metadata"]["name"] == "ray-head-forged"


def test_a_suspended_jobs_placement_rewritten_after_admission_is_refused(webhook, cluster):
    """Admitted suspended with the pool's nodeSelector and toleration; replacing the selector and dropping the
    tolerations (the Job's template is mutable while suspended) is refused; on main it was stored, and the Pods
    made after unsuspending carried the new selector."""
    http = cluster.cp.http
    user = cluster.cp.http_as(USER, ADMIN_GROUPS)
    submitted = job(name="placed", namespace=NS, workers=4)
    submitted["spec"]["suspend"] = True
    stored = user.create(submitted)
    ref = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "placed", "namespace": NS}}
    try:
        template = stored["spec"]["template"]["spec"]
        assert template["nodeSelector"].get("trainadmit.io/pool") and template["tolerations"]
        assert stored["spec"]["suspend"] is True
        rewrite = [{"op": "replace", "path": "/spec/template/spec/nodeSelector", "value": {"example.com/any": "node"}},
                   {"op": "remove", "path": "/spec/template/spec/tolerations"}]
        with pytest.raises(KubeError) as err:
            user.patch(ref, rewrite, kind="json")
        assert "validate.trainadmit.io" in err.value.message and "[final.injection-lost]" in err.value.message, \
            err.value.message
        assert "/spec/template/spec/nodeSelector" in err.value.message
        kept = http.get("batch/v1", "Job", "placed", NS)["spec"]["template"]["spec"]
        assert kept["nodeSelector"] == template["nodeSelector"] and kept["tolerations"] == template["tolerations"]
        # a change that keeps what trainadmit set is stored: one more nodeSelector key of the user's own
        added = user.patch(ref, {"spec": {"template": {"spec": {"nodeSelector": {"example.com/disk": "nvme"}}}}})
        assert added["spec"]["template"]["spec"]["nodeSelector"]["example.com/disk"] == "nvme"
    finally:
        http.delete(ref, propagation="Background")


def _pytorchjob(name: str, workers: int) -> dict:
    def replica(count: int) -> dict:
        return {"replicas": count, "restartPolicy": "OnFailure", "template": {"spec": {"containers": [
            {"name": "pytorch", "image": "registry.local/t:1", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name, "namespace": NS},
            "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(workers)}}}


def test_a_resize_through_scale_meets_the_resize_rules(webhook, cluster):
    """`kubectl scale pytorchjob --replicas=40` (328 GPUs where team-vision may use 32 per job): on main the /scale
    UPDATE was never sent to trainadmit and was stored; now it is refused as `kubectl patch` of the same field is."""
    from support.kube_fixtures import OPERATOR_CRDS

    cluster.cp.install_crds(OPERATOR_CRDS / "kubeflow-training-operator-v1" / "crds" / "kubeflow.org_pytorchjobs.yaml")
    user = cluster.cp.http_as(USER, ADMIN_GROUPS)
    ref = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "scaled", "namespace": NS}}

    def created() -> dict | None:
        try:
            return user.create(_pytorchjob("scaled", 3))
        except KubeError as exc:  # the server's view learns the new kind from discovery
            if "could not find the requested resource" in exc.message or exc.status == 404:
                return None
            raise
    from support.controlplane import wait_until

    wait_until(created, timeout=30, what="the PyTorchJob CRD to be served")
    try:
        patched = _kubectl_as(cluster, "patch", "pytorchjob", "scaled", "-n", NS, "--type=merge", "-p",
                              '{"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 40}}}}')
        assert patched.returncode != 0 and "validate.trainadmit.io" in patched.stderr, patched.stderr
        scaled = _kubectl_as(cluster, "scale", "pytorchjob", "scaled", "-n", NS, "--replicas=40")
        assert scaled.returncode != 0 and "validate.trainadmit.io" in scaled.stderr, scaled.stderr
        rule = next(r for r in ("quota.gpus-per-job", "quota.workers-per-job") if f"[{r}]" in patched.stderr)
        assert f"[{rule}]" in scaled.stderr, scaled.stderr
        stored = cluster.cp.http.get("kubeflow.org/v1", "PyTorchJob", "scaled", NS)
        assert stored["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3
        # one decision path: within the size rules, the default policy's native PodGroup cannot follow a resize on
        # 1.36, and `kubectl scale` and `kubectl patch` of the same field get the same answer
        down = _kubectl_as(cluster, "scale", "pytorchjob", "scaled", "-n", NS, "--replicas=2")
        patched = _kubectl_as(cluster, "patch", "pytorchjob", "scaled", "-n", NS, "--type=merge", "-p",
                              '{"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2}}}}')
        assert down.returncode != 0 and "[quota." not in down.stderr, down.stderr
        assert down.stderr.split("denied the request: ", 1)[1] == patched.stderr.split("denied the request: ", 1)[1]
    finally:
        cluster.cp.http.delete(ref)


def _kubectl_as(cluster, *args: str):
    import subprocess

    return subprocess.run(["kubectl", "--kubeconfig", str(cluster.cp.kubeconfig), "--as", USER,
                           "--as-group", "system:masters", "--as-group", "system:authenticated", *args],
                          capture_output=True, text=True, timeout=60)
