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
