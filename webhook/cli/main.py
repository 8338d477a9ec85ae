"""`trainadmit` command line: a thin layer over the engine, the server and the certificate tools.

Exit codes (docs/cli.md): 0 every object admitted, 1 any denied, 2 unreadable input, invalid
policy, a usage error or output that could not be written, 130 interrupted.
Each command's module is imported only when that command runs, so that `check` (run per file in CI
and pre-commit hooks) never pays for the web server, metrics or Kubernetes client.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import os
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

from .. import __version__
from ..grammars.preflight import COMMAND as PREFLIGHT
from ..grammars.preflight import ENV_ROOT, TERMINATION_LOG
from ..grammars.preflight import add_arguments as add_preflight_arguments
from .common import DEFAULT_POLICY_DIR, EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, add_cluster_args, path_arg
from .streams import GuardedStdout, StdoutClosed, silence, stdout_usable


def _lazy(module: str, function: str):
    def run(args: argparse.Namespace) -> int:
        import importlib

        return int(getattr(importlib.import_module(f"{__package__}.{module}"), function)(args))
    return run


def _show_help(parser: argparse.ArgumentParser):
    """A command group run without its sub-command (`trainadmit`, `trainadmit policy`): its help,
    which lists the sub-commands, on stdout and exit 0 (as kubectl's and kyverno's groups do)."""
    def run(args: argparse.Namespace) -> int:
        parser.print_help()
        return EXIT_OK
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
    """Help whose every option says its default: a default that is not "nothing" (None, False, an
    empty list) is appended unless the text already names it."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None):
        super().__init__(prog, indent_increment, max_help_position, width if width is not None else _columns() - 2)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if ("default" in text or default in (None, False, [], argparse.SUPPRESS)
                or (not action.option_strings and action.nargs not in ("?", "*"))):
            return text
        return f"{text} (default: %(default)s)"


class _Parser(argparse.ArgumentParser):
    """Every parser of the program, sub-commands' included (argparse makes those of the same class):
    its help formatter needs no shutil, it answers --version, and a usage error is one line naming
    the argument, with exit code 2."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)
        self.add_argument("--version", action="version", version=f"trainadmit {__version__}",
                          help="print trainadmit's version and exit")

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        self._argv = list(sys.argv[1:] if args is None else args)  # what a usage error's suggestion looks through
        return super().parse_known_args(args, namespace)

    def error(self, message: str):  # type: ignore[override]
        argv = getattr(self, "_argv", [])
        hint = suggestion(self, message, argv)
        prog = _chosen(self, argv).prog if _UNRECOGNIZED in message else self.prog  # the command's own help
        self.exit(EXIT_ERROR, f"{prog}: {message}{'; ' + hint if hint else ''} (see: {prog} --help)\n")


_CHOICE = re.compile(r"invalid choice: '?(?P<got>[^' ]*)'? \(choose from (?P<choices>.*)\)")
_UNRECOGNIZED = "unrecognized arguments: "


def _close(word: str, names: Sequence[str]) -> str | None:
    found = difflib.get_close_matches(word, list(names), n=1, cutoff=0.6)
    return found[0] if found else None


def _chosen(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.ArgumentParser:
    """The (sub-)parser ``argv`` selects: the deepest command its words name (``policy lint``)."""
    for word in argv:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subs and word in subs[0].choices:
            return _chosen(subs[0].choices[word], argv[argv.index(word) + 1:])
    return parser


def suggestion(parser: argparse.ArgumentParser, message: str, argv: Sequence[str]) -> str:
    """``did you mean X?`` for a usage error: the nearest command, sub-command or choice of an option
    (``invalid choice``), or the nearest option of the command the words name (``unrecognized arguments``;
    difflib, as the policy lint's fixes); "" when nothing is near."""
    found = _CHOICE.search(message)
    if found:
        choices = re.findall(r"'([^']*)'", found["choices"]) or [c.strip() for c in found["choices"].split(",")]
        near = _close(found["got"], choices)
        return f"did you mean {near}?" if near else ""
    if _UNRECOGNIZED in message:
        target = _chosen(parser, argv)
        options = [o for a in target._actions for o in a.option_strings if o.startswith("--")]
        words = message.split(_UNRECOGNIZED, 1)[1].split()
        hints = {}
        for word in words:
            name = word.split("=", 1)[0]
            near = _close(name, options) if name.startswith("-") else None
            if near:
                hints[name] = near
        if len(words) == 1 and hints:
            return f"did you mean {next(iter(hints.values()))}?"
        return "; ".join(f"{name}: did you mean {near}?" for name, near in hints.items())
    return ""


OUTPUTS = ("text", "yaml", "json", "patch", "junit", "sarif")


def _add_check(sub) -> None:
    check = sub.add_parser("check", help="decide offline what the webhook would do with manifests")
    check.add_argument("files", nargs="*", metavar="FILE", type=path_arg,
                       help="files, directories (read recursively) or - for stdin; at least one")
    check.add_argument("-p", "--policy", default=DEFAULT_POLICY_DIR, type=path_arg,
                       help="policy directory (default: $TRAINADMIT_POLICY_DIR, else %(default)s)")
    check.add_argument("--cluster", action="append", metavar="SNAPSHOT", type=path_arg,
                       help="cluster snapshot: saved lists of nodes, resourcequotas, priorityclasses, pvc, "
                       "network-attachment-definitions, queues, localqueues, and `kubectl get --raw /apis`; repeatable")
    add_cluster_args(check, "the lists --cluster reads, as the cluster view")
    check.add_argument("--old", metavar="FILE", type=path_arg,
                       help="the stored objects before the change: decide each input object as an UPDATE of the "
                       "old object with the same kind, namespace and name")
    check.add_argument("-o", "--output", choices=OUTPUTS, default="text",
                       help="text for people; yaml: the admitted objects as they will be stored; json: a decision "
                       "per object; patch: the JSON patches; junit / sarif: reports for CI systems")
    check.add_argument("-n", "--namespace", default="default", help="namespace for objects that name none")
    check.add_argument("--explain", action="store_true",
                       help="show the policy setting behind each injected field and violation (text, yaml, json)")
    check.add_argument("--strict", action="store_true", help="warnings fail too (exit 1), as denials do")
    check.add_argument("-q", "--quiet", action="store_true",
                       help="print only what failed (denials, warnings with --strict, input problems) and the summary; "
                       "objects no policy matches are not shown")
    check.add_argument("--as", dest="as_user", metavar="USER",
                       help="decide as if USER sent the requests (kubectl's --as): a controller's account "
                       "(docs/workloads.md) leaves its children alone, as the server does; an AdmissionReview's "
                       "userInfo is replaced")
    check.add_argument("--as-group", dest="as_groups", action="append", metavar="GROUP",
                       help="a group of the --as user (repeatable; kubectl's --as-group); without it, the groups "
                       "the apiserver gives an impersonated user")
    check.set_defaults(func=_lazy("check", "cmd_check"))


def _add_policy(sub) -> None:
    policy = sub.add_parser("policy", help="work with policy directories")
    policy.set_defaults(func=_show_help(policy))
    psub = policy.add_subparsers(dest="policy_command", metavar="SUBCOMMAND", title="subcommands")
    dir_help = "the policy directory"
    init = psub.add_parser("init", help="write a minimal, commented policy set with an example test")
    init.add_argument("dir", metavar="DIR", type=path_arg, help="a new or empty directory")
    init.set_defaults(func=_lazy("policy", "cmd_policy_init"))
    lint = psub.add_parser("lint", help="check a policy directory and its test suites (every problem at once)")
    lint.add_argument("dir", nargs="?", default=DEFAULT_POLICY_DIR, metavar="DIR", type=path_arg,
                      help=dir_help)
    lint.add_argument("--strict", action="store_true", help="warnings fail too (exit 1)")
    lint.add_argument("-o", "--output", choices=["text", "json", "sarif"], default="text",
                      help="text for people; json: one object with every finding; sarif: a SARIF 2.1.0 log for "
                      "code-review annotations (exit codes as for text)")
    lint.set_defaults(func=_lazy("policy", "cmd_policy_lint"))
    schema = psub.add_parser("schema", help="print the JSON Schema of policy documents")
    schema.set_defaults(func=_lazy("policy", "cmd_policy_schema"))
    test = psub.add_parser("test", help="run the policy test suites (*.test.yaml, tests/*.yaml)")
    test.add_argument("dir", nargs="?", default=DEFAULT_POLICY_DIR, metavar="DIR", type=path_arg,
                      help=dir_help)
    test.add_argument("-o", "--output", choices=["text", "junit"], default="text", help="report format")
    test.add_argument("--allow-empty", action="store_true", help="a directory without tests passes")
    test.set_defaults(func=_lazy("policy", "cmd_policy_test"))
    cm = psub.add_parser("configmap", help="print the policy directory as a ConfigMap manifest")
    cm.add_argument("dir", nargs="?", default=DEFAULT_POLICY_DIR, metavar="DIR", type=path_arg,
                      help=dir_help)
    cm.add_argument("--name", default="trainadmit-policies", help="the ConfigMap's name")
    cm.add_argument("--namespace", default="trainadmit-system", help="the ConfigMap's namespace")
    cm.set_defaults(func=_lazy("policy", "cmd_policy_configmap"))
    hooks = psub.add_parser("webhooks", help="print the webhook configurations for the handled kinds and this policy")
    hooks.add_argument("dir", nargs="?", default=DEFAULT_POLICY_DIR, metavar="DIR", type=path_arg,
                      help=dir_help)
    hooks.add_argument("--name", default="trainadmit", help="webhook configuration name")
    hooks.add_argument("--namespace", default="trainadmit-system",
                       help="the webhook Service's namespace (with --url: the server's, for its Leases)")
    hooks.add_argument("--service", default="trainadmit", help="the webhook Service's name")
    hooks.add_argument("--url", metavar="URL",
                       help="call a server outside the cluster at URL (https://HOST:PORT: `trainadmit serve` on your "
                       "machine) instead of the Service; the output then also holds the namespace and PriorityClasses "
                       "such a server needs")
    hooks.add_argument("--ca", metavar="FILE", type=path_arg,
                       help="put this CA bundle (PEM CA certificates: the ca.crt of `trainadmit certs issue`) into "
                       "caBundle")
    hooks.set_defaults(func=_lazy("policy", "cmd_policy_webhooks"))
    pcs = psub.add_parser("priorityclasses", help="print the PriorityClasses of the policy's priority tiers")
    pcs.add_argument("dir", nargs="?", default=DEFAULT_POLICY_DIR, metavar="DIR", type=path_arg,
                      help=dir_help)
    pcs.set_defaults(func=_lazy("policy", "cmd_policy_priorityclasses"))


def _add_serve(sub) -> None:
    from ..server.settings import add_arguments  # serve's options are declared with its settings, once

    srv = sub.add_parser("serve", help="run the HTTPS admission webhook (POST /mutate, /validate)")
    add_arguments(srv)
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
    parser.set_defaults(func=_show_help(parser))
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for name, add in COMMANDS.items():
        if command is None or command not in COMMANDS or name == command:
            add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command and return its exit code (the contract in docs/cli.md).

    Whatever goes wrong ends in one line on stderr and a documented exit code, never a traceback:
    a stdout that stops taking output (`check … | head`) is exit 2, since the output the caller
    relies on is incomplete; an interrupt is 130; an exception no command handles is reported as an
    internal error (exit 2; ``TRAINADMIT_TRACEBACK=1`` shows where it came from)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not stdout_usable():
        print("trainadmit: stdout is closed: nothing could be reported", file=sys.stderr)
        return EXIT_ERROR
    real = sys.stdout
    sys.stdout = GuardedStdout(real)  # type: ignore[assignment]
    try:
        try:
            parser = build_parser(argv[0] if argv else None)
            args = parser.parse_args(argv)
            code = int(args.func(args))
            sys.stdout.flush()
            return code
        except SystemExit as exc:  # argparse: --help and --version (0), a usage error (2)
            sys.stdout.flush()
            return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    except StdoutClosed as exc:
        silence(real)
        print(f"trainadmit: stdout stopped taking output ({exc}) before it was complete: nothing is verified",
              file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("trainadmit: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        if os.environ.get("TRAINADMIT_TRACEBACK"):
            raise
        print(f"trainadmit: internal error: {type(exc).__name__}: {exc} (please report it; "
              "TRAINADMIT_TRACEBACK=1 shows where)", file=sys.stderr)
        return EXIT_ERROR
    finally:
        sys.stdout = real


# commands that leave nothing for the interpreter's teardown to finish: their output is written and flushed by
# main, their files closed, and they start no thread and register no atexit function
_NOTHING_PENDING = frozenset({"check"})


def console() -> NoReturn:
    """The console script and ``python -m trainadmit.cli``: ``sys.exit(main())``, except that a finished `check`
    ends with ``os._exit`` once stdout and stderr are flushed. The interpreter's teardown (every module and object
    freed, one by one) is about 15 ms of CPU of a one-manifest `check` and more after many objects, paid per file in
    a pre-commit hook for nothing: the process ends anyway. mypy's command line ends the same way. Anything else
    (other commands, a thread still running, a flush that fails) exits as ``sys.exit`` does."""
    argv = sys.argv[1:]
    code = main(argv)
    if argv[:1] and argv[0] in _NOTHING_PENDING and threading_idle():
        try:
            for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
                if stream is not None:
                    stream.flush()
        except (OSError, ValueError):
            sys.exit(code)
        os._exit(code)
    sys.exit(code)


def threading_idle() -> bool:
    """No thread but this one (threading is not imported by `check`; if it is, its threads are counted)."""
    threading = sys.modules.get("threading")
    return threading is None or threading.active_count() == 1


if __name__ == "__main__":  # pragma: no cover
    console()
