"""Issue and rotate the webhook's CA and serving certificate with `cryptography`.

The kube-apiserver verifies the webhook's certificate against the ``caBundle`` of the webhook
configuration and the Service DNS name (``NAME.NAMESPACE.svc``). Rotation keeps old and new CA in
the bundle through an overlap, so an apiserver holding either trusts the serving certificate.
All functions take ``now`` so that expiry windows are tested with an injected clock, not sleeps.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650  # 10 years, as cert-controller (Gatekeeper, Kueue) and Kubewarden do
SERVING_DAYS = 365
SERVING_RENEW_BEFORE = dt.timedelta(days=90)
CA_RENEW_BEFORE = dt.timedelta(days=365)
BACKDATE = dt.timedelta(minutes=5)  # notBefore this far in the past: clocks of the apiservers may lag ours
# After the serving certificate moves to a new CA, how long the old CA stays in the bundle: until every
# server serves the new certificate. A Secret's update reaches a Pod's mount only at the kubelet's next
# sync (every minute by default) plus its cache's delay ("kubelet sync period + cache propagation delay",
# Kubernetes' Secret documentation), and each worker loads the files within a second of their change; the
# in-cluster controller runs every 30 s, and without this wait dropped the old CA on the pass after the
# move, while replicas still served the certificate only the old CA trusts.
SERVING_SETTLE = dt.timedelta(minutes=10)


class CertError(ValueError):
    """A certificate file or request that cannot be used as asked: the message names the file or value
    and what to do (the command line prints it as one line, exit code 2)."""


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def service_names(name: str, namespace: str, extra: list[str] | None = None) -> list[str]:
    """The DNS names the apiserver may use for a webhook Service."""
    names = [f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local", f"{name}.{namespace}", name]
    for e in extra or []:
        if e not in names:
            names.append(e)
    return names


def _key(algorithm: str):
    if algorithm == "ecdsa-p256":
        return ec.generate_private_key(ec.SECP256R1())
    if algorithm == "rsa-2048":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    raise ValueError(f"unknown key algorithm {algorithm!r} (ecdsa-p256, rsa-2048)")


@dataclass(frozen=True)
class KeyPair:
    cert: x509.Certificate
    key: object  # a private key object

    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def key_pem(self) -> bytes:
        return self.key.private_bytes(  # type: ignore[attr-defined]
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def issue_ca(common_name: str = "trainadmit-ca", days: int = CA_DAYS, now: dt.datetime | None = None,
             algorithm: str = "ecdsa-p256") -> KeyPair:
    now = now or utcnow()
    key = _key(algorithm)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{common_name}-{int(now.timestamp())}")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject).issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert, key)


def issue_serving(ca: KeyPair, dns_names: list[str], ips: list[str] | None = None, days: int = SERVING_DAYS,
                  now: dt.datetime | None = None, algorithm: str = "ecdsa-p256") -> KeyPair:
    now = now or utcnow()
    key = _key(algorithm)
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips or []]
    not_after = min(now + dt.timedelta(days=days), ca.cert.not_valid_after_utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0])]))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.cert.public_key()), critical=False)
        .sign(ca.key, hashes.SHA256())  # type: ignore[arg-type]
    )
    return KeyPair(cert, key)


def load_certs(pem: bytes) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(pem) if pem.strip() else []


def ip_addresses(values: list[str]) -> list[str]:
    """``values`` as IP addresses for the serving certificate; a CertError names one that is not."""
    for value in values:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise CertError(f"--ip {value!r} is not an IPv4 or IPv6 address") from None
    return values


def ca_bundle(pem: bytes, source: str) -> list[x509.Certificate]:
    """The CA certificates of a bundle file, every one checked: PEM, X.509, a CA (basicConstraints
    ca=true), not expired. Anything else in a ``caBundle`` makes the apiserver distrust the webhook,
    and behind a ``failurePolicy: Fail`` webhook that stops every create it guards."""
    if not pem.strip():
        raise CertError(f"{source}: empty: a CA bundle holds one or more PEM CA certificates")
    if b"-----BEGIN CERTIFICATE-----" not in pem:
        raise CertError(f"{source}: not a PEM certificate (no BEGIN CERTIFICATE block)")
    try:
        certs = x509.load_pem_x509_certificates(pem)
    except ValueError as exc:
        raise CertError(f"{source}: not a readable PEM certificate: {exc}") from None
    now = utcnow()
    for index, cert in enumerate(certs, start=1):
        try:
            is_ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        except x509.ExtensionNotFound:
            is_ca = False
        where = f"{source}: certificate {index} ({cert.subject.rfc4514_string()})"
        if not is_ca:
            raise CertError(f"{where} is not a CA certificate (basicConstraints ca=true): give the CA's ca.crt, "
                            "not a serving certificate")
        if cert.not_valid_after_utc <= now:
            raise CertError(f"{where} expired on {cert.not_valid_after_utc:%Y-%m-%d}")
    return certs


def load_key(pem: bytes):
    return serialization.load_pem_private_key(pem, password=None)


def _write_new(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to ``path`` through a fresh temporary file and a rename, so no reader sees half a file.

    Whatever stood at the temporary name (a stale temp of a crashed run, a file or a symlink someone planted) is
    unlinked first; the file is then created exclusively and never through a symlink (``O_EXCL | O_NOFOLLOW``),
    and ``fchmod`` gives it exactly ``mode`` whatever the umask (a umask of 000 would otherwise leave what
    ``os.open``'s mode allows)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            fd = -1
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    os.replace(tmp, path)


def write_private(path: Path, data: bytes) -> None:
    """A file readable by its owner only (0600), written atomically (``_write_new``)."""
    _write_new(path, data, 0o600)


def write_public(path: Path, data: bytes) -> None:
    """A certificate (0644), written atomically (``_write_new``)."""
    _write_new(path, data, 0o644)


def make_private_dir(path: Path) -> None:
    """The certificate directory: created 0700 whatever the umask (parents as the umask makes them); an existing
    directory is left as the operator made it."""
    if path.is_dir():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        return
    os.chmod(path, 0o700)  # mkdir's mode is cut by the umask only, never widened: this makes it exact


@dataclass
class CertDir:
    """A directory with ca.crt (bundle, may hold two CAs), ca.key, tls.crt, tls.key."""

    path: Path

    @property
    def ca_crt(self) -> Path:
        return self.path / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.path / "ca.key"

    @property
    def tls_crt(self) -> Path:
        return self.path / "tls.crt"

    @property
    def tls_key(self) -> Path:
        return self.path / "tls.key"

    def write(self, bundle: list[x509.Certificate], ca: KeyPair | None, serving: KeyPair) -> None:
        make_private_dir(self.path)
        write_public(self.ca_crt, b"".join(c.public_bytes(serialization.Encoding.PEM) for c in bundle))
        if ca is not None:
            write_private(self.ca_key, ca.key_pem())
        # key first: a reader that sees the new cert also finds its key
        write_private(self.tls_key, serving.key_pem())
        write_public(self.tls_crt, serving.cert_pem())

    def bundle(self) -> list[x509.Certificate]:
        return load_certs(self.ca_crt.read_bytes()) if self.ca_crt.exists() else []

    def serving(self) -> x509.Certificate | None:
        if not self.tls_crt.exists():
            return None
        certs = load_certs(self.tls_crt.read_bytes())
        return certs[0] if certs else None

    def ca(self) -> KeyPair | None:
        if not (self.ca_key.exists() and self.ca_crt.exists()):
            return None
        key = load_key(self.ca_key.read_bytes())
        for cert in self.bundle():
            if cert.public_key().public_numbers() == key.public_key().public_numbers():  # type: ignore[union-attr]
                return KeyPair(cert, key)
        return None


def issue(directory: Path, name: str, namespace: str, extra_names: list[str] | None = None,
          ips: list[str] | None = None, now: dt.datetime | None = None, algorithm: str = "ecdsa-p256",
          ca_days: int = CA_DAYS, serving_days: int = SERVING_DAYS, force: bool = False) -> CertDir:
    """Issue a new CA and serving certificate into ``directory``.

    A directory that already holds a CA key is refused unless ``force``: a new CA there would break
    every client (apiserver caBundle, other replicas) that trusts the old one, without a word."""
    now = now or utcnow()
    existing = CertDir(Path(directory))
    if existing.path.exists() and not existing.path.is_dir():
        raise CertError(f"{directory}: not a directory")
    if existing.ca_key.exists() and not force:
        raise CertError(f"{existing.ca_key} exists: a new CA would replace it and every client that trusts the "
                        "old one stops trusting the webhook; renew with `trainadmit certs rotate`, or pass --force "
                        "to replace it")
    ip_addresses(list(ips or []))
    ca = issue_ca(now=now, algorithm=algorithm, days=ca_days)
    serving = issue_serving(ca, service_names(name, namespace, extra_names), ips, days=serving_days, now=now,
                            algorithm=algorithm)
    out = CertDir(Path(directory))
    out.write([ca.cert], ca, serving)
    return out


@dataclass
class RotationResult:
    rotated_ca: bool
    rotated_serving: bool
    dropped_old_ca: bool
    reason: str


def rotate(directory: Path, now: dt.datetime | None = None, serving_renew_before: dt.timedelta = SERVING_RENEW_BEFORE,
           ca_renew_before: dt.timedelta = CA_RENEW_BEFORE, overlap: dt.timedelta = dt.timedelta(days=7),
           algorithm: str = "ecdsa-p256", serving_days: int = SERVING_DAYS,
           settle: dt.timedelta = SERVING_SETTLE) -> RotationResult:
    """Renew what is due. CA renewal is two-phase: first the new CA joins the bundle (both trusted)
    while the serving cert stays; once the bundle has been published for ``overlap`` (every client trusts
    the new CA), the serving cert is re-issued by the new CA; the old CA leaves the bundle on a later run,
    once that certificate is ``settle`` old (every server serves it)."""
    now = now or utcnow()
    d = CertDir(Path(directory))
    bundle = d.bundle()
    ca = d.ca()
    serving = d.serving()
    if ca is None or serving is None:
        raise CertError(f"{directory}: no CA key pair or serving certificate to rotate; run `trainadmit certs issue`")
    names = [n.value for n in serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
             if isinstance(n, x509.DNSName)]
    ips = [str(n.value) for n in serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
           if isinstance(n, x509.IPAddress)]
    newest = max(bundle, key=lambda c: c.not_valid_before_utc)
    rotated_ca = rotated_serving = dropped = False
    reasons = []
    if ca.cert.not_valid_after_utc - now <= ca_renew_before and newest.fingerprint(hashes.SHA256()) == \
            ca.cert.fingerprint(hashes.SHA256()):
        new_ca = issue_ca(now=now, algorithm=algorithm)
        d.write([*bundle, new_ca.cert], new_ca, _reload_serving(d, serving))
        return RotationResult(True, False, False, "CA within its renewal window: new CA added to the bundle; "
                                                  "the serving certificate moves to it after the overlap")
    if serving.issuer != newest.subject:  # a CA rotation is under way
        waited = now - newest.not_valid_before_utc
        if waited >= overlap or serving.not_valid_after_utc <= now:
            serving_pair = issue_serving(ca, names, ips, days=serving_days, now=now, algorithm=algorithm)
            d.write(bundle, ca, serving_pair)
            return RotationResult(False, True, False, "serving certificate re-issued by the new CA")
        return RotationResult(False, False, False, f"CA rotation under way: both CAs trusted; the serving "
                                                   f"certificate moves after {overlap - waited} more")
    if serving.not_valid_after_utc - now <= serving_renew_before:
        serving_pair = issue_serving(ca, names, ips, days=serving_days, now=now, algorithm=algorithm)
        d.write(bundle, ca, serving_pair)
        rotated_serving = True
        reasons.append("serving certificate within its renewal window: re-issued")
        serving = serving_pair.cert
    live = [c for c in bundle if c.not_valid_after_utc > now]
    settled = now - (serving.not_valid_before_utc + BACKDATE) >= settle
    if len(bundle) > 1 and serving.issuer == newest.subject:
        if settled:
            live = [newest]  # the serving cert moved to the newest CA and is served: older CAs are not needed
        else:
            reasons.append(f"old CA stays in the bundle until the new serving certificate is {settle} old "
                           "(every server serves it)")
    if len(live) != len(bundle):
        d.write(live, ca, _reload_serving(d, serving))
        dropped = True
        reasons.append("old CA removed from the bundle")
    return RotationResult(rotated_ca, rotated_serving, dropped, "; ".join(reasons) or "nothing due")


def _reload_serving(d: CertDir, cert: x509.Certificate) -> KeyPair:
    return KeyPair(cert, load_key(d.tls_key.read_bytes()))


@dataclass
class CheckReport:
    ok: bool
    lines: list[str]


def check(directory: Path, expect_names: list[str] | None = None, now: dt.datetime | None = None,
          warn_before: dt.timedelta = SERVING_RENEW_BEFORE) -> CheckReport:
    """How long the certificates have left, and whether chain and names match."""
    now = now or utcnow()
    d = CertDir(Path(directory))
    lines: list[str] = []
    ok = True
    serving, bundle = d.serving(), d.bundle()
    if serving is None or not bundle:
        return CheckReport(False, [f"{directory}: tls.crt or ca.crt missing"])
    for ca in bundle:
        left = ca.not_valid_after_utc - now
        lines.append(f"CA {ca.subject.rfc4514_string()}: {left.days} days left")
        if left <= dt.timedelta(0):
            ok = False
    left = serving.not_valid_after_utc - now
    lines.append(f"serving {serving.subject.rfc4514_string()}: {left.days} days left")
    if left <= dt.timedelta(0):
        ok = False
        lines.append("serving certificate has EXPIRED")
    elif left <= warn_before:
        lines.append(f"serving certificate is within {warn_before.days} days of expiry: run `trainadmit certs rotate`")
    issuers = [c for c in bundle if c.subject == serving.issuer]
    try:
        if not issuers:
            raise ValueError("no CA in the bundle issued it")
        serving.verify_directly_issued_by(issuers[0])
        lines.append("chain: serving certificate is signed by a CA in the bundle")
    except Exception as exc:
        ok = False
        lines.append(f"chain: BROKEN ({exc})")
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    names = [n.value for n in sans if isinstance(n, x509.DNSName)]
    ips = [str(n.value) for n in sans if isinstance(n, x509.IPAddress)]
    lines.append(f"names: {', '.join(names + ips) or '(none)'}")
    for name in expect_names or []:
        if name not in names:
            ok = False
            lines.append(f"name {name}: MISSING from the certificate ({', '.join(names)})")
    if d.tls_key.exists() and (d.tls_key.stat().st_mode & 0o077):
        lines.append("tls.key is readable by group or others")
    return CheckReport(ok, lines)
