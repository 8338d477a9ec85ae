"""`trainadmit check`: decide offline what the webhook would do with manifests (CI).

Run per file by pre-commit hooks and CI steps, so its start-up counts: this module imports the
engine, the manifest reader and the renderers only (never the web server, metrics, the Kubernetes
client or certificate code; `tests/test_check_imports.py` holds it to that), takes the validated
policy set from the policy cache when the same policy was validated before (no pydantic), and
imports the cluster snapshot reader and `--explain` only when asked. Objects are read, decided
and written one at a time, so memory stays flat however many manifests there are.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field

from ..engine import Decision, Request, decide
from ..engine.clusterview import ClusterView, NoCluster
from .common import EXIT_DENIED, EXIT_ERROR, EXIT_OK, load_policy_or_report, policy_cache_dir
from .inputs import InputError, iter_items, manifest_files
from .render import JsonOutput, TextOutput, YamlOutput, patch_element, record


@dataclass
class Tally:
    """What the summary line and the exit code say."""

    admitted: int = 0
    denied: int = 0
    unmatched: int = 0
    unreadable: list[str] = field(default_factory=list)

    def add(self, decision: Decision) -> None:
        if not decision.matched:
            self.unmatched += 1
        elif decision.allowed:
            self.admitted += 1
        else:
            self.denied += 1

    def summary(self, generation: str) -> str:
        total = self.admitted + self.denied + self.unmatched
        unreadable = f", {len(self.unreadable)} unreadable" if self.unreadable else ""
        return (f"{total} object{'s' if total != 1 else ''}: {self.admitted} admitted, {self.denied} denied, "
                f"{self.unmatched} not matched{unreadable} (policy generation {generation})")

    def exit_code(self) -> int:
        return EXIT_ERROR if self.unreadable else EXIT_DENIED if self.denied else EXIT_OK


def _cluster(args: argparse.Namespace) -> ClusterView | None:
    if not args.cluster:
        return NoCluster()
    from ..cluster.snapshot import SnapshotCluster, SnapshotError

    try:
        return SnapshotCluster.from_files(args.cluster)
    except (OSError, SnapshotError) as exc:
        print(f"trainadmit: cannot read cluster snapshot: {exc}", file=sys.stderr)
        return None


def cmd_check(args: argparse.Namespace) -> int:
    policy = load_policy_or_report(args.policy, policy_cache_dir())
    if policy is None:
        return EXIT_ERROR
    cluster = _cluster(args)
    if cluster is None:
        return EXIT_ERROR
    try:
        files = manifest_files(args.files)
    except InputError as exc:
        print(f"trainadmit: {exc}", file=sys.stderr)
        return EXIT_ERROR
    explainer = None
    if args.explain:
        from ..authoring.explain import Explainer

        explainer = Explainer(policy, args.policy)
    out = sys.stdout
    output = {"text": lambda: TextOutput(out, explainer), "json": lambda: JsonOutput(out, record),
              "patch": lambda: JsonOutput(out, patch_element), "yaml": lambda: YamlOutput(out)}[args.output]()
    tally = Tally()

    def unreadable(exc: InputError) -> None:
        tally.unreadable.append(str(exc))
        print(f"trainadmit: {exc}", file=sys.stderr)

    for item in iter_items(files, unreadable):
        decision = decide(policy, Request(item.obj, operation=item.operation, old=item.old,
                                          namespace=item.namespace or args.namespace, user=item.user or {}),
                          cluster)
        tally.add(decision)
        output.add(item, decision)
    output.close(tally.summary(policy.generation))
    return tally.exit_code()
