"""`trainadmit` command line: a thin layer over the engine, the server and the certificate tools.

Exit codes (DESIGN §6): 0 every object admitted, 1 any denied, 2 unreadable input or invalid policy.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from .cluster import ClusterView, NoCluster, SnapshotCluster, SnapshotError
from .engine import Request, decide
from .inputs import InputError, read_inputs
from .policy import PolicyError, load_policy_dir
from .render import record, text, to_json, to_yaml

EXIT_OK, EXIT_DENIED, EXIT_ERROR = 0, 1, 2
DEFAULT_POLICY_DIR = os.environ.get("TRAINADMIT_POLICY_DIR", "policies")


def _load_policy(path: str):
    try:
        return load_policy_dir(path)
    except PolicyError as exc:
        print(f"trainadmit: invalid policy in {path}:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return None


def cmd_check(args: argparse.Namespace) -> int:
    policy = _load_policy(args.policy)
    if policy is None:
        return EXIT_ERROR
    cluster: ClusterView = NoCluster()
    if args.cluster:
        try:
            cluster = SnapshotCluster.from_files(args.cluster)
        except (OSError, SnapshotError) as exc:
            print(f"trainadmit: cannot read cluster snapshot: {exc}", file=sys.stderr)
            return EXIT_ERROR
    try:
        items = read_inputs(args.files)
    except InputError as exc:
        print(f"trainadmit: {exc}", file=sys.stderr)
        return EXIT_ERROR
    from .render import explainer

    sources = explainer(policy) if args.explain else None
    denied = admitted = unmatched = 0
    records, objects, patches, out = [], [], [], []
    for item in items:
        decision = decide(policy, Request(item.obj, operation=item.operation, old=item.old,
                                          namespace=item.namespace or args.namespace, user=item.user or {}),
                          cluster)
        if not decision.matched:
            unmatched += 1
        elif decision.allowed:
            admitted += 1
        else:
            denied += 1
        if args.output == "text":
            out.append(text(item, decision, explain=args.explain, sources=sources))
        elif args.output == "json":
            records.append(record(item, decision))
        elif args.output == "patch":
            patches.append({"source": item.source, "document": item.index, "object": record(item, decision)["object"],
                            "allowed": decision.allowed, "patch": decision.patch})
        else:
            objects.append(decision.mutated if decision.mutated is not None else item.obj)
            objects.extend(decision.companions)
            if not decision.allowed:
                print(f"{item.source}#{item.index}: {decision.denial_message()}", file=sys.stderr)
    if args.output == "text":
        out.append(f"{len(items)} object{'s' if len(items) != 1 else ''}: {admitted} admitted, {denied} denied, "
                   f"{unmatched} not matched (policy generation {policy.generation})")
        print("\n".join(out))
    elif args.output == "json":
        print(to_json(records))
    elif args.output == "patch":
        print(to_json(patches))
    else:
        print(to_yaml(objects), end="")
    return EXIT_DENIED if denied else EXIT_OK


def cmd_policy_lint(args: argparse.Namespace) -> int:
    from .policy.lint import lint

    findings, unreadable = lint(args.dir)
    for finding in findings:
        print(finding)
    if unreadable:
        return EXIT_ERROR
    if findings:
        print(f"{len(findings)} finding{'s' if len(findings) != 1 else ''} in {args.dir}")
        return EXIT_DENIED
    policy = load_policy_dir(args.dir)
    print(f"{args.dir}: policy generation {policy.generation}: {len(policy.pools)} pools, "
          f"{len(policy.datasets)} datasets, {len(policy.checkpoints)} checkpoint classes, "
          f"{len(policy.tiers)} priority tiers, {len(policy.quotas)} quotas, {len(policy.rules)} rules: OK")
    return EXIT_OK


def cmd_policy_test(args: argparse.Namespace) -> int:
    from .policy.testrunner import junit, run

    results, errors = run(args.dir)
    if args.output == "junit":
        print(junit(results, errors), end="")
    else:
        for r in results:
            print(f"{'PASS' if r.ok else 'FAIL'}  {r.suite}  {r.name}")
            for f in r.failures:
                print(f"      {f}")
        for e in errors:
            print(f"ERROR {e}")
        print(f"{sum(r.ok for r in results)} passed, {sum(not r.ok for r in results) + len(errors)} failed")
    if errors or any(not r.ok for r in results):
        return EXIT_DENIED
    if not results and not args.allow_empty:
        print(f"no policy tests found under {args.dir} (*.test.yaml or tests/*.yaml); use --allow-empty to accept",
              file=sys.stderr)
        return EXIT_DENIED
    return EXIT_OK


def cmd_policy_schema(args: argparse.Namespace) -> int:
    from .policy.schema import policy_json_schema

    print(to_json(policy_json_schema()))
    return EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    # prometheus_client picks its multi-process mode when first imported: set it up before that
    if "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
        import tempfile

        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="trainadmit-metrics-")
    from .server import ServerConfig, serve

    policy = _load_policy(args.policy)  # fail fast with file and field, before any worker starts
    if policy is None:
        return EXIT_ERROR
    if args.manage_certs:
        start_cert_controller(args.namespace, args.service, interval=30.0)
    if args.reconcile:
        start_reconciler(args.namespace, load_policy_dir(args.policy).keys.podgroup)
    config = ServerConfig(policy_dir=args.policy, cert_file=args.tls_cert, key_file=args.tls_key,
                          cluster_files=args.cluster or [], reload_interval=args.reload_interval,
                          enable_noop=args.enable_noop, cluster_live=args.cluster_live)
    serve(config, bind=f"{args.host}:{args.port}", workers=args.workers, threads=args.threads,
          timeout=args.timeout, graceful_timeout=args.graceful_timeout)
    return EXIT_OK


def start_cert_controller(namespace: str, service: str, interval: float):
    """In-cluster certificate mode: a thread (in the gunicorn master) that keeps the Secret current."""
    import threading

    from certs.incluster import from_kubeconfig

    from .runtime import emit

    controller = from_kubeconfig(namespace=namespace, service=service,
                                 log=lambda message: emit("certificates", message=message))
    stop = threading.Event()
    threading.Thread(target=controller.run, args=(stop, interval), name="cert-controller", daemon=True).start()
    return stop


def start_reconciler(namespace: str, key: str, interval: float = 5.0):
    """The PodGroup reconciler as a thread of the server's main process (Lease-elected)."""
    import threading

    from kubernetes import client

    from .kube import identity, load_config
    from .lease import LeaderLease
    from .reconciler import PodGroupReconciler
    from .runtime import emit

    load_config()
    log = lambda message: emit("reconciler", message=message)  # noqa: E731
    lease = LeaderLease(client.CoordinationV1Api(), namespace, "trainadmit-reconciler", identity(), log=log)
    reconciler = PodGroupReconciler(client.BatchV1Api(), client.CustomObjectsApi(), lease, key=key, log=log)
    stop = threading.Event()
    threading.Thread(target=reconciler.run, args=(stop, interval), name="podgroup-reconciler", daemon=True).start()
    return stop


def cmd_certs(args: argparse.Namespace) -> int:
    from .certs_cli import run

    return run(args)


def cmd_policy_configmap(args: argparse.Namespace) -> int:
    from .policy.configmap import policy_configmap

    if _load_policy(args.dir) is None:
        return EXIT_ERROR
    print(policy_configmap(args.dir, args.name, args.namespace), end="")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trainadmit", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    check = sub.add_parser("check", help="decide offline what the webhook would do with manifests")
    check.add_argument("files", nargs="*", help="files, directories or - for stdin (default: stdin)")
    check.add_argument("-p", "--policy", default=DEFAULT_POLICY_DIR, help="policy directory (default: %(default)s)")
    check.add_argument("--cluster", action="append", help="cluster snapshot (NodeList, ResourceQuotaList); repeatable")
    check.add_argument("-o", "--output", choices=["text", "yaml", "json", "patch"], default="text")
    check.add_argument("-n", "--namespace", default="default", help="namespace for objects that name none")
    check.add_argument("--explain", action="store_true", help="show the policy setting behind each injected field")
    check.set_defaults(func=cmd_check)

    policy = sub.add_parser("policy", help="work with policy directories")
    psub = policy.add_subparsers(dest="policy_command", required=True)
    lint = psub.add_parser("lint", help="check a policy directory")
    lint.add_argument("dir", nargs="?", default=DEFAULT_POLICY_DIR)
    lint.set_defaults(func=cmd_policy_lint)
    schema = psub.add_parser("schema", help="print the JSON Schema of policy documents")
    schema.set_defaults(func=cmd_policy_schema)
    test = psub.add_parser("test", help="run the policy test suites (*.test.yaml, tests/*.yaml)")
    test.add_argument("dir", nargs="?", default=DEFAULT_POLICY_DIR)
    test.add_argument("-o", "--output", choices=["text", "junit"], default="text")
    test.add_argument("--allow-empty", action="store_true", help="a directory without tests passes")
    test.set_defaults(func=cmd_policy_test)
    cm = psub.add_parser("configmap", help="print the policy directory as a ConfigMap manifest")
    cm.add_argument("dir", nargs="?", default=DEFAULT_POLICY_DIR)
    cm.add_argument("--name", default="trainadmit-policies")
    cm.add_argument("--namespace", default="trainadmit-system")
    cm.set_defaults(func=cmd_policy_configmap)

    srv = sub.add_parser("serve", help="run the HTTPS admission webhook (POST /mutate, /validate)")
    srv.add_argument("-p", "--policy", default=DEFAULT_POLICY_DIR)
    srv.add_argument("--tls-cert", default=os.environ.get("TRAINADMIT_TLS_CERT", "/tls/tls.crt"))
    srv.add_argument("--tls-key", default=os.environ.get("TRAINADMIT_TLS_KEY", "/tls/tls.key"))
    srv.add_argument("--host", default="0.0.0.0")
    srv.add_argument("--port", type=int, default=8443)
    srv.add_argument("--workers", type=int, default=2, help="processes (default %(default)s)")
    srv.add_argument("--threads", type=int, default=8, help="threads per process (default %(default)s)")
    srv.add_argument("--timeout", type=int, default=30, help="worker heartbeat timeout, seconds")
    srv.add_argument("--graceful-timeout", type=int, default=20, help="seconds to finish in-flight requests")
    srv.add_argument("--reload-interval", type=float, default=2.0, help="policy directory poll, seconds")
    srv.add_argument("--cluster", action="append", help="cluster snapshot file (until the live view exists)")
    srv.add_argument("--enable-noop", action="store_true", help="serve POST /noop (benchmark floor)")
    srv.add_argument("--cluster-live", action="store_true",
                     help="watch Nodes and ResourceQuotas (pool capacity, domain sizes, remaining GPU quota)")
    srv.add_argument("--manage-certs", action="store_true",
                     help="in-cluster mode: create and rotate the TLS Secret and the caBundle (Lease-elected)")
    srv.add_argument("--reconcile", action="store_true",
                     help="also run the PodGroup reconciler (Lease-elected) for backends that need PodGroups")
    srv.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE", "trainadmit-system"))
    srv.add_argument("--service", default="trainadmit", help="Service name the certificate is issued for")
    srv.set_defaults(func=cmd_serve)

    from .certs_cli import add_parser as add_certs

    add_certs(sub, cmd_certs)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except BrokenPipeError:  # `trainadmit check ... | head`
        return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
