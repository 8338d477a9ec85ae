"""Certificate lifecycle with an injected clock: issue, renewal windows, two-phase CA rotation, check."""

from __future__ import annotations

import datetime as dt
import socket
import ssl
import stat
import threading

import pytest
from cryptography import x509

from trainadmit.certs import pki

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def issued(tmp_path):
    return pki.issue(tmp_path, "trainadmit", "trainadmit-system", now=T0)


def test_issue_writes_service_names_ecdsa_and_private_keys(tmp_path):
    d = issued(tmp_path)
    cert = d.serving()
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert names[:2] == ["trainadmit.trainadmit-system.svc", "trainadmit.trainadmit-system.svc.cluster.local"]
    assert cert.public_key().curve.name == "secp256r1"
    assert stat.S_IMODE(d.tls_key.stat().st_mode) == 0o600 and stat.S_IMODE(d.ca_key.stat().st_mode) == 0o600
    assert cert.not_valid_after_utc - T0 == dt.timedelta(days=365)
    assert d.bundle()[0].not_valid_after_utc - T0 == dt.timedelta(days=3650)


def test_renewal_windows(tmp_path):
    d = issued(tmp_path)
    serial = d.serving().serial_number
    assert pki.rotate(tmp_path, now=T0 + dt.timedelta(days=200)).reason == "nothing due"
    assert d.serving().serial_number == serial
    result = pki.rotate(tmp_path, now=T0 + dt.timedelta(days=276))  # 89 days left < 90-day window
    assert result.rotated_serving and d.serving().serial_number != serial
    assert not pki.rotate(tmp_path, now=T0 + dt.timedelta(days=276),
                          serving_renew_before=dt.timedelta(days=30)).rotated_serving


def test_ca_rotation_keeps_both_cas_through_the_overlap(tmp_path):
    d = pki.issue(tmp_path, "trainadmit", "trainadmit-system", now=T0, serving_days=3600)
    old_ca = d.bundle()[0]
    t = T0 + dt.timedelta(days=3650 - 300)  # CA within its 1-year window
    first = pki.rotate(tmp_path, now=t)
    assert first.rotated_ca and len(d.bundle()) == 2
    assert d.serving().issuer == old_ca.subject  # serving unchanged until the new bundle has spread
    assert not pki.rotate(tmp_path, now=t + dt.timedelta(days=3)).rotated_serving  # overlap not over
    second = pki.rotate(tmp_path, now=t + dt.timedelta(days=8))
    assert second.rotated_serving and d.serving().issuer != old_ca.subject and len(d.bundle()) == 2
    third = pki.rotate(tmp_path, now=t + dt.timedelta(days=9))
    assert third.dropped_old_ca and len(d.bundle()) == 1 and d.bundle()[0].subject == d.serving().issuer


def test_the_old_ca_stays_until_every_server_serves_the_new_certificate(tmp_path):
    """The in-cluster controller runs every 30 s: the pass after the serving certificate moved to the new CA
    must not drop the old one, while the kubelet has not yet projected the moved certificate into every
    replica (a minute or more) and they still serve the one only the old CA trusts."""
    d = pki.issue(tmp_path, "trainadmit", "trainadmit-system", now=T0, serving_days=3600)
    t = T0 + dt.timedelta(days=3650 - 300)
    assert pki.rotate(tmp_path, now=t).rotated_ca
    moved = t + dt.timedelta(days=8)
    assert pki.rotate(tmp_path, now=moved).rotated_serving
    next_pass = pki.rotate(tmp_path, now=moved + dt.timedelta(seconds=30))
    assert not next_pass.dropped_old_ca and len(d.bundle()) == 2, next_pass.reason
    assert "stays in the bundle" in next_pass.reason
    settled = pki.rotate(tmp_path, now=moved + pki.SERVING_SETTLE)
    assert settled.dropped_old_ca and len(d.bundle()) == 1 and d.bundle()[0].subject == d.serving().issuer


def test_check_reports_days_chain_and_names(tmp_path):
    issued(tmp_path)
    ok = pki.check(tmp_path, ["trainadmit.trainadmit-system.svc"], now=T0 + dt.timedelta(days=10))
    assert ok.ok and any("355 days left" in line for line in ok.lines)
    soon = pki.check(tmp_path, [], now=T0 + dt.timedelta(days=300))
    assert soon.ok and any("within 90 days" in line for line in soon.lines)
    expired = pki.check(tmp_path, [], now=T0 + dt.timedelta(days=400))
    assert not expired.ok and any("EXPIRED" in line for line in expired.lines)
    wrong = pki.check(tmp_path, ["other.default.svc"], now=T0)
    assert not wrong.ok and any("other.default.svc: MISSING" in line for line in wrong.lines)


def _handshake(cert_dir, ca_file, server_name):
    """A real TLS handshake: a server with the cert dir's pair, a client trusting ``ca_file``."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert_dir / "tls.crt", cert_dir / "tls.key")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve():
        conn, _ = listener.accept()
        try:
            server_ctx.wrap_socket(conn, server_side=True).close()
        except (ssl.SSLError, OSError):
            conn.close()

    t = threading.Thread(target=serve)
    t.start()
    client_ctx = ssl.create_default_context(cafile=str(ca_file))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
                client_ctx.wrap_socket(raw, server_hostname=server_name):
            pass
    finally:
        t.join(5)
        listener.close()


def test_real_handshakes_by_service_name_and_refusals(tmp_path):
    pki.issue(tmp_path / "a", "trainadmit", "trainadmit-system")
    pki.issue(tmp_path / "b", "trainadmit", "trainadmit-system")
    _handshake(tmp_path / "a", tmp_path / "a" / "ca.crt", "trainadmit.trainadmit-system.svc")
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(tmp_path / "a", tmp_path / "a" / "ca.crt", "evil.default.svc")
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(tmp_path / "a", tmp_path / "b" / "ca.crt", "trainadmit.trainadmit-system.svc")


def test_the_certificate_controller_imports_neither_engine_nor_policy():
    """The in-cluster certificate controller needs its Lease's name, not the engine and the policy models
    (about 130 ms of imports when the name came through ``cluster.access``)."""
    import subprocess
    import sys

    code = "import sys, trainadmit.certs.incluster; print(' '.join(sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    heavy = ("trainadmit.engine", "trainadmit.policy", "pydantic")
    assert not [m for m in loaded if m.startswith(heavy)]


# ---- the certificate commands never destroy or accept garbage silently ----------------------------

def test_issue_refuses_to_replace_an_existing_ca_without_force(tmp_path):
    from support.cli import run_cli

    assert run_cli("certs", "issue", "--out", str(tmp_path)).returncode == 0
    key = (tmp_path / "ca.key").read_bytes()
    again = run_cli("certs", "issue", "--out", str(tmp_path))
    assert again.returncode == 2 and f"{tmp_path / 'ca.key'} exists" in again.stderr and "--force" in again.stderr
    assert (tmp_path / "ca.key").read_bytes() == key
    assert run_cli("certs", "issue", "--out", str(tmp_path), "--force").returncode == 0
    assert (tmp_path / "ca.key").read_bytes() != key


@pytest.mark.parametrize("content, message", [
    (b"\x8f\x00random bytes\xff" * 20, "not a PEM certificate"),
    (b"just some text\n", "not a PEM certificate"),
    (b"", "empty"),
    (b"-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n", "not a readable PEM certificate"),
])
def test_inject_ca_refuses_what_is_not_a_pem_ca_bundle(tmp_path, content, message):
    from support.cli import run_cli

    bad = tmp_path / "bundle.pem"
    bad.write_bytes(content)
    r = run_cli("certs", "inject-ca", "--ca", str(bad), stdin="kind: ValidatingWebhookConfiguration\n")
    assert r.returncode == 2 and f"--ca {bad}: {message}" in r.stderr and r.stdout == ""


def test_inject_ca_refuses_a_serving_certificate(tmp_path):
    from support.cli import run_cli

    issued(tmp_path)
    r = run_cli("certs", "inject-ca", "--ca", str(tmp_path / "tls.crt"), stdin="kind: MutatingWebhookConfiguration\n")
    assert r.returncode == 2 and "is not a CA certificate" in r.stderr


def test_certificate_inputs_are_one_line_errors(tmp_path):
    from support.cli import run_cli

    r = run_cli("certs", "issue", "--ip", "not-an-ip", "--out", str(tmp_path / "x"))
    assert r.returncode == 2 and "--ip 'not-an-ip' is not an IPv4 or IPv6 address" in r.stderr
    assert not (tmp_path / "x").exists()
    (tmp_path / "empty").mkdir()
    r = run_cli("certs", "rotate", "--dir", str(tmp_path / "empty"))
    assert r.returncode == 2 and "no CA key pair or serving certificate to rotate" in r.stderr
    r = run_cli("certs", "inject-ca", "--ca", str(tmp_path / "none.crt"))
    assert r.returncode == 2 and "no such file" in r.stderr


def test_certs_check_lists_the_names_it_promises(tmp_path):
    from support.cli import run_cli

    pki.issue(tmp_path, "trainadmit", "trainadmit-system", extra_names=["hook.example.com"], ips=["10.0.0.7"])
    out = run_cli("certs", "check", "--dir", str(tmp_path)).stdout
    assert ("names: trainadmit.trainadmit-system.svc, trainadmit.trainadmit-system.svc.cluster.local, "
            "trainadmit.trainadmit-system, trainadmit, hook.example.com, 10.0.0.7") in out
