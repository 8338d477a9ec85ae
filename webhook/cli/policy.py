"""`trainadmit policy lint|test|schema|configmap|priorityclasses`: tools for the platform team's policy directory."""

from __future__ import annotations

import argparse
import sys

from .common import EXIT_DENIED, EXIT_ERROR, EXIT_OK, load_policy_or_report
from .render import to_json


def cmd_policy_lint(args: argparse.Namespace) -> int:
    from ..authoring.lint import lint

    findings, unreadable = lint(args.dir)
    for finding in findings:
        print(finding)
    if unreadable:
        return EXIT_ERROR
    if findings:
        print(f"{len(findings)} finding{'s' if len(findings) != 1 else ''} in {args.dir}")
        return EXIT_DENIED
    policy = load_policy_or_report(args.dir)
    if policy is None:
        return EXIT_ERROR
    print(f"{args.dir}: policy generation {policy.generation}: {len(policy.pools)} pools, "
          f"{len(policy.datasets)} datasets, {len(policy.checkpoints)} checkpoint classes, "
          f"{len(policy.tiers)} priority tiers, {len(policy.quotas)} quotas, {len(policy.rules)} rules: OK")
    return EXIT_OK


def cmd_policy_test(args: argparse.Namespace) -> int:
    from ..authoring.testrunner import junit, run

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
    from ..authoring.schema import policy_json_schema

    print(to_json(policy_json_schema()))
    return EXIT_OK


def cmd_policy_configmap(args: argparse.Namespace) -> int:
    from ..authoring.configmap import policy_configmap

    if load_policy_or_report(args.dir) is None:
        return EXIT_ERROR
    print(policy_configmap(args.dir, args.name, args.namespace), end="")
    return EXIT_OK


def cmd_policy_priorityclasses(args: argparse.Namespace) -> int:
    from ..authoring.priorityclasses import priority_classes

    policy = load_policy_or_report(args.dir)
    if policy is None:
        return EXIT_ERROR
    print(priority_classes(policy), end="")
    return EXIT_OK
