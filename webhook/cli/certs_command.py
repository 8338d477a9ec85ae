"""`trainadmit certs issue|rotate|check|inject-ca|controller`: thin wrappers over ``trainadmit.certs``.

Exit codes as every command's (docs/cli.md): 0 done (``check``: every certificate is good), 1 ``check``
found a problem (expired, broken chain, a name missing), 2 an input that cannot be used (a missing or
damaged file, a CA key ``issue`` would overwrite, a bundle that is not PEM CA certificates, no cluster
access), always as one line naming the file or value.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import sys
from pathlib import Path

import yaml

from .common import EXIT_DENIED, EXIT_ERROR, EXIT_OK, dns_label, path_arg

DEFAULT_DIR = "certs/out"


def _days(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is not a number of days (0 or more)")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return value


def add_parser(sub, func) -> None:
    certs = sub.add_parser("certs", help="issue, rotate and check the webhook's certificates")
    csub = certs.add_subparsers(dest="certs_command", metavar="SUBCOMMAND", title="subcommands")
    certs.set_defaults(func=lambda args: certs.print_help() or EXIT_OK)
    issue = csub.add_parser("issue", help="issue a CA and a serving certificate for the webhook Service")
    issue.add_argument("--name", default="trainadmit", type=dns_label, help="Service name")
    issue.add_argument("--namespace", default="trainadmit-system", type=dns_label, help="the Service's namespace")
    issue.add_argument("--dns", action="append", default=[], help="extra DNS name (repeatable)")
    issue.add_argument("--ip", action="append", default=[], help="extra IP address (repeatable)")
    issue.add_argument("--out", default=DEFAULT_DIR, type=path_arg,
                       help="directory for ca.crt, ca.key, tls.crt, tls.key")
    issue.add_argument("--algorithm", choices=["ecdsa-p256", "rsa-2048"], default="ecdsa-p256", help="key type")
    issue.add_argument("--secret", action="store_true", help="also print a kubernetes.io/tls Secret manifest")
    issue.add_argument("--force", action="store_true",
                       help="replace a CA that --out already holds (every client trusting the old CA breaks)")
    rotate = csub.add_parser("rotate", help="renew what is within its renewal window")
    rotate.add_argument("--dir", default=DEFAULT_DIR, type=path_arg, help="the directory `certs issue` wrote")
    rotate.add_argument("--renew-before-days", type=_days, default=90,
                        help="re-issue the serving certificate when it has fewer days left")
    rotate.add_argument("--ca-renew-before-days", type=_days, default=365,
                        help="start a CA rotation when the CA has fewer days left")
    rotate.add_argument("--overlap-days", type=_days, default=7, help="both CAs trusted this long before the switch")
    inject = csub.add_parser("inject-ca", help="put the CA bundle into the webhook configurations")
    inject.add_argument("--ca", default=f"{DEFAULT_DIR}/ca.crt", type=path_arg,
                        help="CA bundle file: PEM CA certificates (two during a CA rotation)")
    inject.add_argument("--name", default="trainadmit", help="webhook configuration name")
    inject.add_argument("manifests", nargs="*", metavar="FILE", type=path_arg,
                        help="print these manifests (files, directories, - for stdin) with caBundle set "
                        "(default: stdin)")
    inject.add_argument("--apply", action="store_true",
                        help="patch the live configurations through the Kubernetes API (in-cluster or kubeconfig)")
    ctrl = csub.add_parser("controller", help="in-cluster mode on its own: keep the TLS Secret and caBundle current")
    ctrl.add_argument("--namespace", default="trainadmit-system", type=dns_label,
                      help="namespace of the TLS Secret and the Lease")
    ctrl.add_argument("--service", default="trainadmit", type=dns_label,
                      help="Service name the certificate is issued for")
    ctrl.add_argument("--interval", type=_seconds, default=30.0, help="seconds between passes")
    ctrl.add_argument("--once", action="store_true", help="one pass, then exit")
    check = csub.add_parser("check", help="days left, chain and the names the serving certificate holds")
    check.add_argument("--dir", default=DEFAULT_DIR, type=path_arg, help="the directory `certs issue` wrote")
    check.add_argument("--name", default="trainadmit", type=dns_label, help="Service name the certificate must hold")
    check.add_argument("--namespace", default="trainadmit-system", type=dns_label, help="the Service's namespace")
    for p in (issue, rotate, inject, ctrl, check):
        p.set_defaults(func=func)


def secret_manifest(directory: Path, name: str, namespace: str) -> str:
    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": f"{name}-tls", "namespace": namespace},
        "data": {"tls.crt": b64(directory / "tls.crt"), "tls.key": b64(directory / "tls.key"),
                 "ca.crt": b64(directory / "ca.crt")},
    }, sort_keys=False)


def _fail(message: str) -> int:
    print(f"trainadmit certs: {message}", file=sys.stderr)
    return EXIT_ERROR


def run(args: argparse.Namespace) -> int:
    from ..certs import pki

    try:
        return _run(args, pki)
    except pki.CertError as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "))
    except ValueError as exc:  # a damaged PEM file (cryptography's parsers)
        where = getattr(args, "dir", None) or getattr(args, "out", None) or ""
        return _fail(f"{where}: unreadable certificate or key: {exc}")


def _run(args: argparse.Namespace, pki) -> int:
    if args.certs_command == "issue":
        d = pki.issue(Path(args.out), args.name, args.namespace, args.dns, args.ip, algorithm=args.algorithm,
                      force=args.force)
        serving = d.serving()
        print(f"issued CA and serving certificate in {args.out} for "
              f"{', '.join(pki.service_names(args.name, args.namespace, args.dns))}; "
              f"serving certificate valid until {serving.not_valid_after_utc:%Y-%m-%d}")  # type: ignore[union-attr]
        if args.secret:
            print(secret_manifest(Path(args.out), args.name, args.namespace))
        return EXIT_OK
    if args.certs_command == "rotate":
        if not Path(args.dir).is_dir():
            raise pki.CertError(f"{args.dir}: no such directory; run `trainadmit certs issue --out {args.dir}`")
        result = pki.rotate(Path(args.dir), serving_renew_before=dt.timedelta(days=args.renew_before_days),
                            ca_renew_before=dt.timedelta(days=args.ca_renew_before_days),
                            overlap=dt.timedelta(days=args.overlap_days))
        print(result.reason)
        return EXIT_OK
    if args.certs_command == "inject-ca":
        return _inject(args, pki)
    if args.certs_command == "controller":
        return _controller(args)
    return _check(args, pki)


def _read_bundle(path: str, pki) -> bytes:
    file = Path(path)
    if file.is_dir():
        raise pki.CertError(f"--ca {path}: a directory; give the CA bundle file (ca.crt)")
    if not file.is_file():
        raise pki.CertError(f"--ca {path}: no such file; issue one with `trainadmit certs issue` or give --ca")
    bundle = file.read_bytes()
    pki.ca_bundle(bundle, f"--ca {path}")
    return bundle


def _inject(args: argparse.Namespace, pki) -> int:
    from ..certs.inject import NoWebhookConfiguration, inject_manifests

    bundle = _read_bundle(args.ca, pki)
    if args.apply:
        from ..certs.inject import apply_ca_bundle

        try:
            lines = apply_ca_bundle(bundle, args.name)
        except Exception as exc:  # no kubeconfig, no route, 403: the client raises several types
            return _fail(f"inject-ca --apply: cannot reach the cluster: {_api_message(exc)}")
        for line in lines:
            print(line)
        return EXIT_OK
    from .inputs import InputError, read_documents

    try:
        docs = [doc for _, _, doc in read_documents(args.manifests or ["-"])]
        print(inject_manifests(docs, bundle, args.name), end="")
    except (InputError, NoWebhookConfiguration) as exc:
        return _fail(str(exc))
    return EXIT_OK


def _controller(args: argparse.Namespace) -> int:
    import threading

    from ..certs.incluster import from_kubeconfig

    try:
        controller = from_kubeconfig(namespace=args.namespace, service=args.service)
        if args.once:
            print(controller.step())
            return EXIT_OK
    except Exception as exc:  # as for --apply: configuration and API errors of several types
        return _fail(f"controller: cannot reach the cluster: {_api_message(exc)}")
    controller.run(threading.Event(), args.interval)
    return EXIT_OK


def _api_message(exc: Exception) -> str:
    """One line for a Kubernetes client error: the apiserver's Status message when there is one."""
    import json

    body = getattr(exc, "body", None)
    try:
        message = json.loads(body).get("message") if body else None
    except (ValueError, AttributeError):
        message = None
    if message:
        return str(message)
    first = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {first[0]}" if first else type(exc).__name__


def _check(args: argparse.Namespace, pki) -> int:
    directory = Path(args.dir)
    if not directory.is_dir():
        raise pki.CertError(f"{args.dir}: no such directory")
    d = pki.CertDir(directory)
    for path in (d.ca_crt, d.tls_crt):
        if not path.is_file():
            raise pki.CertError(f"{path}: missing; `trainadmit certs issue --out {args.dir}` writes it")
    names = pki.service_names(args.name, args.namespace)[:2]
    report = pki.check(directory, names)
    print("\n".join(report.lines))
    return EXIT_OK if report.ok else EXIT_DENIED
