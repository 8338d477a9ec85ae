"""`trainadmit check`: decide offline what the webhook would do with manifests (CI).

Run per file by pre-commit hooks and CI steps, so its start-up counts: this module imports the
engine, the manifest reader and the renderers only (never the web server, metrics, the Kubernetes
client or certificate code; `tests/cli/test_check_imports.py` holds it to that), takes the validated
policy set from the policy cache when the same policy was validated before (no pydantic), and
imports the cluster snapshot reader and `--explain` only when asked. Objects are read, decided
and written one at a time, so memory stays flat however many manifests there are. Where the cluster
lists hold the namespaces' workloads, the objects a run admits count against the namespace budgets of
those after them, as if applied in that order.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import field

from ..engine import Decision, Request, decide
from ..engine.clusterview import ClusterView, NoCluster
from ..engine.request import deciding_phase
from ..grammars.lazydataclass import dataclass
from .common import EXIT_DENIED, EXIT_ERROR, EXIT_OK, load_policy_or_report, policy_cache_dir
from .inputs import STDIN_NAME, InputError, Item, as_update, iter_items, manifest_files, old_objects
from .render import JsonOutput, Options, Output, TextOutput, YamlOutput, patch_element, record


@dataclass
class Tally:
    """What the summary line and the exit code say."""

    strict: bool = False
    admitted: int = 0
    denied: int = 0
    unmatched: int = 0
    warned: int = 0  # admitted objects with warnings (they fail with --strict)
    input_problems: list[str] = field(default_factory=list)  # unreadable input, objects without their --old

    def add(self, decision: Decision) -> None:
        if not decision.matched:
            self.unmatched += 1
        elif decision.allowed:
            self.admitted += 1
            self.warned += bool(decision.warnings)  # counted apart only with --strict, where they fail
        else:
            self.denied += 1

    def summary(self, generation: str) -> str:
        total = self.admitted + self.denied + self.unmatched
        problems = len(self.input_problems)
        inputs = f", {problems} input problem{'s' if problems != 1 else ''}" if problems else ""
        warned = f", {self.warned} failed on warnings (--strict)" if self.strict and self.warned else ""
        return (f"{total} object{'s' if total != 1 else ''}: {self.admitted} admitted, {self.denied} denied, "
                f"{self.unmatched} not matched{warned}{inputs} (policy generation {generation})")

    def exit_code(self) -> int:
        if self.input_problems:
            return EXIT_ERROR
        return EXIT_DENIED if self.denied or (self.strict and self.warned) else EXIT_OK


# what each output can show: --explain and --quiet are refused where they would mean nothing
EXPLAINS = ("text", "yaml", "json")
QUIET = ("text", "json", "patch", "junit", "sarif")


def _usage(message: str) -> int:
    print(f"trainadmit check: {message} (see: trainadmit check --help)", file=sys.stderr)
    return EXIT_ERROR


def _cluster(args: argparse.Namespace) -> ClusterView | None:
    live = args.kubeconfig is not None or args.context is not None
    if live and args.cluster:
        print("trainadmit check: --cluster and --kubeconfig/--context both give the cluster view: choose one",
              file=sys.stderr)
        return None
    if live:
        from ..cluster.listed import ListError, listed_cluster

        try:
            return listed_cluster(args.kubeconfig or None, args.context)
        except ListError as exc:
            print(f"trainadmit check: cannot build the cluster view: {exc}", file=sys.stderr)
            return None
    if not args.cluster:
        return NoCluster()
    from ..cluster.snapshot import SnapshotCluster, SnapshotError

    try:
        return SnapshotCluster.from_files(args.cluster)
    except (OSError, SnapshotError) as exc:
        print(f"trainadmit check: cannot read cluster snapshot: {exc}", file=sys.stderr)
        return None


def _output(args: argparse.Namespace, options: Options) -> Output:
    out = sys.stdout
    if args.output == "text":
        return TextOutput(out, options)
    if args.output == "json":
        return JsonOutput(out, record, options)
    if args.output == "patch":
        return JsonOutput(out, patch_element, options)
    if args.output == "yaml":
        return YamlOutput(out, options=options)
    from .cireports import JunitOutput, SarifOutput

    return (JunitOutput if args.output == "junit" else SarifOutput)(out, options)


SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
AUTHENTICATED, UNAUTHENTICATED, ANONYMOUS = "system:authenticated", "system:unauthenticated", "system:anonymous"


def requester(user: str | None, groups: list[str] | None) -> dict | None:
    """The userInfo of ``--as USER [--as-group GROUP]…``, as the apiserver's impersonation gives it
    (k8s.io/apiserver endpoints/filters/impersonation.go): a ServiceAccount user named without groups gets its
    account's groups (``system:serviceaccounts``, ``system:serviceaccounts:<namespace>``); ``system:anonymous`` gets
    ``system:unauthenticated``, every other user ``system:authenticated`` unless a group says authenticated or
    unauthenticated already (each case measured with `kubectl auth whoami --as …` on kube-apiserver v1.36.2).
    None without --as (each object's own requester: an AdmissionReview's userInfo, else nobody)."""
    if user is None:
        return None
    found = list(groups or [])
    if not groups and user.startswith(SERVICE_ACCOUNT_PREFIX) and user.count(":") == 3:
        namespace = user.split(":")[2]
        found = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"]
    if user == ANONYMOUS:
        if UNAUTHENTICATED not in found:
            found.append(UNAUTHENTICATED)
    elif not {AUTHENTICATED, UNAUTHENTICATED} & set(found):
        found.append(AUTHENTICATED)
    return {"username": user, "groups": found}


def cmd_check(args: argparse.Namespace) -> int:
    if args.explain and args.output not in EXPLAINS:
        return _usage(f"--explain shows with -o {', '.join(EXPLAINS)}, not with -o {args.output}")
    if args.quiet and args.output not in QUIET:
        return _usage(f"--quiet has no meaning with -o {args.output}: it prints the admitted objects")
    as_user, as_groups = getattr(args, "as_user", None), getattr(args, "as_groups", None)
    if as_groups and as_user is None:
        return _usage("--as-group names a group of the --as user: give --as USER too")
    if as_user is not None and not as_user.strip():
        return _usage("--as needs a user name (userInfo.username)")
    sender = requester(as_user, as_groups)
    try:
        files = manifest_files(args.files)
    except InputError as exc:
        print(f"trainadmit check: {exc}", file=sys.stderr)
        return EXIT_ERROR
    policy = load_policy_or_report(args.policy, policy_cache_dir())
    if policy is None:
        return EXIT_ERROR
    cluster = _cluster(args)
    if cluster is None:
        return EXIT_ERROR
    try:
        olds = old_objects([args.old]) if args.old else None
    except InputError as exc:
        print(f"trainadmit check: --old: {exc}", file=sys.stderr)
        return EXIT_ERROR
    explainer = None
    if args.explain:
        from ..authoring.explain import Explainer

        explainer = Explainer(policy, args.policy)
    options = Options(namespace=args.namespace, explainer=explainer, strict=args.strict, quiet=args.quiet,
                      cluster=not isinstance(cluster, NoCluster))
    output = _output(args, options)
    tally = Tally(strict=args.strict)

    def problem(exc: InputError) -> None:  # reported when met; the rest is still checked, the exit code is 2
        message = str(exc)
        tally.input_problems.append(message)
        # FILE:LINE:COL: message at the start of the line, as compilers print it (editors jump to it)
        print(message if exc.line is not None else f"trainadmit: {message}", file=sys.stderr)
        output.problem(message, message.split(":", 1)[0].split("#", 1)[0] or None, exc.line, exc.column)

    view, submitted, held = _submitted(files, cluster, args.namespace)

    def decided(item: Item) -> Decision:
        return decide(policy, Request(item.obj, operation=item.operation, old=item.old,
                                      namespace=item.namespace or args.namespace,
                                      user=sender if sender is not None else item.user or {},
                                      phase=deciding_phase(item.operation)), view)

    def report(item: Item, decision: Decision) -> None:
        tally.add(decision)
        output.add(item, decision)
        workloads = getattr(cluster, "workloads", None)  # the run applies its objects in order (budgets)
        if workloads is not None and decision.matched and decision.allowed and item.operation == "CREATE":
            workloads.admitted(decision.mutated if decision.mutated is not None else item.obj,
                               item.namespace or args.namespace)

    for item in iter_items(files, problem):
        if olds is not None:
            try:
                item = as_update(item, olds)
            except InputError as exc:
                problem(exc)
                continue
        if submitted is not None:
            if item.source == STDIN_NAME:
                _carried(submitted, item, args.namespace)
            submitted.missed.clear()
        decision = decided(item)
        if submitted is not None and submitted.missed and item.source == STDIN_NAME:
            held.append(item)  # it names an object standard input may still give: decided at the end
            continue
        report(item, decision)
    for item in held:
        report(item, decided(item))
    output.close(tally.summary(policy.generation))
    return tally.exit_code()


def _submitted(files: list[str], cluster: ClusterView, namespace: str):
    """The cluster view with the objects the input carries with its workloads (``companions``), when the input
    has any or standard input may give some; and the list of stdin items decided at the end."""
    from .companions import SubmittedView, scan_files
    from .inputs import STDIN

    submitted = SubmittedView(cluster, namespace)
    scan_files(files, submitted, lambda item: item.namespace or namespace)
    if not submitted.holds_any and STDIN not in files:
        return cluster, None, []
    return submitted, submitted, []


def _carried(submitted, item: Item, namespace: str) -> None:
    from .companions import companion_kind

    kind = companion_kind(item.obj)
    if kind is not None:
        submitted.add(kind, item.obj, item.namespace or namespace)
