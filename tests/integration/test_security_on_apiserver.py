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

import base64
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


# ---- trainadmit's own account: server-side dry runs as it -------------------------------------------------

ACCOUNT = "system:serviceaccount:trainadmit-system:trainadmit"
ACCOUNT_GROUPS = ("system:serviceaccounts", "system:serviceaccounts:trainadmit-system", "system:authenticated")
FENCES = ("base/fence-workloads.yaml", "base/fence-quotas.yaml", "base/fence-pods.yaml")
CERTS_OVERLAY = ("overlays/in-cluster-certs/rbac-certs.yaml", "overlays/in-cluster-certs/fence-certs.yaml")


def _deploy(*files: str) -> list[dict]:
    from support.controlplane import load_manifests
    from support.paths import ROOT

    return load_manifests(*(ROOT / "deploy" / f for f in files))


@pytest.fixture(scope="module")
def fenced(cluster):
    """deploy/base's fences installed (as the default overlay installs them), until the module ends."""
    objs = _deploy(*FENCES)
    cluster.cp.apply(objs)
    yield cluster.cp.http_as(ACCOUNT, ACCOUNT_GROUPS)
    for obj in objs:
        cluster.http.delete(obj)


def _denied(call) -> str:
    with pytest.raises(KubeError) as err:
        call()
    return err.value.message


def _eventually_denied(call, what: str) -> str:
    """A new ValidatingAdmissionPolicy takes effect once the apiserver's policy informer has it (about a second)."""
    from support.controlplane import wait_until

    found: list[str] = []

    def denied() -> bool:
        try:
            call()
        except KubeError as exc:
            found.append(exc.message)
            return exc.status in (403, 422)
        return False
    wait_until(denied, timeout=30, what=what)
    return found[-1]


def test_the_default_overlays_account_cannot_rewrite_its_webhook_configurations_or_secrets(cluster, webhook):
    """On main a dry run as the account turned the validating webhook to failurePolicy Ignore and created Secrets."""
    account = cluster.cp.http_as(ACCOUNT, ACCOUNT_GROUPS)
    ref = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
           "metadata": {"name": "trainadmit"}}
    ignore = [{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}]
    assert "forbidden" in _denied(lambda: account.patch(ref, ignore, kind="json", dry_run=True)).lower()
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "trainadmit-tls", "namespace": "trainadmit-system"},
              "type": "Opaque", "data": {}}
    assert "forbidden" in _denied(lambda: account.create(secret, dry_run=True)).lower()


def test_the_in_cluster_certs_account_may_change_only_the_ca_bundle_and_its_own_secret(cluster, webhook):
    objs = _deploy(*CERTS_OVERLAY)
    cluster.cp.apply(objs)
    try:
        account = cluster.cp.http_as(ACCOUNT, ACCOUNT_GROUPS)

        def put(change) -> dict:  # the account may get and update (not patch): a dry-run PUT of the changed object
            obj = account.get("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "trainadmit")
            change(obj["webhooks"][0])
            return account.request("PUT", account._obj_path(obj), obj, query={"dryRun": "All"})

        for change in (lambda w: w.update(failurePolicy="Ignore"),
                       lambda w: w.update(clientConfig={"url": "https://evil.example:443/v",
                                                        "caBundle": w["clientConfig"].get("caBundle", "")}),
                       lambda w: w.update(rules=[])):
            message = _eventually_denied(lambda c=change: put(c), "the fence to refuse a webhook change")
            assert "trainadmit-fence-webhook-configurations" in message, message
        other_ca = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode()
        assert put(lambda w: w["clientConfig"].update(caBundle=other_ca))["metadata"]["name"] == "trainadmit"
        other = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                 "metadata": {"name": "stolen", "namespace": "trainadmit-system"},
                 "data": {"tls.crt": "", "tls.key": ""}}
        assert "trainadmit-fence-secrets" in _eventually_denied(lambda: account.create(other, dry_run=True),
                                                                "the fence to refuse another Secret")
        own = {**other, "metadata": {"name": "trainadmit-tls", "namespace": "trainadmit-system"}}
        assert account.create(own, dry_run=True)["metadata"]["name"] == "trainadmit-tls"
    finally:
        for obj in objs:
            cluster.http.delete(obj)


def _suspended_job(http, name: str) -> dict:
    """A suspended one-worker GPU Job in ``NS`` (it starts no Pod), created as the admin; its reference."""
    submitted = job(name=name, namespace=NS, workers=1)
    submitted["spec"]["suspend"] = True
    http.create(submitted)
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": NS}}


def test_the_account_may_write_only_its_annotation_on_users_workloads(cluster, webhook, fenced):
    """On main a dry run as the account set a Job's activeDeadlineSeconds (and a RayCluster's head image)."""
    http = cluster.cp.http
    ref = _suspended_job(http, "fenced")
    try:
        message = _eventually_denied(lambda: fenced.patch(ref, {"spec": {"activeDeadlineSeconds": 1}}, dry_run=True),
                                     "the workloads fence to refuse a spec change")
        assert "trainadmit-fence-workloads" in message, message
        labelled = {"metadata": {"labels": {"team": "other"}}}
        assert "trainadmit-fence-workloads" in _denied(lambda: fenced.patch(ref, labelled, dry_run=True))
        foreign = {"metadata": {"annotations": {"example.com/owner": "mallory"}}}
        assert "trainadmit-fence-workloads" in _denied(lambda: fenced.patch(ref, foreign, dry_run=True))
        ours = {"metadata": {"annotations": {"trainadmit.io/preflight": '{"failed": 0}'}}}
        assert fenced.patch(ref, ours, dry_run=True)["metadata"]["annotations"]["trainadmit.io/preflight"]
    finally:
        http.delete(ref, propagation="Background")


def test_the_account_may_write_only_its_budget_quota_outside_exempt_namespaces(cluster, webhook, fenced):
    """On main a dry run as the account created `pods=0` in kube-system."""
    def quota(name: str, namespace: str, hard: dict) -> dict:
        return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name, "namespace": namespace},
                "spec": {"hard": hard}}
    budget = {"requests.nvidia.com/gpu": "64"}
    message = _eventually_denied(lambda: fenced.create(quota("pods", "kube-system", {"pods": "0"}), dry_run=True),
                                 "the quotas fence to refuse a quota in kube-system")
    assert "trainadmit-fence-quotas" in message, message
    for bad in (quota("trainadmit-gpu-budget", "kube-system", budget), quota("other", NS, budget),
                quota("trainadmit-gpu-budget", NS, {"pods": "0"}),
                quota("trainadmit-gpu-budget", NS, {"requests.cpu": "0"})):
        assert "trainadmit-fence-quotas" in _denied(lambda b=bad: fenced.create(b, dry_run=True)), bad
    assert fenced.create(quota("trainadmit-gpu-budget", NS, budget), dry_run=True)["spec"]["hard"] == budget


def test_the_account_may_only_ungate_and_place_a_pod(cluster, webhook, fenced):
    """The placement gate's one patch (docs/scheduling.md): remove the trainadmit.io/placement gate, add nodeSelector keys, set trainadmit.io/placement-domain;
    nothing else. (RBAC for Pods is the placement gate's; the account is given patch here to reach admission.)"""
    http = cluster.cp.http
    rbac = [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
             "metadata": {"name": "fence-test-pods", "namespace": NS},
             "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "patch"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": "fence-test-pods", "namespace": NS},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "fence-test-pods"},
             "subjects": [{"kind": "ServiceAccount", "name": "trainadmit", "namespace": "trainadmit-system"}]}]
    cluster.cp.apply(rbac)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gated", "namespace": NS},
           "spec": {"schedulingGates": [{"name": "trainadmit.io/placement"}, {"name": "example.com/other"}],
                    "nodeSelector": {"trainadmit.io/pool": "h100-ib"},
                    "containers": [{"name": "c", "image": "registry.local/t:1"}]}}
    http.create(pod)
    ref = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gated", "namespace": NS}}
    try:
        ungate = [{"op": "add", "path": "/spec/nodeSelector/example.com~1rack", "value": "rack-1"},
                  {"op": "remove", "path": "/spec/schedulingGates/0"},
                  {"op": "add", "path": "/metadata/annotations", "value": {"trainadmit.io/placement-domain": "rack-1"}}]
        wrong = (
            [{"op": "remove", "path": "/spec/schedulingGates/1"}],  # someone else's gate
            [{"op": "add", "path": "/spec/affinity", "value": {"nodeAffinity": {  # allowed by the apiserver while gated
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "example.com/anywhere", "operator": "Exists"}]}]}}}}],
            [{"op": "replace", "path": "/spec/containers/0/image", "value": "registry.local/evil:1"}],
            [{"op": "add", "path": "/spec/tolerations/-", "value": {"operator": "Exists"}}],
            [{"op": "add", "path": "/metadata/labels", "value": {"team": "other"}}],
        )
        message = _eventually_denied(lambda: fenced.patch(ref, list(wrong[0]), kind="json", dry_run=True),
                                     "the pods fence to refuse removing another gate")
        assert "trainadmit-fence-pods" in message, message
        for patch in wrong[1:]:
            assert "trainadmit-fence-pods" in _denied(lambda p=patch: fenced.patch(ref, p, kind="json", dry_run=True))
        placed = fenced.patch(ref, ungate, kind="json", dry_run=True)
        assert placed["spec"]["schedulingGates"] == [{"name": "example.com/other"}]
        assert placed["spec"]["nodeSelector"]["example.com/rack"] == "rack-1"
    finally:
        http.delete(ref)
        for obj in rbac:
            http.delete(obj)


# ---- what the account may do, as the apiserver says it --------------------------------------------------

SECURITY_DOC = "docs/security.md"
CAN_I_BEGIN, CAN_I_END = "<!-- BEGIN kubectl auth can-i --list -->", "<!-- END kubectl auth can-i --list -->"


def can_i_list(cluster) -> str:
    """`kubectl auth can-i --list` as the account in its namespace (deploy/base's RBAC), rows sorted."""
    import subprocess

    out = subprocess.run(["kubectl", "--kubeconfig", str(cluster.cp.kubeconfig), "auth", "can-i", "--list",
                          "-n", "trainadmit-system", "--as", ACCOUNT, *(f"--as-group={g}" for g in ACCOUNT_GROUPS)],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    head, *rows = out.rstrip("\n").splitlines()
    return "\n".join([head.rstrip(), *sorted(r.rstrip() for r in rows)])


def _rows(text: str) -> set[tuple[str, str, str]]:
    """(resource.group, resourceName or "", verb) of every row naming a resource (not the non-resource URLs)."""
    import re

    out = set()
    for line in text.splitlines()[1:]:
        cols = re.split(r"\s{2,}", line.strip())
        if len(cols) != 4 or cols[0].startswith("["):  # a non-resource URL row has no resource column
            continue
        resource, _, names, verbs = cols
        for name in names.strip("[]").split() or [""]:
            for verb in verbs.strip("[]").split():
                out.add((resource, name, verb))
    return out


def test_can_i_list_as_the_account_is_what_the_code_declares_and_what_the_doc_shows(cluster):
    from support.paths import ROOT
    from support.permissions import declared

    listed = can_i_list(cluster)
    rows = _rows(listed)
    declared = {(f"{r}.{g}" if g else r, n, v) for g, r, v, n, _ in declared(certs=False)}
    ours = {row for row in rows if row[0].split(".", 1)[0] not in (
        "selfsubjectreviews", "selfsubjectaccessreviews", "selfsubjectrulesreviews")}
    assert ours == declared, "the account's RBAC (as the apiserver lists it) differs from what the code declares"
    doc = (ROOT / SECURITY_DOC).read_text()
    block = doc[doc.index(CAN_I_BEGIN) + len(CAN_I_BEGIN):doc.index(CAN_I_END)].strip().removeprefix("```").removesuffix(
        "```").strip()
    assert block == listed, f"paste into {SECURITY_DOC} between the markers:\n```\n{listed}\n```"


def test_an_update_changing_neither_spec_nor_a_trainadmit_key_is_not_sent(webhook, cluster):
    """A label of the user's own, a finalizer (the garbage collector's foreground deletion): the apiserver does not
    call /validate (an outage of trainadmit does not hold them); a trainadmit key or the spec: it does. On main every
    UPDATE of a GPU Job was sent."""
    http = cluster.cp.http
    ref = _suspended_job(http, "quiet")
    try:
        def calls() -> float:
            return cluster.cp.webhook_calls().get("validate.trainadmit.io", 0.0)

        before = calls()
        http.patch(ref, {"metadata": {"labels": {"team": "vision"}, "finalizers": ["example.com/hold"]}})
        assert calls() == before
        http.patch(ref, {"metadata": {"annotations": {"trainadmit.io/topology": "rack"}}})
        assert calls() == before + 1
        http.patch(ref, {"spec": {"suspend": False}})
        assert calls() == before + 2
    finally:
        http.patch(ref, {"metadata": {"finalizers": None}})
        http.delete(ref, propagation="Background")


# ---- the metrics port: only a token the apiserver authorizes for get on /metrics ---------------------------

@pytest.fixture(scope="module")
def guarded(control_plane, cluster, tmp_path_factory):
    """A server as deploy/ runs it (``--metrics-bind-address``, ``--metrics-auth``), calling the apiserver as
    trainadmit's account with deploy/base's RBAC; Prometheus's ServiceAccount bound to deploy/monitoring's
    reader role, and a namespace user's ServiceAccount with nothing of the kind. Yields (server, tokens)."""
    from support.controlplane import load_manifests
    from support.paths import POLICIES, ROOT
    from support.server import Server, issue_certs

    cp = control_plane
    http = cp.http
    base = tmp_path_factory.mktemp("metrics-guarded")
    cp.ensure_namespace("monitoring")
    made = [*load_manifests(ROOT / "deploy" / "monitoring" / "metrics-reader.yaml"),
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "prometheus", "namespace": "monitoring"}},
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "curious", "namespace": NS}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": "trainadmit-metrics-reader-test"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": "trainadmit-metrics-reader"},
             "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}]}]
    cp.apply(made)

    def token(namespace: str, name: str) -> str:
        req = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}
        return http.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", req)["status"][
            "token"]

    kubeconfig = cp.service_account_kubeconfig(base / "kubeconfig", "trainadmit-system", "trainadmit")
    server = Server(POLICIES, issue_certs(base / "certs"), workers=1, extra=["--metrics-auth"],
                    env_extra={"KUBECONFIG": str(kubeconfig)})
    try:
        server.wait_ready(timeout=60)
        yield server, {"reader": token("monitoring", "prometheus"), "user": token(NS, "curious")}
    finally:
        server.stop()
        for obj in made:
            http.delete(obj)


def test_the_metrics_port_answers_only_a_token_authorized_for_metrics(guarded, cluster):
    """Issue 33: /metrics and /readyz's detail answered anyone who reached the webhook port. Now the webhook port
    has no /metrics and a bare /readyz; the metrics port refuses a caller without a token or with one the apiserver
    does not authenticate (401), and an authenticated user not allowed get on /metrics (403), though the
    discovery roles let every user get /readyz; Prometheus's account, bound to deploy/monitoring's reader role, reads
    both. On main the server did not start with these flags, and its webhook port served /metrics to anyone."""
    server, tokens = guarded
    webhook = server.client(keep_alive=False)
    assert webhook.request("GET", "/metrics")[0] == 404
    status, body = webhook.request("GET", "/readyz")
    assert status == 200 and body == b'{"status":"ready"}'
    for token, expected in ((None, 401), ("not-a-token", 401), (tokens["user"], 403)):
        for path in ("/metrics", "/readyz"):
            status, body = server.metrics_client(token, keep_alive=False).request("GET", path)
            assert status == expected and b"trainadmit_" not in body and b"cluster" not in body, (path, status, body)
    # the apiserver lets that user get /readyz (system:discovery): authorizing the path asked for would let it in
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {
        "user": f"system:serviceaccount:{NS}:curious", "groups": ["system:serviceaccounts", "system:authenticated"],
        "nonResourceAttributes": {"path": "/readyz", "verb": "get"}}}
    assert cluster.cp.http.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)["status"][
        "allowed"] is True
    reader = server.metrics_client(tokens["reader"], keep_alive=False)
    status, body = reader.request("GET", "/metrics")
    assert status == 200 and b"trainadmit_policy_generation_info" in body
    status, body = reader.request("GET", "/readyz")
    assert status == 200 and b'"cluster"' in body
    refused = [x for x in server.log_lines() if x.get("event") == "metrics_refused"]
    assert {x["status"] for x in refused} == {401, 403}
    assert not any(tokens["user"] in str(x) or tokens["reader"] in str(x) for x in server.log_lines())
