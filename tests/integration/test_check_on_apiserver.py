"""`trainadmit check --kubeconfig` against a real kube-apiserver: as a CI service account holding only
deploy/ci/check-clusterrole.yaml, it decides exactly as `check --cluster` does on a snapshot of the same
cluster (the API's own lists, saved as `kubectl get -o json` saves them); and `check -o yaml` feeds
`kubectl apply --dry-run=client` only the objects admission would store."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import yaml
from support.cli import run_cli
from support.kube_fixtures import APISERVER
from support.paths import EXAMPLES, FIXTURES, ROOT

from trainadmit.cluster.live import WATCHED

pytestmark = APISERVER
CI_NAMESPACE, CI_ACCOUNT = "ci-check", "pipeline"
INPUTS = [str(EXAMPLES), str(FIXTURES / "real-world" / "gke-ctk-a3ultra-nccl-jobset-example.yaml"),
          str(FIXTURES / "real-world" / "netop-rdma-gpu-test-pod1.yml"),
          str(FIXTURES / "admission-reviews" / "job-03-mutate-Job-CREATE.json")]


def _ci_kubeconfig(cp, tmp_path):
    role = yaml.safe_load((ROOT / "deploy" / "ci" / "check-clusterrole.yaml").read_text())
    cp.ensure_namespace(CI_NAMESPACE, service_accounts=(CI_ACCOUNT,))
    cp.apply([role, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                     "metadata": {"name": "ci-trainadmit-check"},
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                 "name": role["metadata"]["name"]},
                     "subjects": [{"kind": "ServiceAccount", "name": CI_ACCOUNT, "namespace": CI_NAMESPACE}]}])
    return cp.service_account_kubeconfig(tmp_path / "ci-kubeconfig", CI_NAMESPACE, CI_ACCOUNT)


def _snapshot(cp, directory) -> list[str]:
    """The lists a view needs and the served API groups, as the apiserver returns them (typed lists)."""
    from support.controlplane import KubeError

    files = []
    for i, w in enumerate(WATCHED):
        path = f"/api/{w.version}/{w.resource}" if not w.group else f"/apis/{w.group}/{w.version}/{w.resource}"
        try:
            body = cp.http.request("GET", path)
        except KubeError as exc:
            if exc.status == 404 and not w.required:  # a kind whose CRD is not installed
                continue
            raise
        target = directory / f"{i:02d}-{w.resource}.json"
        target.write_text(json.dumps(body))
        files.append(str(target))
    apis = directory / "apis.json"
    apis.write_text(json.dumps(cp.http.request("GET", "/apis")))
    return [*files, str(apis)]


def test_kubeconfig_decides_as_a_snapshot_of_the_same_cluster(control_plane, cluster, tmp_path):
    kubeconfig = _ci_kubeconfig(control_plane, tmp_path)
    snapshot = _snapshot(control_plane, tmp_path)
    live = run_cli("check", "-o", "json", "--kubeconfig", str(kubeconfig), *INPUTS)
    saved = run_cli("check", "-o", "json", *(a for f in snapshot for a in ("--cluster", f)), *INPUTS)
    assert live.returncode == saved.returncode == 1, live.stderr + saved.stderr
    assert json.loads(live.stdout) == json.loads(saved.stdout)
    unviewed = json.loads(run_cli("check", "-o", "json", *INPUTS).stdout)
    # the view was used: with it every referenced object of the cluster is verified, without it none is
    assert any(r["unverified"] for r in unviewed)
    assert not any(r["unverified"] for r in json.loads(live.stdout) if r["allowed"])


def test_kubeconfig_without_the_role_says_which_list_was_refused(control_plane, cluster, tmp_path):
    control_plane.ensure_namespace("ci-unbound", service_accounts=("nobody",))
    kubeconfig = control_plane.service_account_kubeconfig(tmp_path / "kc", "ci-unbound", "nobody")
    r = run_cli("check", "--kubeconfig", str(kubeconfig), str(EXAMPLES))
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "cannot build the cluster view: nodes: 403" in r.stderr and "check-clusterrole.yaml" in r.stderr


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_yaml_output_applies_only_the_admitted_objects(control_plane, cluster, tmp_path):
    # every example but single-node-eval, whose generateName `kubectl apply` refuses by design
    files = [str(p) for p in sorted(EXAMPLES.glob("*.yaml")) if p.name != "single-node-eval.yaml"]
    # decided for this apiserver's version and APIs (its discovery alone: auto picks the PodGroup version it serves)
    discovery = []
    for name in ("apis", "version"):
        (tmp_path / f"{name}.json").write_text(json.dumps(control_plane.http.request("GET", f"/{name}")))
        discovery += ["--cluster", str(tmp_path / f"{name}.json")]
    out = run_cli("check", "-o", "yaml", *discovery, *files).stdout
    # --validate=false: kubectl v1.32 validates against its own schema, which lacks the 1.37 gang fields
    applied = subprocess.run(["kubectl", "--kubeconfig", str(control_plane.kubeconfig), "apply", "--dry-run=client",
                              "--validate=false", "-o", "name", "-f", "-"], input=out, capture_output=True, text=True,
                             timeout=60)
    assert applied.returncode == 0, applied.stderr
    names = sorted(applied.stdout.split())
    # the examples' headers: two admitted, one left alone (no GPU), four denied (never printed)
    assert names == ["job.batch/bert-finetune", "job.batch/llama-pretrain", "job.batch/tokenize",
                     "podgroup.scheduling.k8s.io/bert-finetune-gang", "podgroup.scheduling.k8s.io/llama-pretrain-gang"]
    assert not any(n.endswith(("partial-nodes", "big-vision", "typos", "too-big-for-a-rack")) for n in names)
