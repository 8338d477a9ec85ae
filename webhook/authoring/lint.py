"""`trainadmit policy lint`: every problem of every file in one run, sorted by file and line.

What loading checks (schema, cross references, the NCCL values a policy injects, CEL), what loads but
cannot be what was meant (below), and the test suites (`authoring.suite`). Each finding names the
file, the line, the field and a fix. Errors stop the policy from loading; warnings do not (the
server would serve the set), so they fail lint only with ``--strict``. Exit codes: 0 clean (or only
warnings), 1 errors (or warnings with ``--strict``), 2 unreadable (a file that is not YAML or not
UTF-8, a missing directory).
"""

from __future__ import annotations

import difflib
import fnmatch
import itertools
from pathlib import Path

from ..engine import RULES
from ..engine.workloads import HANDLED_KINDS, OWNERS
from ..policy import PolicySet
from ..policy.loader import LoadReport, PolicyProblem, inspect_policy_dir, sort_key
from ..policy.models import LABEL_KEY_RE, Enforceable, GangBackend
from .suite import load_suites
from .testrunner import known_rules


def format_finding(f: PolicyProblem) -> str:
    """`file:line: error: field: message` and the fix on the next line, as compilers print them."""
    where = f.file + (f":{f.line}" if f.line else "") + (f":{f.column}" if f.line and f.column else "")
    text = f"{where}: {f.severity}: {f.field + ': ' if f.field else ''}{f.message}"
    return text + (f"\n    fix: {f.fix}" if f.fix else "")


def _overlap(a: str, b: str) -> bool:
    """Whether two namespace globs can match a common name, tested on names built from their parts
    (each one's literal prefix joined to the other's literal suffix, and each one's own example)."""
    def parts(p: str) -> tuple[str, str]:
        head, _, _ = p.partition("*")
        _, _, tail = p.rpartition("*")
        return head.replace("?", "x"), tail.replace("?", "x")

    (pa, sa), (pb, sb) = parts(a), parts(b)
    candidates = {a.replace("*", "x").replace("?", "x"), b.replace("*", "x").replace("?", "x"),
                  pa + sb, pb + sa, pa + "x" + sb, pb + "x" + sa, pa + pb + "x" + sa + sb, pb + pa + "x" + sb + sa}
    return any(fnmatch.fnmatchcase(c, a) and fnmatch.fnmatchcase(c, b) for c in candidates)


def semantic_findings(report: LoadReport) -> list[PolicyProblem]:
    """What loads but cannot be what was meant, for the documents that loaded."""
    policy = report.policy
    assert policy is not None
    out: list[PolicyProblem] = []

    def at(kind: str, name: str, loc: tuple, message: str, fix: str, shown_as: str | None = None) -> None:
        if (kind, name) in report.nodes:  # a stand-in for a document that did not load has its own error
            out.append(report.problem(kind, name, loc, message, fix, shown_as=shown_as))

    platform_name = policy.platform_doc.metadata.name
    spec = policy.platform
    # two quotas that can match the same namespace with different settings: only one applies
    for (na, qa), (nb, qb) in itertools.combinations(sorted(policy.quotas.items()), 2):
        if qa.model_dump(exclude={"namespaces"}) == qb.model_dump(exclude={"namespaces"}):
            continue
        exact = set(qa.namespaces) & set(qb.namespaces)
        if exact:
            at("Quota", nb, ("spec", "namespaces"), f"namespace(s) {sorted(exact)} are also listed by Quota {na} with "
               "other settings; only the first by name applies", f"list each namespace in one Quota ({na} or {nb})")
            continue
        globs = [(a, b) for a in qa.namespaces for b in qb.namespaces
                 if ("*" in a or "?" in a) and ("*" in b or "?" in b) and _overlap(a, b)]
        if globs:
            at("Quota", nb, ("spec", "namespaces"), f"pattern {globs[0][1]!r} overlaps {globs[0][0]!r} of Quota {na}, "
               "which has other settings; a namespace matching both gets only one",
               "make the patterns disjoint, or give both quotas the same settings")
    # enforced fields that nothing in the policy can set (a backend left to auto may be any of them)
    enforce = set(spec.enforce)
    auto = spec.gang.backend is GangBackend.auto
    unsatisfiable = {
        Enforceable.queue: not auto and spec.gang.backend not in (GangBackend.kueue, GangBackend.volcano,
                                                                  GangBackend.kai),
        Enforceable.schedulerName: not auto and policy.scheduler_name is None,
        Enforceable.priorityClassName: not policy.tiers,
        Enforceable.ncclEnv: not any(p.nccl.env for p in policy.pools.values()),
        Enforceable.rdmaNetworks: not any(p.rdma and p.rdma.networks for p in policy.pools.values()),
    }
    for item, never in unsatisfiable.items():
        if item in enforce and never:
            at("Platform", platform_name, ("spec", "enforce", spec.enforce.index(item)),
               f"{item.value} is enforced, but no setting of this policy ever sets it (backend "
               f"{spec.gang.backend.value}); the enforcement can never apply",
               f"remove {item.value} from spec.enforce, or add the setting that sets it", shown_as="spec.enforce")
    # children trusted from controllers of kinds that create none: a typo, which would trust nobody more
    owners = sorted(o.resource for o in OWNERS)
    for resource in spec.controllers:
        if resource not in owners:
            close = difflib.get_close_matches(resource, owners, n=1)
            at("Platform", platform_name, ("spec", "controllers", resource),
               f"{resource} is no kind whose Pods or child objects trainadmit leaves to their controller",
               f"did you mean {close[0]}?" if close else f"use one of: {', '.join(owners)}")
    for key in (policy.keys.pool, policy.keys.applied):
        if not LABEL_KEY_RE.match(key):
            at("Platform", platform_name, ("spec", "intentPrefix"), f"intent key {key!r} is not a valid Kubernetes "
               "label key", "use a DNS subdomain of at most 253 characters")
    for name, pool in sorted(policy.pools.items()):
        for i, level in enumerate(pool.topology.levels):
            if pool.capacityNodes is not None and level.maxNodes > pool.capacityNodes:
                at("Pool", name, ("spec", "topology", "levels", i, "maxNodes"),
                   f"{level.maxNodes} nodes is more than the pool's capacityNodes ({pool.capacityNodes})",
                   "lower maxNodes or raise capacityNodes", shown_as=f"spec.topology.levels[{level.name}].maxNodes")
        if pool.gpu.product and pool.gpu.product not in pool.nodeSelector.values():
            at("Pool", name, ("spec", "nodeSelector"), f"gpu.product is {pool.gpu.product}, but the node selector does "
               "not select it: Jobs may land on other GPU types",
               f"add nvidia.com/gpu.product: {pool.gpu.product} to spec.nodeSelector")
        if not pool.nodeSelector:
            at("Pool", name, ("spec", "nodeSelector"), "empty: Jobs of this pool could land on any node",
               "add the node labels that select the pool's nodes")
    mounts: dict[str, tuple[str, str]] = {"/dev/shm": ("Platform", platform_name)}
    for kind, items in (("Dataset", policy.datasets), ("CheckpointClass", policy.checkpoints)):
        for name, item in sorted(items.items()):
            other = mounts.get(item.mountPath)
            if other:
                at(kind, name, ("spec", "mountPath"), f"{item.mountPath} is also used by {other[0]} {other[1]}",
                   "give each volume its own mountPath")
            mounts[item.mountPath] = (kind, name)
    return out


def controller_account_findings(report: LoadReport) -> list[PolicyProblem]:
    """A warning for each controller account (a kind's default or ``Platform.spec.controllers``) in a namespace a
    Quota covers: whoever may create a ServiceAccount, or a Pod that mounts one, there can act as that controller,
    whose Pods no webhook decides (controller namespaces must be platform-only, docs/security.md)."""
    policy = report.policy
    assert policy is not None
    accounts = {u for o in OWNERS for u in o.users} | {u for us in policy.platform.controllers.values() for u in us}
    out = []
    for account in sorted(accounts):
        parts = account.split(":")
        if len(parts) != 4 or parts[:2] != ["system", "serviceaccount"]:
            continue
        for name, quota in sorted(policy.quotas.items()):
            globs = [g for g in quota.namespaces if fnmatch.fnmatchcase(parts[2], g)]
            if globs and ("Quota", name) in report.nodes:
                out.append(report.problem(
                    "Quota", name, ("spec", "namespaces", quota.namespaces.index(globs[0])),
                    f"{account} is trusted as a controller (its Pods skip both webhooks), and namespace {parts[2]} is "
                    "one this Quota's users work in: a user who can create that ServiceAccount can act as it",
                    f"run the controller in a namespace only the platform team administers, and name that account in "
                    f"Platform.spec.controllers; or remove {parts[2]} from this Quota", severity="warning"))
    return out


def lint(directory: str | Path) -> tuple[list[PolicyProblem], bool]:
    """(every finding of the policy files and the test suites, sorted by file and line; unreadable)."""
    findings, unreadable, _ = lint_with_policy(directory)
    return findings, unreadable


def lint_with_policy(directory: str | Path) -> tuple[list[PolicyProblem], bool, PolicySet | None]:
    """``lint``, and the policy set the directory loads as when it has no errors (read once)."""
    report = inspect_policy_dir(directory, RULES, HANDLED_KINDS)
    findings = list(report.problems)
    if report.policy is not None:
        findings += semantic_findings(report)
        findings += controller_account_findings(report)
        _, suite_problems = load_suites(Path(directory), known_rules(report.policy))
        findings += suite_problems
    findings.sort(key=sort_key)
    unreadable = report.unreadable or any(f.unreadable for f in findings)
    clean = not unreadable and not any(f.is_error for f in findings)
    return findings, unreadable, report.policy if clean else None
