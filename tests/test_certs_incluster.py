"""In-cluster certificate mode against a wire-level fake apiserver (no cluster is available here)."""

from __future__ import annotations

import base64
import datetime as dt

import pytest
from cryptography import x509
from fake_apiserver import FakeAPIServer, path_of
from test_deploy import render

from trainadmit.certs.incluster import CertController

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


@pytest.fixture
def api():
    server = FakeAPIServer()
    for obj in render("default"):
        if obj["kind"].endswith("WebhookConfiguration"):
            server.put_raw(path_of(obj["kind"], obj["metadata"]["name"]), dict(obj))
    yield server
    server.close()


def controller(api, identity, clock):
    core, coordination, admission = api.apis()
    return CertController(core, coordination, admission, identity=identity, clock=lambda: clock[0],
                          log=lambda m: None)


def secret(api) -> dict:
    return api.objects[path_of("Secret", "trainadmit-tls")]


def serving_cert(api) -> x509.Certificate:
    return x509.load_pem_x509_certificate(base64.b64decode(secret(api)["data"]["tls.crt"]))


def test_only_the_lease_holder_writes_and_a_stale_lease_is_taken_over(api):
    clock = [T0]
    a, b = controller(api, "pod-a", clock), controller(api, "pod-b", clock)
    assert a.step() .startswith("created secret")
    assert b.step() == "not the lease holder"
    names = serving_cert(api).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "trainadmit.trainadmit-system.svc" in names.get_values_for_type(x509.DNSName)
    bundle = secret(api)["data"]["ca.crt"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        hooks = api.objects[path_of(kind, "trainadmit")]["webhooks"]
        assert all(h["clientConfig"]["caBundle"] == bundle for h in hooks)
    # pod-a stops renewing; after the lease duration pod-b takes over and keeps things rotated
    clock[0] = T0 + dt.timedelta(seconds=61)
    assert b.step() == "nothing due"
    lease = api.objects[path_of("Lease", "trainadmit-certs")]
    assert lease["spec"]["holderIdentity"] == "pod-b" and lease["spec"]["leaseTransitions"] == 1
    assert a.step() == "not the lease holder"


def test_serving_rotation_and_ca_rotation_through_the_secret(api):
    clock = [T0]
    c = controller(api, "pod-a", clock)
    c.step()
    first = serving_cert(api).serial_number
    clock[0] = T0 + dt.timedelta(days=280)  # inside the 90-day window
    assert "re-issued" in c.step()
    assert serving_cert(api).serial_number != first
    clock[0] = T0 + dt.timedelta(days=3650 - 200)  # the CA enters its window
    message = c.step()
    assert "new CA added to the bundle" in message and "caBundle set on" in message
    bundle = x509.load_pem_x509_certificates(base64.b64decode(secret(api)["data"]["ca.crt"]))
    assert len(bundle) == 2
    hooks = api.objects[path_of("MutatingWebhookConfiguration", "trainadmit")]["webhooks"]
    assert hooks[0]["clientConfig"]["caBundle"] == secret(api)["data"]["ca.crt"]


def test_conflicting_writer_loses_cleanly(api):
    clock = [T0]
    c = controller(api, "pod-a", clock)
    c.step()
    # someone else updates the Secret between our read and our write: 409, retried next pass
    real_replace = c.core.replace_namespaced_secret

    def racing_replace(name, namespace, body):
        api.put_raw(path_of("Secret", name), dict(secret(api)))  # bumps resourceVersion
        return real_replace(name, namespace, body)

    c.core.replace_namespaced_secret = racing_replace
    clock[0] = T0 + dt.timedelta(days=280)
    assert c.step() == "secret changed meanwhile; retrying next pass"
