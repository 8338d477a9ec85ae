"""`trainadmit audit`: what a policy says about the training workloads already in a cluster.

Admission sees each workload once, at CREATE; audit re-decides every stored one, with the engine's
own decision (``cluster.judge``: the function `check` and the server use, asked as a CREATE of the
stored object), under the served policy or a proposed one, and says per workload and per namespace
which are now denied (the rules), which would be configured differently (each field the policy would
set, with the policy setting behind it, as `check --explain` prints them) and which are compliant.
Children (a JobSet's Jobs, a PyTorchJob's Pods) are judged through their parent, as admission does.

Where the workloads come from: a live cluster (``--kubeconfig``: every handled kind, listed page by
page; the served policy is the ConfigMap the webhook mounts unless ``-p`` names another) or saved
lists (files, directories, ``-`` for stdin: `kubectl get nodes,resourcequotas,jobs,pytorchjobs,... -A
-o json`). A cluster without the served ConfigMap (a server run from a clone's ``policies/``) is judged by
``$TRAINADMIT_POLICY_DIR`` or ``./policies``, said in one line, or refused in one line asking for ``-p``.
Either way the cluster view (nodes, quotas, referenced objects, what each namespace's
workloads hold) is read first and the workloads a second time, one at a time: memory holds the view
and one workload, not the cluster's workloads (stdin is spooled to a temporary file for that).

Namespace budgets are judged in creation order: each workload against those of its namespace created
before it, so of three Jobs that together exceed the budget the later ones are the ones denied.

Output: text (default), JSON (``{"workloads": [...], "namespaces": {...}, "summary": {...}}``, written
as it goes), or ``report``: the reports `serve --reconcile` writes (one per namespace; OpenReports or,
with ``--report-api wgpolicyk8s``, PolicyReport). Exit codes as `check`'s: 0 no workload is denied,
1 some are, 2 unreadable input, an invalid policy, or a cluster that cannot be read.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import field
from pathlib import Path
from typing import IO, Any

from ..grammars.lazydataclass import dataclass
from .common import DEFAULT_POLICY_DIR, EXIT_DENIED, EXIT_ERROR, EXIT_OK, load_policy_or_report, policy_cache_dir
from .inputs import STDIN, InputError, manifest_files

SERVED_POLICY = "trainadmit-system/trainadmit-policies"  # cluster.listed.SERVED_POLICY, as the flag writes it
STATUS_WORDS = {"denied": "DENIED", "changes": "WOULD CHANGE", "compliant": "COMPLIANT"}


class AuditError(Exception):
    """The cluster or the input cannot be read: one line, exit code 2."""


# ---- where the workloads come from ----------------------------------------------------------------

class FileSource:
    """Saved lists: read once for the view, once more for the workloads."""

    def __init__(self, paths: list[str]):
        self._spool: str | None = None
        self.files = [self._spooled() if p == STDIN else p for p in manifest_files(paths)]

    def _spooled(self) -> str:
        """stdin, copied to a temporary file (it is read twice); removed by ``close``."""
        if self._spool is None:
            fd, self._spool = tempfile.mkstemp(prefix="trainadmit-audit-", suffix=".input")
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                shutil.copyfileobj(sys.stdin, out)
        return self._spool

    def objects(self) -> Iterator[tuple[str, Any]]:
        from .streamlists import iter_objects

        for path in self.files:
            for obj in iter_objects(path):
                yield path, obj

    def view(self, keeps=None):
        from ..cluster.snapshot import SnapshotCluster, SnapshotError

        view = SnapshotCluster([], name="audit")
        view.workloads.keeps = keeps
        for path, obj in self.objects():
            try:
                view.add(obj)
            except SnapshotError as exc:
                raise InputError(f"{'<stdin>' if path == self._spool else path}: {exc}") from exc
        view.finish()
        return view

    def owners(self):
        """The StatefulSets (and leader Pods) of the lists, for a Pod's provenance (``cluster.owners``)."""
        from ..cluster.owners import StoredOwners

        return StoredOwners(lambda: (obj for _, obj in self.objects()))

    def workloads(self) -> Iterator[Any]:
        from ..engine.workloads import adapter_for

        for _, obj in self.objects():
            if isinstance(obj, dict) and adapter_for(obj.get("apiVersion"), obj.get("kind")) is not None:
                yield obj

    def close(self) -> None:
        if self._spool is not None:
            Path(self._spool).unlink(missing_ok=True)


class ClusterSource:
    """A live cluster (``cluster.listed``, as `check --kubeconfig` reads it): every kind listed for the view,
    then the workloads page by page."""

    def __init__(self, kubeconfig: str | None, context: str | None):
        from ..cluster.listed import ListError, api_client

        try:
            self.api = api_client(kubeconfig, context)
        except ListError as exc:
            raise AuditError(f"cannot use the cluster: {exc}") from exc

    def view(self, keeps=None):
        from ..cluster.listed import ListError, listed_cluster

        try:
            return listed_cluster(client_api=self.api, keeps=keeps)
        except ListError as exc:
            raise AuditError(f"cannot build the cluster view: {exc}") from exc

    def owners(self):
        """The StatefulSet (and leader Pod) a Pod's provenance names, read when asked (``cluster.owners``)."""
        from ..cluster.listed import ListError
        from ..cluster.owners import ApiOwners

        read = ApiOwners(self.api)

        def owner(namespace: str, ref: dict):
            try:
                return read(namespace, ref)
            except ListError as exc:
                raise AuditError(f"cannot read the owner of a Pod: {exc}") from exc

        return owner

    def workloads(self) -> Iterator[Any]:
        from ..cluster.listed import ListError, workloads

        stream = workloads(self.api)
        while True:
            try:
                item = next(stream, None)
            except ListError as exc:
                raise AuditError(f"cannot list the workloads: {exc}") from exc
            if item is None:
                return
            yield item

    def served_policy(self, where: str, directory: Path) -> Path | None:
        """The served policy's ConfigMap (``namespace/name``), written out as the directory the server mounts;
        None when the cluster has no such ConfigMap (a server run from a policy directory: `serve -p`)."""
        from ..cluster.listed import ListError, served_policy_files

        namespace, _, name = where.partition("/")
        if not namespace or not name:
            raise AuditError(f"--served-policy {where!r}: expected NAMESPACE/NAME")
        try:
            files = served_policy_files(self.api, namespace, name)
        except ListError as exc:
            if getattr(exc.__cause__, "status", None) == 404:
                return None
            raise AuditError(f"cannot read {exc}; or pass the policy to judge by: -p POLICY_DIR") from exc
        for key, text in files.items():
            (directory / key).write_text(text, encoding="utf-8")
        return directory

    def close(self) -> None:
        self.api.close()


# ---- what is said ----------------------------------------------------------------------------------

@dataclass
class Namespace:
    statuses: Counter = field(default_factory=Counter)
    rules: Counter = field(default_factory=Counter)


@dataclass
class Tally:
    statuses: Counter = field(default_factory=Counter)
    namespaces: dict[str, Namespace] = field(default_factory=dict)

    def add(self, verdict) -> None:
        self.statuses[verdict.status.value] += 1
        if verdict.status.value == "skipped":
            return
        ns = self.namespaces.setdefault(verdict.namespace, Namespace())
        ns.statuses[verdict.status.value] += 1
        for v in verdict.decision.violations:
            ns.rules[v.rule] += 1

    def exit_code(self) -> int:
        return EXIT_DENIED if self.statuses["denied"] else EXIT_OK

    def summary(self, generation: str) -> str:
        s = self.statuses
        judged = s["denied"] + s["changes"] + s["compliant"]
        return (f"{judged} workload{'s' if judged != 1 else ''}: {s['denied']} denied, {s['changes']} would change, "
                f"{s['compliant']} compliant; {s['skipped']} object{'s' if s['skipped'] != 1 else ''} not judged "
                f"(children of a judged workload, not GPU workloads, exempt) (policy generation {generation})")


def budgeted(policy, namespace: str) -> bool:
    """Whether a namespace has a budget: only there are its workloads kept one by one (to judge each against
    those created before it); elsewhere audit keeps what they hold in total."""
    found = policy.quota_for(namespace)
    return found is not None and found[1].gpuQuota is not None and not policy.is_exempt(namespace)


def budgets(policy, view, namespace: str) -> list[dict[str, Any]]:
    """What the namespace's unfinished workloads hold of each GPU resource, and the policy's budget."""
    found = policy.quota_for(namespace)
    limit = found[1].gpuQuota if found is not None else None
    out = []
    for resource in sorted(policy.gpu_resources):
        usage = view.namespace_gpus(namespace, resource)
        if usage is None or not usage.total:
            continue
        out.append({"resource": resource, "held": usage.total, "workloads": usage.workloads, "budget": limit,
                    "quota": found[0] if found is not None and limit is not None else None})
    return out


class TextOutput:
    def __init__(self, out: IO[str], explainer=None):
        self.out, self.explainer = out, explainer

    def add(self, verdict) -> None:
        if verdict.status.value == "skipped":
            return
        from .render import violation_lines

        d = verdict.decision
        head = f"{verdict.identity}: {STATUS_WORDS[verdict.status.value]}"
        lines = []
        if verdict.status.value == "denied":
            lines.append(head + f" ({len(d.denials)} problem{'s' if len(d.denials) != 1 else ''})")
        elif verdict.status.value == "changes":
            concerns = sorted({c.concern for c in verdict.changes})
            lines.append(head + f" ({len(verdict.changes)} field{'s' if len(verdict.changes) != 1 else ''}: "
                         f"{', '.join(concerns)})")
            for change in verdict.changes:
                ref = self.explainer.injection(change.setting) if self.explainer and change.setting else ""
                lines.append("    " + change.text() + (f"  ({ref})" if ref else ""))
        else:
            lines.append(head)
        lines.extend(violation_lines(d))  # as `check` prints them
        if verdict.applied_generation and verdict.applied_generation != d.generation:
            lines.append(f"  configured by policy generation {verdict.applied_generation}")
        self.out.write("\n".join(lines) + "\n")

    def close(self, tally: Tally, namespaces: dict[str, list[dict]], summary: str) -> None:
        for name in sorted(tally.namespaces):
            ns = tally.namespaces[name]
            s = ns.statuses
            total = sum(s.values())
            line = (f"namespace {name}: {total} workload{'s' if total != 1 else ''}: {s['denied']} denied, "
                    f"{s['changes']} would change, {s['compliant']} compliant")
            for b in namespaces.get(name, []):
                limit = f" of its budget {b['budget']} (Quota {b['quota']})" if b["budget"] is not None else ""
                line += f"; {b['resource']}: {b['held']} held by {b['workloads']}{limit}"
            if ns.rules:
                line += "; rules: " + ", ".join(f"{r} ({n})" for r, n in sorted(ns.rules.items()))
            self.out.write(line + "\n")
        self.out.write(summary + "\n")


class JsonOutput:
    """``{"workloads": [...], "namespaces": {...}, "summary": {...}}``, the workloads written as judged."""

    def __init__(self, out: IO[str]):
        self.out, self.count = out, 0
        self.out.write('{\n  "workloads": [')

    def add(self, verdict) -> None:
        from .render import to_json

        if verdict.status.value == "skipped":
            return
        element = to_json(verdict.as_dict()).replace("\n", "\n    ")
        self.out.write(("\n    " if self.count == 0 else ",\n    ") + element)
        self.count += 1

    def close(self, tally: Tally, namespaces: dict[str, list[dict]], summary: str) -> None:
        from .render import to_json

        self.out.write("\n  ],\n" if self.count else "],\n")
        body = {name: {"statuses": dict(ns.statuses), "rules": dict(sorted(ns.rules.items())),
                       "gpus": namespaces.get(name, [])} for name, ns in sorted(tally.namespaces.items())}
        self.out.write('  "namespaces": ' + to_json(body).replace("\n", "\n  ") + ",\n")
        counts = {status: tally.statuses[status] for status in ("denied", "changes", "compliant", "skipped")}
        self.out.write('  "summary": ' + to_json({**counts, "text": summary}).replace("\n", "\n  ") + "\n}\n")


class ReportOutput:
    """The reports `serve --reconcile` writes, one per namespace, as a YAML stream. Per namespace only the
    results a report keeps are held (at most ``reports.MAX_RESULTS``, failures first), and every result is
    counted for the summary."""

    def __init__(self, out: IO[str], api):
        from ..cluster.reports import MAX_RESULTS

        self.out, self.api, self.limit = out, api, MAX_RESULTS
        self.kept: dict[str, list[dict]] = {}
        self.totals: dict[str, Counter] = {}
        self.generation = ""

    def add(self, verdict) -> None:
        from ..cluster.reports import ORDER, results_of

        self.generation = verdict.decision.generation
        for result in results_of(verdict):
            self.totals.setdefault(verdict.namespace, Counter())[result["result"]] += 1
            kept = self.kept.setdefault(verdict.namespace, [])
            kept.append(result)
            if len(kept) > 2 * self.limit:  # keep the ones a report would: failures, then warnings, then passes
                kept.sort(key=lambda r: ORDER.get(r["result"], 9))
                del kept[self.limit:]

    def close(self, tally: Tally, namespaces: dict[str, list[dict]], summary: str) -> None:
        import yaml

        from ..cluster.reports import build_report

        now = int(time.time())
        reports = []
        for name in sorted(self.kept):
            report = build_report(self.api, name, self.kept[name], self.generation, now)
            report["summary"] = {k: self.totals[name].get(k, 0) for k in report["summary"]}
            omitted = sum(report["summary"].values()) - len(report["results"])
            report["metadata"]["annotations"]["trainadmit.io/results-omitted"] = str(omitted)
            reports.append(report)
        yaml.safe_dump_all(reports, self.out, sort_keys=False, width=120)
        print(summary, file=sys.stderr)


# ---- the command -------------------------------------------------------------------------------------

def _policy(args: argparse.Namespace, source, scratch: Path):
    if args.policy:
        return load_policy_or_report(args.policy, policy_cache_dir()), args.policy
    if isinstance(source, ClusterSource):
        directory = source.served_policy(args.served_policy, scratch)
        if directory is not None:
            return load_policy_or_report(str(directory)), str(directory)
        # no served ConfigMap (trainadmit installed from a clone, `serve -p policies`): the local policy, said
        where = f"{DEFAULT_POLICY_DIR} ($TRAINADMIT_POLICY_DIR)" if os.environ.get("TRAINADMIT_POLICY_DIR") \
            else f"./{DEFAULT_POLICY_DIR}"
        if not Path(DEFAULT_POLICY_DIR).is_dir():
            raise AuditError(f"the cluster has no served policy ConfigMap {args.served_policy} and there is no "
                             f"{where}: pass the policy to judge by with -p POLICY_DIR")
        print(f"trainadmit audit: the cluster has no served policy ConfigMap {args.served_policy}; judging by {where} "
              "(-p POLICY_DIR names another)", file=sys.stderr)
    return load_policy_or_report(DEFAULT_POLICY_DIR, policy_cache_dir()), DEFAULT_POLICY_DIR


def cmd_audit(args: argparse.Namespace) -> int:
    live = args.kubeconfig is not None or args.context is not None
    if live and args.files:
        print("trainadmit audit: give --kubeconfig/--context or saved lists, not both", file=sys.stderr)
        return EXIT_ERROR
    if not live and not args.files:
        print("trainadmit audit: give saved lists (FILE: files, directories, - for stdin) or --kubeconfig FILE (see: "
              "trainadmit audit --help)", file=sys.stderr)
        return EXIT_ERROR
    source: FileSource | ClusterSource | None = None
    scratch = Path(tempfile.mkdtemp(prefix="trainadmit-audit-policy-"))
    try:
        source = ClusterSource(args.kubeconfig or None, args.context) if live else FileSource(args.files)
        policy, policy_dir = _policy(args, source, scratch)
        if policy is None:
            return EXIT_ERROR
        return _audit(args, source, policy, policy_dir)
    except (AuditError, InputError) as exc:
        print(f"trainadmit audit: {exc}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        if source is not None:
            source.close()
        shutil.rmtree(scratch, ignore_errors=True)


def _audit(args: argparse.Namespace, source, policy, policy_dir: str) -> int:
    from ..cluster.judge import judge
    from ..cluster.reports import OPENREPORTS, WGPOLICY
    from ..cluster.workloads import AsCreated, order_of

    view = source.view(keeps=lambda ns: budgeted(policy, ns))
    out = sys.stdout
    if args.output == "json":
        output: Any = JsonOutput(out)
    elif args.output == "report":
        output = ReportOutput(out, WGPOLICY if args.report_api == "wgpolicyk8s" else OPENREPORTS)
    else:
        explainer = None
        if args.explain:
            from ..authoring.explain import Explainer

            explainer = Explainer(policy, policy_dir)
        output = TextOutput(out, explainer)
    tally = Tally()
    owners = source.owners()
    for obj in source.workloads():
        verdict = judge(policy, obj, AsCreated(view, view.workloads, order_of(obj)), namespace=args.namespace,
                        owners=owners)
        tally.add(verdict)
        output.add(verdict)
    namespaces = {name: budgets(policy, view, name) for name in tally.namespaces}
    output.close(tally, namespaces, tally.summary(policy.generation))
    return tally.exit_code()


def add_parser(sub, run) -> None:
    from .common import add_cluster_args, path_arg

    audit = sub.add_parser("audit", help="re-decide the training workloads already in a cluster (or saved lists)")
    audit.add_argument("files", nargs="*", metavar="FILE", type=path_arg,
                       help="saved lists (`kubectl get ... -A -o json`), directories, or - for stdin; not with "
                       "--kubeconfig")
    add_cluster_args(audit, "cluster.listed.AUDIT_PERMISSIONS")
    audit.add_argument("-p", "--policy", type=path_arg,
                       help="the policy to judge by (default: with --kubeconfig the served one, --served-policy, "
                       f"or where the cluster has none, and else, $TRAINADMIT_POLICY_DIR or {DEFAULT_POLICY_DIR})")
    audit.add_argument("--served-policy", default=SERVED_POLICY, metavar="NAMESPACE/NAME",
                       help="the ConfigMap the webhook mounts its policy from")
    audit.add_argument("-o", "--output", choices=["text", "json", "report"], default="text",
                       help="text for people; json: a verdict per workload, then per namespace; report: the "
                       "reports serve --reconcile writes, one per namespace")
    audit.add_argument("--report-api", choices=["openreports", "wgpolicyk8s"], default="openreports",
                       help="-o report: openreports.io/v1alpha1 Report (default) or wgpolicyk8s.io/v1alpha2 "
                       "PolicyReport")
    audit.add_argument("-n", "--namespace", default="default", help="namespace for objects that name none")
    audit.add_argument("--explain", action="store_true",
                       help="text output: the policy file and line behind each field a workload would get")
    audit.set_defaults(func=run)
