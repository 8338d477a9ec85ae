"""`trainadmit policy lint`: everything loading checks, plus what loads but cannot be what was meant.

Findings name the file, the line and the field. Exit codes: 0 clean, 1 findings, 2 unreadable
(a file that is not YAML or not UTF-8, a missing directory).
"""

from __future__ import annotations

import fnmatch
import itertools
from dataclasses import dataclass
from pathlib import Path

from ..engine import load_policy
from ..policy import PolicyError, PolicySet
from ..policy.models import LABEL_KEY_RE, Enforceable, GangBackend


@dataclass(frozen=True)
class Finding:
    file: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = self.file + (f":{self.line}" if self.line else "")
        return f"{where}: {self.field + ': ' if self.field else ''}{self.message}"


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


def semantic_findings(policy: PolicySet) -> list[Finding]:
    out: list[Finding] = []

    def at(kind: str, name: str, field: str, message: str) -> None:
        ref = policy.sources.get((kind, name))
        out.append(Finding(ref.file if ref else "<policy>", ref.line if ref else None, field, message))

    platform_name = policy.platform_doc.metadata.name
    spec = policy.platform
    # two quotas that can match the same namespace with different settings: only one applies
    for (na, qa), (nb, qb) in itertools.combinations(sorted(policy.quotas.items()), 2):
        if qa.model_dump(exclude={"namespaces"}) == qb.model_dump(exclude={"namespaces"}):
            continue
        exact = set(qa.namespaces) & set(qb.namespaces)
        if exact:
            at("Quota", nb, "spec.namespaces", f"namespace(s) {sorted(exact)} are also listed by Quota {na} with "
                                               "other settings; only the first by name applies")
            continue
        globs = [(a, b) for a in qa.namespaces for b in qb.namespaces
                 if ("*" in a or "?" in a) and ("*" in b or "?" in b) and _overlap(a, b)]
        if globs:
            at("Quota", nb, "spec.namespaces", f"pattern {globs[0][1]!r} overlaps {globs[0][0]!r} of Quota {na}, "
                                               "which has other settings; a namespace matching both gets only one")
    # enforced fields that nothing in the policy can set
    enforce = set(spec.enforce)
    unsatisfiable = {
        Enforceable.queue: spec.gang.backend not in (GangBackend.kueue, GangBackend.volcano),
        Enforceable.schedulerName: policy.scheduler_name is None,
        Enforceable.priorityClassName: not policy.tiers,
        Enforceable.ncclEnv: not any(p.nccl.env for p in policy.pools.values()),
        Enforceable.rdmaNetworks: not any(p.rdma and p.rdma.networks for p in policy.pools.values()),
    }
    for item, never in unsatisfiable.items():
        if item in enforce and never:
            at("Platform", platform_name, "spec.enforce",
               f"{item.value} is enforced, but no setting of this policy ever sets it (backend "
               f"{spec.gang.backend.value}); the enforcement can never apply")
    for key in (policy.keys.pool, policy.keys.applied):
        if not LABEL_KEY_RE.match(key):
            at("Platform", platform_name, "spec.intentPrefix",
               f"intent key {key!r} is not a valid Kubernetes label key")
    for name, pool in sorted(policy.pools.items()):
        for level in pool.topology.levels:
            if pool.capacityNodes is not None and level.maxNodes > pool.capacityNodes:
                at("Pool", name, f"spec.topology.levels[{level.name}].maxNodes",
                   f"{level.maxNodes} nodes is more than the pool's capacityNodes ({pool.capacityNodes})")
        if pool.gpu.product and pool.gpu.product not in pool.nodeSelector.values():
            at("Pool", name, "spec.nodeSelector", f"gpu.product is {pool.gpu.product}, but the node selector does not "
                                                  "select it: Jobs may land on other GPU types")
        if not pool.nodeSelector:
            at("Pool", name, "spec.nodeSelector", "empty: Jobs of this pool could land on any node")
    mounts: dict[str, tuple[str, str]] = {"/dev/shm": ("Platform", platform_name)}
    for kind, items in (("Dataset", policy.datasets), ("CheckpointClass", policy.checkpoints)):
        for name, item in sorted(items.items()):
            other = mounts.get(item.mountPath)
            if other:
                at(kind, name, "spec.mountPath", f"{item.mountPath} is also used by {other[0]} {other[1]}")
            mounts[item.mountPath] = (kind, name)
    return out


def lint(directory: str | Path) -> tuple[list[Finding], bool]:
    """(findings, unreadable)."""
    try:
        policy = load_policy(directory)
    except PolicyError as exc:
        unreadable = any(p.unreadable for p in exc.problems)
        return [Finding(p.file, p.line, p.field, p.message) for p in exc.problems], unreadable
    return semantic_findings(policy), False
