"""deploy/: every rendered manifest is valid for Kubernetes 1.37; the safety properties are asserted."""

from __future__ import annotations

import base64
import shutil
import subprocess
import sys
from functools import cache

import pytest
import yaml
from support.builders import with_gpus
from support.manifests import load_yaml, review
from support.paths import EXAMPLES, FIXTURES, ROOT
from support.permissions import declared
from support.schemas import schema_errors

from trainadmit.engine import match
from trainadmit.engine.workloads import ADAPTERS, InheritedTemplate, adapter_for, capable

OVERLAYS = ["default", "cert-manager", "in-cluster-certs"]
CERT_MANAGER_KINDS = {"Issuer", "Certificate"}  # CRDs: not in the Kubernetes schemas
EXEMPT = {"kube-system", "kube-public", "kube-node-lease", "trainadmit-system"}


@cache
def render(overlay: str) -> tuple:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl (with kustomize) is needed to render deploy/overlays"
    out = subprocess.run([kubectl, "kustomize", str(ROOT / "deploy" / "overlays" / overlay)],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    return tuple(d for d in yaml.safe_load_all(out) if d)


def one(objs, kind, name="trainadmit"):
    [obj] = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_manifest_is_valid_for_1_37(overlay):
    objs = render(overlay)
    kinds = {o["kind"] for o in objs}
    assert {"Namespace", "ServiceAccount", "ClusterRole", "Deployment", "PodDisruptionBudget", "Service",
            "ConfigMap", "PriorityClass", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} <= kinds
    for obj in objs:
        if obj["kind"] in CERT_MANAGER_KINDS:
            assert overlay == "cert-manager"
            continue
        assert schema_errors(obj) == [], f"{obj['kind']}/{obj['metadata']['name']}"


def test_deployment_is_replicated_and_restricted():
    dep = one(render("default"), "Deployment")
    spec = dep["spec"]["template"]["spec"]
    assert dep["spec"]["replicas"] == 3
    assert spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0][
        "podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    [c] = spec["containers"]
    sc = c["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["runAsNonRoot"] is True
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "https", "scheme": "HTTPS"}
    # /metrics and the detailed /readyz on a port of their own, for authorized tokens only; the probes stay on the
    # webhook port, which answers them with a bare status
    assert "--metrics-bind-address=:8444" in c["args"] and "--metrics-auth" in c["args"]
    assert {"name": "metrics", "containerPort": 8444, "protocol": "TCP"} in c["ports"]
    metrics = one(render("default"), "Service", "trainadmit-metrics")
    assert metrics["spec"]["ports"] == [{"name": "metrics", "port": 8444, "targetPort": "metrics", "protocol": "TCP"}]
    assert metrics["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert [p["port"] for p in one(render("default"), "Service")["spec"]["ports"]] == [443]
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert set(c["resources"]["requests"]) == {"cpu", "memory"} and set(c["resources"]["limits"]) == {"cpu", "memory"}
    assert c["args"][0] == "serve"
    pdb = one(render("default"), "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 2
    assert pdb["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]


def _bound_roles(objs) -> list[tuple[dict, bool]]:
    """Every role bound to trainadmit's ServiceAccount, and whether it is namespaced."""
    out = []
    for binding_kind, kind, namespaced in (("ClusterRoleBinding", "ClusterRole", False), ("RoleBinding", "Role", True)):
        for binding in (o for o in objs if o["kind"] == binding_kind):
            if any(s.get("kind") == "ServiceAccount" and s["name"] == "trainadmit" for s in binding["subjects"]):
                out.append((one(objs, kind, binding["roleRef"]["name"]), namespaced))
    return out


def _granted(objs) -> set[tuple]:
    """(group, resource, verb, name or "", namespaced) for every rule of trainadmit's roles."""
    out = set()
    for role, namespaced in _bound_roles(objs):
        for rule in role["rules"]:
            for g in rule["apiGroups"]:
                for r in rule["resources"]:
                    for v in rule["verbs"]:
                        for n in rule.get("resourceNames") or [""]:
                            out.add((g, r, v, n, namespaced))
    return out


def test_in_cluster_certs_rbac_adds_exactly_the_certificate_controllers_calls():
    granted = _granted(render("in-cluster-certs"))
    assert granted == declared(certs=True)
    assert granted - _granted(render("default")) == declared(True) - declared(False)


def test_rbac_grants_exactly_what_the_code_calls():
    objs = render("default")
    calls = declared(certs=False)  # --manage-certs is the in-cluster-certs overlay's
    granted = _granted(objs)
    assert granted - calls == set(), "deploy/base/rbac.yaml grants more than the server calls"
    assert calls - granted == set(), "deploy/base/rbac.yaml lacks what the server calls"
    # no write on its webhook configurations, and no Secret at all, outside the in-cluster-certs overlay
    assert not {g for g in granted if g[1].endswith("webhookconfigurations") or g[1] == "secrets"}
    cluster = one(objs, "ClusterRole")
    assert not any("*" in rule["verbs"] or "*" in rule["resources"] for rule in cluster["rules"])
    writes = {(g, r, v) for (g, r, v, _, ns) in granted if v in ("create", "update", "patch", "delete") and not ns}
    assert {(g, r) for g, r, _ in writes if r != "podgroups"} == {
        # the preflight status: an annotation on the workloads whose Pods it reads, and Events
        ("batch", "jobs"), ("kubeflow.org", "pytorchjobs"), ("kubeflow.org", "mpijobs"), ("kubeflow.org", "tfjobs"),
        ("kubeflow.org", "paddlejobs"), ("ray.io", "rayclusters"), ("batch.volcano.sh", "jobs"), ("", "events"),
        # the reconciler: the budgets' ResourceQuota, and one report per namespace
        ("", "resourcequotas"), ("openreports.io", "reports"), ("wgpolicyk8s.io", "policyreports"),
        # the placement gate's ungater: a gated Pod's domain and its gate lifted (fenced by fence-pods.yaml)
        ("", "pods"),
        # the metrics port's filter (--metrics-auth): reviews the apiserver answers and never stores
        ("authentication.k8s.io", "tokenreviews"), ("authorization.k8s.io", "subjectaccessreviews")}
    # a ResourceQuota and a report are changed or deleted by name only: the ones trainadmit writes
    for resource, name in (("resourcequotas", "trainadmit-gpu-budget"), ("reports", "trainadmit"),
                           ("policyreports", "trainadmit")):
        assert {n for (g, r, v, n, ns) in granted if r == resource and v in ("update", "delete")} == {name}
    # workloads are only patched (never created, replaced or deleted); Events only created; PodGroups created,
    # and patched to a resized workload's size
    assert {v for g, r, v in writes if r == "events"} == {"create"}
    assert {v for g, r, v in writes if r == "podgroups"} == {"create", "patch"}
    assert {v for g, r, v in writes if r in ("jobs", "pytorchjobs", "mpijobs", "tfjobs", "paddlejobs",
                                             "rayclusters")} == {"patch"}
    assert not [r for r in cluster["rules"] if "admissionregistration.k8s.io" in r["apiGroups"]]
    role = one(objs, "Role")
    assert all(r["resources"] == ["leases"] for r in role["rules"])


def test_every_podgroup_the_engine_asks_for_is_in_the_reconcilers_rbac(tmp_path):
    from support.policies import BACKENDS, write_policy

    from trainadmit.cluster.access import PODGROUP_GROUPS
    from trainadmit.cluster.reconciler import PLURALS
    from trainadmit.engine import Request, decide, load_policy

    seen = set()
    for name, platform in BACKENDS.items():
        policy = load_policy(write_policy(tmp_path / name, platform))
        for obj in _objects():
            for companion in decide(policy, Request(obj, namespace="team-nlp")).companions:
                seen.add((companion["apiVersion"].split("/")[0], companion["kind"]))
    assert seen, "the backends ask for PodGroups"
    assert {g for g, _ in seen} <= set(PODGROUP_GROUPS) and {k for _, k in seen} <= set(PLURALS)


def test_priority_classes_are_current_and_cover_every_tier(policy):
    generated = subprocess.run([sys.executable, "-m", "trainadmit.cli", "policy", "priorityclasses", "policies"],
                               capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert (ROOT / "deploy" / "base" / "priorityclasses.yaml").read_text() == generated, \
        "run: trainadmit policy priorityclasses policies > deploy/base/priorityclasses.yaml"
    installed = {o["metadata"]["name"]: o for o in render("default") if o["kind"] == "PriorityClass"}
    assert set(installed) == {t.className for t in policy.tiers.values()}
    for tier in policy.tiers.values():
        pc = installed[tier.className]
        assert (pc["value"], pc["preemptionPolicy"], pc["globalDefault"]) == (tier.value, tier.preemptionPolicy, False)
        assert "namespace" not in pc["metadata"]  # cluster-scoped: kustomize must not namespace it


def _webhooks(overlay="default"):
    objs = render(overlay)
    return one(objs, "MutatingWebhookConfiguration")["webhooks"][0], one(objs, "ValidatingWebhookConfiguration")["webhooks"][0]


def test_webhook_configurations_are_narrow_and_bounded():
    mutating, validating = _webhooks()
    for wh in (mutating, validating):
        assert wh["admissionReviewVersions"] == ["v1"]
        assert wh["sideEffects"] == "None"
        assert 1 <= wh["timeoutSeconds"] <= 5
        assert wh["failurePolicy"] in ("Fail", "Ignore")
        expr = wh["namespaceSelector"]["matchExpressions"][0]
        assert expr["key"] == "kubernetes.io/metadata.name" and expr["operator"] == "NotIn"
        assert set(expr["values"]) == EXEMPT
        resources = {(g, r) for rule in wh["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
        # templates other workloads inherit (Trainer's runtimes) are validated, never mutated
        # and a LeaderWorkerSet's StatefulSets, whose provenance annotation only LWS's controller may write, and the
        # scale subresource of the kinds whose CRD has one (`kubectl scale` is a resize)
        assert resources == {(a.group, a.plural) for a in ADAPTERS
                             if wh is validating or not capable(a, InheritedTemplate)} | (
                                 {("apps", "statefulsets")} | {(a.group, f"{a.plural}/scale") for a in ADAPTERS
                                                               if a.scale_path is not None}
                                 if wh is validating else set())
        scopes = {(r, rule["scope"]) for rule in wh["rules"] for r in rule["resources"]}
        assert all(scope == ("Namespaced" if a.namespaced else "Cluster") for a in ADAPTERS
                   for r, scope in scopes if r == a.plural)
        assert wh["clientConfig"]["service"]["namespace"] == "trainadmit-system"
    assert mutating["reinvocationPolicy"] == "IfNeeded"
    assert mutating["clientConfig"]["service"]["path"] == "/mutate"
    assert validating["clientConfig"]["service"]["path"] == "/validate"
    assert {op for r in mutating["rules"] for op in r["operations"]} == {"CREATE"}
    assert {op for r in validating["rules"] for op in r["operations"]} == {"CREATE", "UPDATE"}
    assert all(r["operations"] == ["UPDATE"] for r in validating["rules"] if any("/" in x for x in r["resources"]))
    assert "DELETE" not in {op for r in validating["rules"] for op in r["operations"]}


def test_cert_manager_overlay_injects_the_ca():
    objs = render("cert-manager")
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        assert one(objs, kind)["metadata"]["annotations"] == {
            "cert-manager.io/inject-ca-from": "trainadmit-system/trainadmit-serving"}
    cert = one(objs, "Certificate", "trainadmit-serving")
    assert cert["spec"]["secretName"] == one(objs, "Deployment")["spec"]["template"]["spec"]["volumes"][0][
        "secret"]["secretName"]
    assert "trainadmit.trainadmit-system.svc" in cert["spec"]["dnsNames"]


# ---- matchConditions: compiled with a real CEL runtime, evaluated as the apiserver would ----------


def _cel_env():
    from cel_expr_python import cel

    return cel, cel.NewEnv(variables={"object": cel.Type.DYN, "oldObject": cel.Type.DYN, "request": cel.Type.DYN})


def _selected(programs, obj: dict, username: str = "alice") -> bool:
    adapter = adapter_for(obj.get("apiVersion"), obj.get("kind"))
    data = {"object": obj, "oldObject": None,
            "request": {"resource": {"group": adapter.group, "version": obj["apiVersion"].rsplit("/", 1)[-1],
                                     "resource": adapter.plural}, "operation": "CREATE", "subResource": "",
                        "userInfo": {"username": username, "groups": ["system:authenticated"]}}}
    results = [p.eval(data=data) for p in programs]
    errors = [r.plain_value() for r in results if r.type() == _cel_env()[0].Type.ERROR]
    assert not errors, errors  # an error would apply the failurePolicy: never for a well-formed object
    return all(r.plain_value() is True for r in results)


def _objects():
    out = [d for p in sorted(EXAMPLES.glob("*.yaml")) for d in load_yaml(p)]
    out += [d for p in sorted((FIXTURES / "real-world").glob("*.y*ml")) for d in load_yaml(p)]
    out += [review(n)["request"]["object"] for n in ("job-03-mutate-Job-CREATE.json", "job-05-mutate-Job-CREATE.json",
                                                     "pod-01-mutate-Pod-CREATE.json")]
    pod_of_job = load_yaml(FIXTURES / "admission-reviews" / "submitted-job.yaml")[0]["spec"]["template"]
    out.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "llama-0", "ownerReferences": [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "llama", "uid": "u", "controller": True}]},
        "spec": pod_of_job["spec"]})
    out.append({"apiVersion": "v1", "kind": "Pod", "metadata": {  # a LeaderWorkerSet's Pod, from its StatefulSet
        "name": "vllm-0", "annotations": {"trainadmit.io/applied": "{}"}, "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "vllm", "uid": "u", "controller": True}]},
        "spec": pod_of_job["spec"]})
    ops = FIXTURES / "operators"
    for path in sorted(ops.glob("*/examples/*.yaml")):
        for doc in load_yaml(path):
            if adapter_for(doc.get("apiVersion"), doc.get("kind")) is None:
                continue
            out.append(doc)
            out.append(with_gpus(doc))  # the same custom resource asking for GPUs in every container
    return [o for o in out if adapter_for(o.get("apiVersion"), o.get("kind")) is not None]


@pytest.mark.parametrize("which", ["mutating", "validating"])
def test_match_conditions_compile_and_select_exactly_the_gpu_workloads(policy, which):
    _cel, env = _cel_env()
    wh = _webhooks()[0 if which == "mutating" else 1]
    programs = [env.compile(mc["expression"]) for mc in wh["matchConditions"]]
    assert len(programs) == len(wh["matchConditions"])
    selected = skipped = 0
    # a user, and the controllers that create children: the Job controller, an operator, the StatefulSet
    # controller (a forged ownerReference from a user is decided; the same object from its controller is not)
    users = ("alice", "system:serviceaccount:kube-system:job-controller", "system:kube-controller-manager",
             "system:serviceaccount:kubeflow:training-operator", "system:serviceaccount:kube-system:statefulset-controller")
    children = 0
    for obj in _objects():
        if which == "mutating" and capable(adapter_for(obj["apiVersion"], obj["kind"]), InheritedTemplate):
            continue  # a runtime is only validated (the rules do not send it to /mutate)
        for user in users:
            expected, reason = match(policy, obj, "team-nlp", {"username": user})
            got = _selected(programs, obj, user)
            where = (obj["kind"], obj.get("metadata", {}).get("name"), user)
            if reason.startswith("GPUs not counted"):  # what its Pods ask for is in objects only the server's view holds
                assert got, where
            else:
                assert got == (expected is not None), where
            selected += got
            skipped += not got
            children += user == "alice" and got and bool(obj["metadata"].get("ownerReferences"))
    assert selected >= 30 and skipped >= 30 and children >= 2


def test_webhook_configurations_are_generated_from_the_adapters_and_policy():
    generated = subprocess.run([sys.executable, "-m", "trainadmit.cli", "policy", "webhooks", "policies"],
                               capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert (ROOT / "deploy" / "base" / "webhooks.yaml").read_text() == generated, \
        "regenerate: trainadmit policy webhooks policies > deploy/base/webhooks.yaml"


def test_policy_configmap_is_current():
    generated = subprocess.run([sys.executable, "-m", "trainadmit.cli", "policy", "configmap", "policies"],
                               capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert (ROOT / "deploy" / "base" / "policies.yaml").read_text() == generated, \
        "run: trainadmit policy configmap policies > deploy/base/policies.yaml"


def test_inject_ca_prints_valid_manifests_with_the_bundle(tmp_path):
    from trainadmit.certs import pki

    pki.issue(tmp_path, "trainadmit", "trainadmit-system")
    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(yaml.safe_dump_all(list(render("default"))))
    out = subprocess.run([sys.executable, "-m", "trainadmit.cli", "certs", "inject-ca", "--ca", str(tmp_path / "ca.crt"),
                          str(rendered)], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    bundle = base64.b64encode((tmp_path / "ca.crt").read_bytes()).decode()
    hooks = [d for d in docs if d["kind"].endswith("WebhookConfiguration")]
    assert len(hooks) == 2
    for d in hooks:
        assert all(w["clientConfig"]["caBundle"] == bundle for w in d["webhooks"])
        assert schema_errors(d) == []
    assert len(docs) == len(render("default"))


def test_dockerfile_runs_serve_as_non_root():
    text = (ROOT / "Dockerfile").read_text()
    assert "USER 65532:65532" in text
    assert 'ENTRYPOINT ["trainadmit"]' in text and '"serve"' in text


def test_in_cluster_certs_overlay():
    dep = one(render("in-cluster-certs"), "Deployment")
    spec = dep["spec"]["template"]["spec"]
    assert "--manage-certs" in spec["containers"][0]["args"]
    assert spec["volumes"][0]["secret"] == {"secretName": "trainadmit-tls", "defaultMode": 0o440, "optional": True}
    env = {e["name"] for e in spec["containers"][0]["env"]}
    assert env == {"POD_NAME", "POD_NAMESPACE"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_termination_outlasts_endpoint_propagation_and_the_graceful_drain(overlay):
    """A terminating replica keeps receiving calls until every kube-proxy has dropped it: it sleeps through
    that before SIGTERM, then drains, all inside the grace period (issue 11, row 7)."""
    spec = one(render(overlay), "Deployment")["spec"]["template"]["spec"]
    [c] = spec["containers"]
    pre_stop = c["lifecycle"]["preStop"]["sleep"]["seconds"]
    graceful = int(next(a.split("=", 1)[1] for a in c["args"] if a.startswith("--graceful-timeout=")))
    assert pre_stop >= 10  # EndpointSlice propagation is seconds; more on large clusters
    assert spec["terminationGracePeriodSeconds"] >= pre_stop + graceful + 5


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_network_policy_admits_only_non_pod_addresses_to_the_webhook_port(overlay):
    """The webhook port to node addresses only (the apiserver, the kubelet's probes), the metrics port to the
    monitoring namespace only: on main the monitoring namespace reached the webhook port, where /metrics was."""
    objs = render(overlay)
    policy = one(objs, "NetworkPolicy")
    dep = one(objs, "Deployment")
    assert policy["spec"]["podSelector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    ports = {p["name"]: p["containerPort"] for p in dep["spec"]["template"]["spec"]["containers"][0]["ports"]}
    rules = policy["spec"]["ingress"]
    assert [rule["ports"] for rule in rules] == [[{"port": ports["https"], "protocol": "TCP"}],
                                                 [{"port": ports["metrics"], "protocol": "TCP"}]]
    assert [list(peer) for peer in rules[0]["from"]] == [["ipBlock"]]
    assert [list(peer) for peer in rules[1]["from"]] == [["namespaceSelector"]]
    peers = [peer for rule in rules for peer in rule["from"]]
    assert all(set(peer) in ({"ipBlock"}, {"namespaceSelector"}) for peer in peers)  # never a podSelector-all
    blocks = [peer["ipBlock"] for peer in peers if "ipBlock" in peer]
    assert blocks and all(block["except"] for block in blocks if block["cidr"] == "0.0.0.0/0")  # the Pod network
    namespaces = [peer["namespaceSelector"] for peer in peers if "namespaceSelector" in peer]
    assert namespaces == [{"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}]


def test_every_scale_subresource_of_a_handled_kind_isdeclared():
    """A CRD's scale subresource writes its specReplicasPath: the adapter declares that field (``scale_path``), so that
    `kubectl scale` is sent to /validate and decided as the resize it is."""
    found = {}
    for path in sorted((FIXTURES / "operators").glob("*/crds/*.yaml")):
        for crd in load_yaml(path):
            for version in (crd.get("spec") or {}).get("versions") or []:
                scale = (version.get("subresources") or {}).get("scale")
                adapter = adapter_for(f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])
                if scale and adapter is not None:
                    found[adapter.kind] = tuple(scale["specReplicasPath"].lstrip(".").split("."))
    assert found == {a.kind: a.scale_path for a in ADAPTERS if a.scale_path is not None}
    assert set(found) >= {"PyTorchJob", "PaddleJob", "LeaderWorkerSet"}


def test_the_ci_check_role_grants_exactly_the_lists_check_reads():
    """deploy/ci/check-clusterrole.yaml: what `check --kubeconfig` calls (list only), nothing more."""
    from trainadmit.cluster.listed import PERMISSIONS

    role = yaml.safe_load((ROOT / "deploy" / "ci" / "check-clusterrole.yaml").read_text())
    assert role["kind"] == "ClusterRole"
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}
    assert granted == {(p.group, p.resource, v) for p in PERMISSIONS for v in p.verbs}
    assert {v for _, _, v in granted} == {"list"}
