"""`trainadmit` command line: a thin layer over the engine, the server and the certificate tools.

Exit codes (DESIGN §6): 0 every object admitted, 1 any denied, 2 unreadable input or invalid policy.
Each command's module is imported only when that command runs, so that `check` (run per file in CI
and pre-commit hooks) never pays for the web server, metrics or Kubernetes client.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Sequence

from ..grammars.preflight import COMMAND as PREFLIGHT
from ..grammars.preflight import ENV_ROOT, TERMINATION_LOG
from ..grammars.preflight import add_arguments as add_preflight_arguments
from .common import DEFAULT_POLICY_DIR, EXIT_OK


def _lazy(module: str, function: str):
    def run(args: argparse.Namespace) -> int:
        import importlib

        return int(getattr(importlib.import_module(f"{__package__}.{module}"), function)(args))
    return run


@functools.cache
def _columns() -> int:
    """``shutil.get_terminal_size().columns``, without importing shutil (and with it bz2, lzma and zlib,
    several milliseconds of every `check` run) for a width that only --help uses."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class _Formatter(argparse.HelpFormatter):
    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None):
        super().__init__(prog, indent_increment, max_help_position, width if width is not None else _columns() - 2)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose help formatter needs no shutil; sub-commands' parsers are of this class too."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)


def _add_check(sub) -> None:
    check = sub.add_parser("check", help="decide offline what the webhook would do with manifests")
    check.add_argument("files", nargs="*", help="files, directories or - for stdin (default: stdin)")
    check.add_argument("-p", "--policy", default=DEFAULT_POLICY_DIR, help="policy directory (default: %(default)s)")
    check.add_argument("--cluster", action="append",
                       help="cluster snapshot: saved lists of nodes, resourcequotas, priorityclasses, pvc, "
                       "network-attachment-definitions, queues, localqueues, and `kubectl get --raw /apis`; repeatable")
    check.add_argument("--old", metavar="FILE",
                       help="the stored objects before the change: decide each input object as an UPDATE of the "
                       "old object with the same kind, namespace and name")
    check.add_argument("-o", "--output", choices=["text", "yaml", "json", "patch"], default="text")
    check.add_argument("-n", "--namespace", default="default", help="namespace for objects that name none")
    check.add_argument("--explain", action="store_true", help="show the policy setting behind each injected field")
    check.set_defaults(func=_lazy("check", "cmd_check"))


def _add_policy(sub) -> None:
    policy = sub.add_parser("policy", help="work with policy directories")
    psub = policy.add_subparsers(dest="policy_command", required=True)
    init = psub.add_parser("init", help="write a minimal, commented policy set with an example test")
    init.add_argument("dir", help="a new or empty directory")
    init.set_defaults(func=_lazy("policy", "cmd_policy_init"))
    lint = psub.add_parser("lint", help="check a policy directory and its test suites (every problem at once)")
    lint.add_argument("dir", nargs="?", default=DEFAULT_POLICY_DIR)
    lint.add_argument("--strict", action="store_true", help="warnings fail too (exit 1)")
    lint.set_defaults(func=_lazy("policy", "cmd_policy_lint"))
    schema = psub.add_parser("schema", help="print the JSON Schema of policy documents")
    schema.set_defaults(func=_lazy("policy", "cmd_policy_schema"))
    test = psub.add_parser("test", help="run the policy test suites (*.test.yaml, tests/*.yaml)")
    test.add_argument("dir", nargs="?", default=DEFAULT_POLICY_DIR)
    test.add_argument("-o", "--output", choices=["text", "junit"], default="text")
    test.add_argument("--allow-empty", action="store_true", help="a directory without tests passes")
    test.set_defaults(func=_lazy("policy", "cmd_policy_test"))
    cm = psub.add_parser("configmap", help="print the policy directory as a ConfigMap manifest")
    cm.add_argument("dir", nargs="?", default=DEFAULT_POLICY_DIR)
    cm.add_argument("--name", default="trainadmit-policies")
    cm.add_argument("--namespace", default="trainadmit-system")
    cm.set_defaults(func=_lazy("policy", "cmd_policy_configmap"))
    hooks = psub.add_parser("webhooks", help="print the webhook configurations for the handled kinds and this policy")
    hooks.add_argument("dir", nargs="?", default=DEFAULT_POLICY_DIR)
    hooks.add_argument("--name", default="trainadmit", help="webhook configuration name")
    hooks.add_argument("--namespace", default="trainadmit-system", help="the webhook Service's namespace")
    hooks.add_argument("--service", default="trainadmit", help="the webhook Service's name")
    hooks.set_defaults(func=_lazy("policy", "cmd_policy_webhooks"))
    pcs = psub.add_parser("priorityclasses", help="print the PriorityClasses of the policy's priority tiers")
    pcs.add_argument("dir", nargs="?", default=DEFAULT_POLICY_DIR)
    pcs.set_defaults(func=_lazy("policy", "cmd_policy_priorityclasses"))


def _add_serve(sub) -> None:
    from ..server.limits import MAX_REQUESTS, MAX_REQUESTS_JITTER, ReadLimits  # only serve's parser needs them

    srv = sub.add_parser("serve", help="run the HTTPS admission webhook (POST /mutate, /validate)")
    srv.add_argument("-p", "--policy", default=DEFAULT_POLICY_DIR)
    srv.add_argument("--tls-cert", default=os.environ.get("TRAINADMIT_TLS_CERT"),
                     help="serving certificate, PEM (default: $TRAINADMIT_TLS_CERT)")
    srv.add_argument("--tls-key", default=os.environ.get("TRAINADMIT_TLS_KEY"),
                     help="its private key, PEM (default: $TRAINADMIT_TLS_KEY)")
    srv.add_argument("--host", default="0.0.0.0")
    srv.add_argument("--port", type=int, default=8443)
    srv.add_argument("--workers", type=int, default=2, help="processes (default %(default)s)")
    srv.add_argument("--threads", type=int, default=8, help="threads per process (default %(default)s)")
    srv.add_argument("--timeout", type=int, default=30, help="worker heartbeat timeout, seconds")
    srv.add_argument("--graceful-timeout", type=int, default=20, help="seconds to finish in-flight requests")
    srv.add_argument("--read-timeout", type=float, default=None,
                     help="seconds a client has for the TLS handshake, head and body of one request, 408 after "
                          f"(default: $TRAINADMIT_READ_TIMEOUT, else {ReadLimits.read_timeout:g})")
    srv.add_argument("--max-requests", type=int, default=MAX_REQUESTS,
                     help="requests after which a worker is replaced, bounding what it keeps (default %(default)s; "
                          "0: never)")
    srv.add_argument("--max-requests-jitter", type=int, default=MAX_REQUESTS_JITTER,
                     help="up to this many more, at random, so that workers are not replaced together")
    srv.add_argument("--worker-class", choices=["deadline", "gthread"], default="deadline",
                     help="deadline: requests read under --read-timeout before a thread takes them (default); "
                          "gthread: gunicorn's own, without read deadlines (benchmark baseline)")
    srv.add_argument("--reload-interval", type=float, default=2.0, help="policy directory poll, seconds")
    srv.add_argument("--cluster", action="append", help="cluster snapshot file (until the live view exists)")
    srv.add_argument("--enable-noop", action="store_true", help="serve POST /noop (benchmark floor)")
    srv.add_argument("--cluster-live", action="store_true",
                     help="watch Nodes, ResourceQuotas and the objects decisions name (pool capacity, usable nodes, "
                     "domain sizes, remaining GPU quota, PriorityClasses, claims, networks, queues)")
    srv.add_argument("--cluster-max-age", type=float, default=180.0,
                     help="seconds after which a live view that could not be confirmed is stale: /readyz fails and "
                     "decisions follow rule cluster.view-stale (default %(default)s)")
    srv.add_argument("--manage-certs", action="store_true",
                     help="in-cluster mode: create and rotate the TLS Secret and the caBundle (Lease-elected)")
    srv.add_argument("--reconcile", action="store_true",
                     help="also run the PodGroup reconciler (Lease-elected) for backends that need PodGroups")
    srv.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE", "trainadmit-system"))
    srv.add_argument("--service", default="trainadmit", help="Service name the certificate is issued for")
    srv.set_defaults(func=_lazy("serve", "cmd_serve"))


def _add_preflight(sub) -> None:
    preflight = sub.add_parser(PREFLIGHT, help="check a node before training starts (the injected init container)")
    add_preflight_arguments(preflight)
    preflight.add_argument("--root", default=os.environ.get(ENV_ROOT, "/"),
                           help=f"prefix of every path read and written (default: ${ENV_ROOT}, else /)")
    preflight.add_argument("--node", help="node name for messages (default: $NODE_NAME, else the host name)")
    preflight.add_argument("--termination-log", default=TERMINATION_LOG,
                           help="where the JSON result goes, under --root (default: %(default)s)")
    preflight.set_defaults(func=_lazy("preflight", "cmd_preflight"))


def _add_certs(sub) -> None:
    from .certs_command import add_parser

    add_parser(sub, _lazy("certs_command", "run"))


def _add_audit(sub) -> None:
    from .audit import add_parser

    add_parser(sub, _lazy("audit", "cmd_audit"))


COMMANDS = {"check": _add_check, "policy": _add_policy, "serve": _add_serve, PREFLIGHT: _add_preflight,
            "certs": _add_certs, "audit": _add_audit}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of ``command`` alone: argparse looks up a message catalog
    for each parser it creates (file system look-ups per language), several milliseconds for all
    of them, which `check` in a pre-commit hook would pay on every file."""
    parser = _Parser(prog="trainadmit", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, add in COMMANDS.items():
        if command is None or command not in COMMANDS or name == command:
            add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except BrokenPipeError:  # `trainadmit check ... | head`
        return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
