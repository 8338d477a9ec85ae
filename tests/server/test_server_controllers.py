"""`trainadmit serve --reconcile` on a real kube-apiserver when the loops it was asked to run cannot work:
one line naming the namespace, the Lease and the permission (not a ``NotFoundException()`` every 5 s), and
``/readyz`` degraded (200: admissions stay safe; all replicas unready would refuse every GPU workload) with the
same line until they can; then ready again, and said so, once the cluster is fixed.

Integration tier (``$KUBEBUILDER_ASSETS``): what the apiserver answers (404 for a missing namespace, 403
with its authorizer's message) is the real one.
"""

from __future__ import annotations

import json
import time

import pytest
from support.kube_fixtures import APISERVER, SYSTEM_NS
from support.paths import POLICIES
from support.server import Server, issue_certs, wait_until

from trainadmit.cluster.lease import PLACEMENT_LEASE, PREFLIGHT_STATUS_LEASE, RECONCILER_LEASE

pytestmark = APISERVER
PASS_SECONDS = 5  # cli.serve.start_reconciler's interval


def readiness(server: Server) -> tuple[int, dict]:
    """/readyz's status and body; (0, {}) while the server does not listen yet."""
    try:
        status, body = server.metrics_client(keep_alive=False, timeout=5).request("GET", "/readyz")
    except OSError:
        return 0, {}
    return status, json.loads(body)


def degraded(server: Server, loops: int = 3) -> tuple[int, dict] | None:
    """/readyz once it is degraded by the problems of ``loops`` elected loops."""
    status, body = readiness(server)
    problems = [p for p in body.get("degraded", []) if not p.startswith("unhonoured ")]
    return (status, {**body, "problems": problems}) if status == 200 and len(problems) == loops else None


def lines_of(server: Server, event: str) -> list[str]:
    return [r["message"] for r in server.log_lines() if r.get("event") == event]


def serve_reconcile(policy_dir, tmp_path, namespace: str, kubeconfig) -> Server:
    return Server(policy_dir, issue_certs(tmp_path / "certs"), workers=1,
                  extra=["--reconcile", "--namespace", namespace],
                  env_extra={"KUBECONFIG": str(kubeconfig), "POD_NAME": "trainadmit-under-test"})


def test_a_missing_namespace_is_named_once_and_keeps_the_server_degraded_until_it_exists(cluster, tmp_path):
    namespace = f"trainadmit-late-{int(time.time())}"
    server = serve_reconcile(POLICIES, tmp_path, namespace, cluster.cp.kubeconfig)  # as an admin
    with server:
        _, body = wait_until(lambda: degraded(server), 60, "/readyz did not report the three loops")
        for name, lease in (("reconciler", RECONCILER_LEASE), ("preflight-status", PREFLIGHT_STATUS_LEASE),
                            ("placement", PLACEMENT_LEASE)):
            problem = next(p for p in body["problems"] if p.startswith(f"{name}: "))
            assert f"namespace {namespace} does not exist" in problem and f"Lease {namespace}/{lease}" in problem
            assert "--namespace or $POD_NAMESPACE" in problem
        time.sleep(2 * PASS_SECONDS + 1)  # two more passes fail the same way: nothing more is logged
        for name in ("reconciler", "preflight-status", "placement"):
            said = lines_of(server, name)
            assert len(said) == 1 and f"namespace {namespace} does not exist" in said[0], said
        cluster.cp.ensure_namespace(namespace)
        wait_until(lambda: degraded(server, 0), 4 * PASS_SECONDS, "still degraded after the namespace appeared")
        server.wait_log(lambda r: r.get("event") == "reconciler" and r.get("message") == "reconciler: working again")
        lease = cluster.http.get_or_none("coordination.k8s.io/v1", "Lease", RECONCILER_LEASE, namespace)
        assert lease and lease["spec"]["holderIdentity"] == "trainadmit-under-test"
    assert server.proc.returncode == 0


def test_a_lease_the_service_account_may_not_use_is_named_with_the_permission(cluster, tmp_path):
    """deploy/'s Role grants the Leases in trainadmit-system only: run in another namespace, the
    ServiceAccount is refused by the real authorizer, and the server says which Lease and what to grant."""
    other = "team-nlp"
    kubeconfig = cluster.cp.service_account_kubeconfig(tmp_path / "kubeconfig", SYSTEM_NS, "trainadmit")
    server = serve_reconcile(POLICIES, tmp_path, other, kubeconfig)
    with server:
        _, body = wait_until(lambda: degraded(server), 60, "/readyz did not report the three loops")
        problem = next(p for p in body["problems"] if p.startswith("reconciler: "))
        assert f"not allowed to use the Lease {other}/{RECONCILER_LEASE}" in problem
        assert f"grant get and update on leases.coordination.k8s.io named {RECONCILER_LEASE}" in problem
        assert "system:serviceaccount:trainadmit-system:trainadmit" in problem  # the apiserver's own message
        [said] = lines_of(server, "reconciler")
        assert said == f"reconciler: {problem.split(': ', 1)[1]}"


@pytest.fixture(autouse=True)
def _no_lease_left(cluster):
    yield
    for name in (RECONCILER_LEASE, PREFLIGHT_STATUS_LEASE, PLACEMENT_LEASE):
        cluster.http.delete({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                             "metadata": {"name": name, "namespace": SYSTEM_NS}})
