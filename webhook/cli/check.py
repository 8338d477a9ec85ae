"""`trainadmit check`: decide offline what the webhook would do with manifests (CI)."""

from __future__ import annotations

import argparse
import sys

from ..cluster.snapshot import SnapshotCluster, SnapshotError
from ..engine import Request, decide
from ..engine.clusterview import ClusterView, NoCluster
from ..engine.request import deciding_phase
from .common import EXIT_DENIED, EXIT_ERROR, EXIT_OK, load_policy_or_report
from .inputs import InputError, read_inputs, with_old
from .render import record, text, to_json, to_yaml


def cmd_check(args: argparse.Namespace) -> int:
    policy = load_policy_or_report(args.policy)
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
        if args.old:
            items = with_old(items, read_inputs([args.old]))
    except InputError as exc:
        print(f"trainadmit: {exc}", file=sys.stderr)
        return EXIT_ERROR
    explainer = None
    if args.explain:
        from ..authoring.explain import Explainer

        explainer = Explainer(policy, args.policy)
    denied = admitted = unmatched = 0
    records, objects, patches, out = [], [], [], []
    for item in items:
        decision = decide(policy, Request(item.obj, operation=item.operation, old=item.old,
                                          namespace=item.namespace or args.namespace, user=item.user or {},
                                          phase=deciding_phase(item.operation)),
                          cluster)
        if not decision.matched:
            unmatched += 1
        elif decision.allowed:
            admitted += 1
        else:
            denied += 1
        if args.output == "text":
            out.append(text(item, decision, explainer))
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
