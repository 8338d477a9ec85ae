"""`trainadmit certs issue|rotate|check|inject-ca|controller`: thin wrappers over ``trainadmit.certs``."""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import sys
from pathlib import Path

import yaml


def add_parser(sub, func) -> None:
    certs = sub.add_parser("certs", help="issue, rotate and check the webhook's certificates")
    csub = certs.add_subparsers(dest="certs_command", required=True)
    issue = csub.add_parser("issue", help="issue a CA and a serving certificate for the webhook Service")
    issue.add_argument("--name", default="trainadmit", help="Service name")
    issue.add_argument("--namespace", default="trainadmit-system")
    issue.add_argument("--dns", action="append", default=[], help="extra DNS name (repeatable)")
    issue.add_argument("--ip", action="append", default=[], help="extra IP address (repeatable)")
    issue.add_argument("--out", default="certs/out", help="directory for ca.crt, ca.key, tls.crt, tls.key")
    issue.add_argument("--algorithm", choices=["ecdsa-p256", "rsa-2048"], default="ecdsa-p256")
    issue.add_argument("--secret", action="store_true", help="also print a kubernetes.io/tls Secret manifest")
    rotate = csub.add_parser("rotate", help="renew what is within its renewal window")
    rotate.add_argument("--dir", default="certs/out")
    rotate.add_argument("--renew-before-days", type=int, default=90)
    rotate.add_argument("--ca-renew-before-days", type=int, default=365)
    rotate.add_argument("--overlap-days", type=int, default=7, help="both CAs trusted this long before the switch")
    inject = csub.add_parser("inject-ca", help="put the CA bundle into the webhook configurations")
    inject.add_argument("--ca", default="certs/out/ca.crt", help="CA bundle file (PEM, may hold two CAs)")
    inject.add_argument("--name", default="trainadmit", help="webhook configuration name")
    inject.add_argument("manifests", nargs="*", help="print these manifests (files, dirs, -) with caBundle set")
    inject.add_argument("--apply", action="store_true",
                        help="patch the live configurations through the Kubernetes API (in-cluster or kubeconfig)")
    inject.set_defaults(func=func)
    ctrl = csub.add_parser("controller", help="in-cluster mode on its own: keep the TLS Secret and caBundle current")
    ctrl.add_argument("--namespace", default="trainadmit-system")
    ctrl.add_argument("--service", default="trainadmit")
    ctrl.add_argument("--interval", type=float, default=30.0)
    ctrl.add_argument("--once", action="store_true", help="one pass, then exit")
    ctrl.set_defaults(func=func)
    check = csub.add_parser("check", help="days left, chain and names")
    check.add_argument("--dir", default="certs/out")
    check.add_argument("--name", default="trainadmit")
    check.add_argument("--namespace", default="trainadmit-system")
    for p in (issue, rotate, check):
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


def run(args: argparse.Namespace) -> int:
    from ..certs import pki

    if args.certs_command == "issue":
        d = pki.issue(Path(args.out), args.name, args.namespace, args.dns, args.ip, algorithm=args.algorithm)
        serving = d.serving()
        print(f"issued CA and serving certificate in {args.out} for "
              f"{', '.join(pki.service_names(args.name, args.namespace, args.dns))}; "
              f"serving certificate valid until {serving.not_valid_after_utc:%Y-%m-%d}")  # type: ignore[union-attr]
        if args.secret:
            print(secret_manifest(Path(args.out), args.name, args.namespace))
        return 0
    if args.certs_command == "rotate":
        result = pki.rotate(Path(args.dir), serving_renew_before=dt.timedelta(days=args.renew_before_days),
                            ca_renew_before=dt.timedelta(days=args.ca_renew_before_days),
                            overlap=dt.timedelta(days=args.overlap_days))
        print(result.reason)
        return 0
    if args.certs_command == "inject-ca":
        from ..certs.inject import NoWebhookConfiguration, apply_ca_bundle, inject_manifests

        bundle = Path(args.ca).read_bytes()
        if args.apply:
            for line in apply_ca_bundle(bundle, args.name):
                print(line)
            return 0
        from .inputs import InputError, read_documents

        try:
            docs = [doc for _, _, doc in read_documents(args.manifests or ["-"])]
            print(inject_manifests(docs, bundle, args.name), end="")
        except (InputError, NoWebhookConfiguration) as exc:
            print(f"trainadmit: {exc}", file=sys.stderr)
            return 2
        return 0
    if args.certs_command == "controller":
        import threading

        from ..certs.incluster import from_kubeconfig

        controller = from_kubeconfig(namespace=args.namespace, service=args.service)
        if args.once:
            print(controller.step())
            return 0
        controller.run(threading.Event(), args.interval)
        return 0
    report = pki.check(Path(args.dir), pki.service_names(args.name, args.namespace)[:2])
    print("\n".join(report.lines))
    return 0 if report.ok else 1
