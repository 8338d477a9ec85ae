"""`trainadmit policy lint|test|schema|configmap|priorityclasses`: tools for the platform team's policy directory."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .common import EXIT_DENIED, EXIT_ERROR, EXIT_OK, load_policy_or_report
from .render import to_json


def _not_a_policy_dir(path: str) -> bool:
    """True after one line on stderr when ``path`` cannot be a policy directory (every policy command
    takes a directory; the same exit code 2 for each of them)."""
    target = Path(path)
    if target.is_dir():
        return False
    if target.exists():
        why = "a file, not a directory: give the policy directory that holds it"
    else:
        why = "no such directory"
    print(f"trainadmit policy: {path}: {why}", file=sys.stderr)
    return True


def cmd_policy_lint(args: argparse.Namespace) -> int:
    """Every finding of every file, then one summary line (``-o json``: one object; ``-o sarif``: a SARIF
    2.1.0 log). Exit 0 clean or warnings only (1 with --strict), 1 errors, 2 unreadable."""
    from ..authoring.lint import format_finding, lint_with_policy

    if _not_a_policy_dir(args.dir):
        return EXIT_ERROR
    findings, unreadable, policy = lint_with_policy(args.dir)
    errors = sum(f.is_error for f in findings)
    warnings = len(findings) - errors
    code = EXIT_ERROR if unreadable else EXIT_DENIED if errors or (warnings and args.strict) else EXIT_OK
    output = getattr(args, "output", "text")
    if output == "json":
        print(to_json({"directory": args.dir, "generation": policy.generation if policy is not None else None,
                       "errors": errors, "warnings": warnings, "unreadable": unreadable,
                       "findings": [_finding_record(f) for f in findings]}))
        return code
    if output == "sarif":
        from .cireports import lint_sarif

        print(lint_sarif(args.dir, findings, unreadable), end="")
        return code
    for finding in findings:
        print(format_finding(finding))
    counts = f"{_plural(errors, 'error')}, {_plural(warnings, 'warning')}"
    if unreadable:  # the findings above say why; the verdict is an error, so it goes where errors go
        print(f"trainadmit policy lint: {args.dir}: unreadable ({counts})", file=sys.stderr)
        return EXIT_ERROR
    if errors or (warnings and args.strict):
        print(f"{counts} in {args.dir}" + (" (--strict: warnings fail)" if not errors else ""))
        return EXIT_DENIED
    if policy is None:  # cannot happen without errors; never print a summary of nothing
        return EXIT_ERROR
    print(f"{args.dir}: policy generation {policy.generation}: {_plural(len(policy.pools), 'pool')}, "
          f"{_plural(len(policy.datasets), 'dataset')}, {_plural(len(policy.checkpoints), 'checkpoint class')}, "
          f"{_plural(len(policy.tiers), 'priority tier')}, {_plural(len(policy.quotas), 'quota')}, "
          f"{_plural(len(policy.rules), 'rule')}: OK"
          + (f" ({_plural(warnings, 'warning')})" if warnings else ""))
    return EXIT_OK


def _finding_record(f) -> dict:
    """One finding of `policy lint -o json`: where (file relative to the directory, line, document), the field,
    the severity, the message and the fix."""
    return {"file": f.file, "line": f.line, "column": f.column, "document": f.document, "field": f.field,
            "severity": f.severity,
            "message": f.message, "fix": f.fix or None}


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 'es' if word.endswith('s') else 's'}"


def cmd_policy_test(args: argparse.Namespace) -> int:
    """Every case's result, then ``N passed, M failed[, K suite errors]``. Exit 0 all passed, 1 a case failed or
    a suite could not be read, 2 the policy does not load (no test ran: its errors are listed as such) or
    the directory is not one."""
    from ..authoring.testrunner import junit, junit_load_error, run
    from ..policy import PolicyError

    if _not_a_policy_dir(args.dir):
        return EXIT_ERROR
    try:
        results, errors = run(args.dir)
    except PolicyError as exc:
        problems = [str(p) + (f" (fix: {p.fix})" if p.fix else "") for p in exc.problems]
        if args.output == "junit":
            print(junit_load_error(args.dir, problems), end="")
        print(f"trainadmit policy test: {args.dir}: the policy does not load ({_plural(len(problems), 'error')}); "
              "no test ran:", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        return EXIT_ERROR
    empty = not results and not errors
    if args.output == "junit":
        print(junit(results, errors), end="")
    elif not empty:
        for r in results:
            print(f"{'PASS' if r.ok else 'FAIL'}  {r.suite}  {r.name}")
            for f in r.failures:
                print(f"      {f}")
        for e in errors:
            print(f"ERROR {e}")
        suite_errors = f", {_plural(len(errors), 'suite error')}" if errors else ""
        print(f"{sum(r.ok for r in results)} passed, {sum(not r.ok for r in results)} failed{suite_errors}")
    if empty:  # one message, on stdout for people; on stderr when stdout carries the JUnit report
        where = sys.stderr if args.output == "junit" else sys.stdout
        if args.allow_empty:
            print(f"no policy tests under {args.dir} (accepted: --allow-empty)", file=where)
            return EXIT_OK
        print(f"no policy tests under {args.dir}: add a suite (*.test.yaml, or YAML under tests/; "
              "`trainadmit policy init` writes an example), or pass --allow-empty", file=where)
        return EXIT_DENIED
    return EXIT_DENIED if errors or any(not r.ok for r in results) else EXIT_OK


def cmd_policy_init(args: argparse.Namespace) -> int:
    from ..authoring.scaffold import ScaffoldError, write_scaffold

    try:
        written = write_scaffold(args.dir)
    except ScaffoldError as exc:
        print(f"trainadmit: {exc}", file=sys.stderr)
        return EXIT_ERROR
    for path in written:
        print(f"wrote {path}")
    print(f"next: trainadmit policy lint {args.dir} && trainadmit policy test {args.dir}")
    return EXIT_OK


def cmd_policy_schema(args: argparse.Namespace) -> int:
    from ..authoring.schema import policy_json_schema

    print(to_json(policy_json_schema()))
    return EXIT_OK


def cmd_policy_configmap(args: argparse.Namespace) -> int:
    from ..authoring.configmap import policy_configmap

    if _not_a_policy_dir(args.dir) or load_policy_or_report(args.dir) is None:
        return EXIT_ERROR
    print(policy_configmap(args.dir, args.name, args.namespace), end="")
    return EXIT_OK


def cmd_policy_webhooks(args: argparse.Namespace) -> int:
    from ..authoring.webhooks import WebhookURLError, check_url, webhook_configurations

    try:
        if args.url is not None:
            check_url(args.url)
        bundle = _ca_bundle(args.ca) if args.ca is not None else None
    except (WebhookURLError, ValueError) as exc:
        print(f"trainadmit policy webhooks: {exc}", file=sys.stderr)
        return EXIT_ERROR
    policy = None if _not_a_policy_dir(args.dir) else load_policy_or_report(args.dir)
    if policy is None:
        return EXIT_ERROR
    print(webhook_configurations(policy, args.name, args.namespace, args.service, source=args.dir, url=args.url,
                                 ca_bundle=bundle), end="")
    return EXIT_OK


def _ca_bundle(path: str) -> str:
    """``--ca``: base64 of a file of PEM CA certificates, checked as `certs inject-ca` checks it (a serving
    certificate or anything else in the caBundle of a failurePolicy Fail webhook breaks every GPU submission)."""
    import base64

    from ..certs import pki

    file = Path(path)
    if file.is_dir():
        raise ValueError(f"--ca {path}: a directory; give the CA bundle file (ca.crt)")
    if not file.is_file():
        raise ValueError(f"--ca {path}: no such file; issue one with `trainadmit certs issue`")
    bundle = file.read_bytes()
    try:
        pki.ca_bundle(bundle, f"--ca {path}")
    except pki.CertError as exc:
        raise ValueError(str(exc)) from None
    return base64.b64encode(bundle).decode()


def cmd_policy_priorityclasses(args: argparse.Namespace) -> int:
    from ..authoring.priorityclasses import priority_classes

    policy = None if _not_a_policy_dir(args.dir) else load_policy_or_report(args.dir)
    if policy is None:
        return EXIT_ERROR
    print(priority_classes(policy, args.dir), end="")
    return EXIT_OK
