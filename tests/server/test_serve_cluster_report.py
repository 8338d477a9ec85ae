"""`trainadmit serve` says which cluster it decides for: one log line at startup, `/readyz`'s ``cluster`` detail
and a gauge, for every Platform setting the cluster cannot honour (here: the Volcano backend on the real 1.36
apiserver's discovery, which serves no Volcano CRD), and decisions follow gang.unavailable for it instead of
refusing the Job. Without a cluster view the line says what auto assumes. Real server processes."""

from __future__ import annotations

import json

import pytest
import yaml
from support.manifests import load_yaml
from support.paths import EXAMPLES, FIXTURES
from support.policies import write_policy
from support.server import Server, issue_certs

API = FIXTURES / "apiserver"


def _wrap(obj: dict) -> dict:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "operation": "CREATE", "namespace": obj["metadata"]["namespace"],
                        "kind": {"group": "batch", "version": "v1", "kind": "Job"},
                        "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
                        "object": obj, "userInfo": {"username": "alice"}}}


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return issue_certs(tmp_path_factory.mktemp("report-certs"))


def test_an_explicit_backend_the_cluster_does_not_serve_is_reported_three_ways_and_admitted(certs, tmp_path):
    snapshot = tmp_path / "discovery.yaml"
    snapshot.write_text(yaml.safe_dump_all([json.loads((API / "apis-1.36-plain.json").read_text()),
                                            json.loads((API / "version-1.36.json").read_text())]))
    policy = write_policy(tmp_path / "policy", {"gang": {"backend": "volcano"}})
    with Server(policy, certs, workers=1, extra=["--cluster", str(snapshot)], log=tmp_path / "server.log") as server:
        server.wait_ready()
        [line] = [x for x in server.log_lines() if x.get("event") == "setting_unhonoured"]
        assert line["setting"] == "Platform.spec.gang.backend"
        assert line["message"] == ("Platform.spec.gang.backend is volcano; the gang backend volcano needs "
                                   "scheduling.volcano.sh/v1beta1 (Volcano), which this cluster does not serve")
        [cluster] = [x for x in server.log_lines() if x.get("event") == "cluster"]
        assert cluster["kubernetes_version"] == "1.36" and cluster["gang_backend"] == "none"
        status, body = server.metrics_client(keep_alive=False).request("GET", "/readyz")
        detail = json.loads(body)["cluster"]
        assert status == 200 and detail["gangBackend"] == "none" and detail["versionFrom"] == "cluster"
        assert [u["setting"] for u in detail["unhonoured"]] == ["gang.backend"]
        assert server.metric('trainadmit_policy_setting_unhonoured{setting="gang.backend"}') == 1.0
        assert server.metric('trainadmit_policy_setting_unhonoured{setting="kubernetesVersion"}') == 0.0
        status, reply = server.client().post_review("/mutate", _wrap(load_yaml(EXAMPLES / "llama-pretrain.yaml")[0]))
        response = reply["response"]  # type: ignore[index]
        assert status == 200 and response["allowed"] is True
        assert any(w.startswith("trainadmit note [gang.unavailable] metadata: its 4 Pods may start one by one: the gang "
                                "backend volcano needs") for w in response["warnings"]), response["warnings"]


def test_without_a_cluster_view_the_startup_line_says_what_auto_assumes(certs, tmp_path):
    policy = write_policy(tmp_path / "policy")
    with Server(policy, certs, workers=1, log=tmp_path / "server.log") as server:
        server.wait_ready()
        [cluster] = [x for x in server.log_lines() if x.get("event") == "cluster"]
        assert cluster["assumed"] == ("without the cluster's discovery (/version, /apis) auto assumed Kubernetes 1.37 "
                                      "with its Workload API (scheduling.k8s.io/v1beta1) served")
        assert "no cluster view" in cluster["note"]
        # the bundled default's native gang in pod-group mode needs the reconciler, which this serve does not run
        [warning] = [x for x in server.log_lines() if x.get("event") == "setting_unhonoured"]
        assert warning["setting"] == "--reconcile" and "native/pod-group" in warning["message"]
        _, body = server.metrics_client(keep_alive=False).request("GET", "/readyz")
        assert json.loads(body)["cluster"]["assumed"] == cluster["assumed"]
