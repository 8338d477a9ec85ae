"""Certificates through a real kube-apiserver: `certs inject-ca --apply` and the in-cluster certificate
controller (two Lease-elected replicas, as trainadmit's ServiceAccount with the in-cluster-certs overlay's RBAC,
under its ValidatingAdmissionPolicy fence), on the live webhook configurations that point at the running trainadmit
server."""

from __future__ import annotations

import base64
import datetime as dt

import pytest
from cryptography import x509
from support.builders import job
from support.cli import run_cli
from support.controlplane import load_manifests, wait_until
from support.kube_fixtures import APISERVER, SYSTEM_NS, TEAM_NAMESPACES, WEBHOOK_NAMES
from support.paths import ROOT

from trainadmit.certs import pki
from trainadmit.certs.incluster import SECRET, CertController
from trainadmit.cluster.lease import CERTS_LEASE

pytestmark = APISERVER
KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def bundles(http) -> set[str]:
    return {w["clientConfig"]["caBundle"] for kind in KINDS
            for w in http.get("admissionregistration.k8s.io/v1", kind, "trainadmit")["webhooks"]}


@pytest.fixture
def restore_ca(webhook, cluster):
    """Whatever a test injects, trainadmit's test CA is put back and the webhooks answer again afterwards."""
    yield
    from kubernetes import client

    from trainadmit.certs.inject import inject_live

    inject_live(client.AdmissionregistrationV1Api(cluster.cp.api_client()),
                (webhook.server.cert_dir / "ca.crt").read_bytes())
    probe = job(name="ca-probe", namespace=TEAM_NAMESPACES[0], workers=1)
    cluster.cp.wait_webhooks_active(probe, WEBHOOK_NAMES, timeout=60)


def test_inject_ca_apply_sets_a_two_ca_bundle_and_the_webhooks_keep_answering(webhook, cluster, restore_ca,
                                                                             tmp_path, monkeypatch):
    http = cluster.http
    ours = (webhook.server.cert_dir / "ca.crt").read_bytes()
    new = pki.issue(tmp_path / "next", "trainadmit", SYSTEM_NS)
    bundle = tmp_path / "bundle.crt"
    bundle.write_bytes(ours + (tmp_path / "next" / "ca.crt").read_bytes())  # both trusted through a CA rotation
    assert new.serving() is not None
    monkeypatch.setenv("KUBECONFIG", str(cluster.cp.kubeconfig))
    r = run_cli("certs", "inject-ca", "--ca", str(bundle), "--apply")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"{kind}/trainadmit: caBundle set on 1 webhook(s)" for kind in KINDS]
    assert bundles(http) == {base64.b64encode(bundle.read_bytes()).decode()}
    stored = http.create(job(name="after-inject", namespace="team-nlp", workers=2), dry_run=True)
    assert "trainadmit.io/applied" in stored["metadata"]["annotations"]  # mutated: the apiserver trusts us
    assert run_cli("certs", "inject-ca", "--ca", str(bundle), "--apply").stdout.strip() == "caBundle already current"


def _controllers(cluster, tmp_path, clock):
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(cluster.cp.service_account_kubeconfig(
        tmp_path / "sa", SYSTEM_NS, "trainadmit")))
    return [CertController(client.CoreV1Api(api), client.CoordinationV1Api(api), client.AdmissionregistrationV1Api(api),
                           identity=name, clock=lambda: clock[0], log=lambda m: None) for name in ("pod-a", "pod-b")]


IN_CLUSTER_CERTS = ROOT / "deploy" / "overlays" / "in-cluster-certs"


@pytest.fixture
def clean_certs(cluster):
    """The in-cluster-certs overlay's RBAC and its fence (the default overlay's account may write neither its
    webhook configurations nor Secrets) for the test; removed with what the controller wrote."""
    objs = load_manifests(IN_CLUSTER_CERTS / "rbac-certs.yaml", IN_CLUSTER_CERTS / "fence-certs.yaml")
    cluster.cp.apply(objs)
    wait_until(lambda: cluster.cp.can_i(f"system:serviceaccount:{SYSTEM_NS}:trainadmit", "create", "secrets",
                                        namespace=SYSTEM_NS), timeout=30, what="the in-cluster-certs RBAC to apply")
    yield
    for obj in objs:
        cluster.http.delete(obj)
    for kind, name in (("Secret", SECRET), ("Lease", CERTS_LEASE)):
        cluster.http.delete({"apiVersion": "v1" if kind == "Secret" else "coordination.k8s.io/v1", "kind": kind,
                             "metadata": {"name": name, "namespace": SYSTEM_NS}})


def _secret(http) -> dict:
    return http.get("v1", "Secret", SECRET, SYSTEM_NS)


def test_controller_replicas_create_rotate_and_take_over_as_the_service_account(cluster, restore_ca, clean_certs,
                                                                                tmp_path):
    http = cluster.http
    t0 = dt.datetime.now(dt.UTC)
    clock = [t0]
    a, b = _controllers(cluster, tmp_path, clock)
    assert a.step().startswith("created secret")
    assert b.step() == "not the lease holder"
    secret = _secret(http)
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "trainadmit.trainadmit-system.svc" in names.get_values_for_type(x509.DNSName)
    assert bundles(http) == {secret["data"]["ca.crt"]}
    clock[0] = t0 + dt.timedelta(seconds=61)  # pod-a stops renewing; pod-b takes over
    assert b.step() == "nothing due"
    lease = http.get("coordination.k8s.io/v1", "Lease", CERTS_LEASE, SYSTEM_NS)
    assert lease["spec"]["holderIdentity"] == "pod-b" and lease["spec"]["leaseTransitions"] == 1
    assert a.step() == "not the lease holder"
    first = cert.serial_number
    clock[0] = t0 + dt.timedelta(days=280)  # inside the serving certificate's renewal window
    assert "re-issued" in b.step()
    assert x509.load_pem_x509_certificate(base64.b64decode(_secret(http)["data"]["tls.crt"])).serial_number != first
    clock[0] = t0 + dt.timedelta(days=3650 - 200)  # the CA enters its window: both CAs in the bundle
    message = b.step()
    assert "new CA added to the bundle" in message and "caBundle set on" in message
    assert len(x509.load_pem_x509_certificates(base64.b64decode(_secret(http)["data"]["ca.crt"]))) == 2
    assert bundles(http) == {_secret(http)["data"]["ca.crt"]}


def test_a_conflicting_writer_loses_cleanly(cluster, restore_ca, clean_certs, tmp_path):
    http = cluster.http
    t0 = dt.datetime.now(dt.UTC)
    clock = [t0]
    c, _ = _controllers(cluster, tmp_path, clock)
    c.step()
    real_replace = c.core.replace_namespaced_secret

    def racing_replace(name, namespace, body):  # someone else writes between our read and our write
        current = _secret(http)
        current["metadata"].setdefault("annotations", {})["touched-by"] = "someone-else"
        http.replace(current)
        return real_replace(name, namespace, body)

    c.core.replace_namespaced_secret = racing_replace
    clock[0] = t0 + dt.timedelta(days=280)
    assert c.step() == "secret changed meanwhile; retrying next pass"
    assert _secret(http)["metadata"]["annotations"]["touched-by"] == "someone-else"  # not overwritten
