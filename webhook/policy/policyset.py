"""The loaded, cross-checked policy set and the look-ups the engine needs on every request.

Everything that can be computed once per policy generation (default pool per GPU resource, the
set of GPU resource names, rule action overrides, intent keys, compiled CEL, which quota binds a
namespace name) is computed here, at load time, so that the request path only does look-ups.

The built-in rule ids and their default actions are declared by the engine's concerns, above this
layer; the loader is handed their ids so that ``Platform.spec.rules`` can be checked against them.
"""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Collection, Mapping
from dataclasses import field
from functools import lru_cache
from typing import TYPE_CHECKING

from ..grammars.lazydataclass import dataclass
from .compiled import CompiledRule, compile_rules
from .references import reference_problems
from .vocab import RETIRED_RULES, Action, Enforceable, GangBackend

if TYPE_CHECKING:  # types only: a cached set holds plain records of these (cache), not pydantic models
    from .models import (
        CheckpointClassSpec,
        DatasetSpec,
        Fabric,
        Platform,
        PlatformSpec,
        PoolSpec,
        PriorityTierSpec,
        QuotaSpec,
        RuleSpec,
    )

DEFAULT_SCHEDULER = "default-scheduler"
BACKEND_SCHEDULERS = {GangBackend.volcano: "volcano", GangBackend.coscheduling: "scheduler-plugins-scheduler",
                      GangBackend.kai: "kai-scheduler"}
# the queue a backend puts a workload in when it names none: Volcano's and Kueue's "default"; KAI's podgrouper
# falls back to "default-queue", the leaf queue its install creates (KAI-Scheduler default_grouper.go)
BACKEND_QUEUES = {GangBackend.kai: "default-queue"}
DEFAULT_QUEUE = "default"
# The native PodGroup API by the Kubernetes minor version that introduced it: 1.36 serves
# scheduling.k8s.io/v1alpha2 (its disruptionMode an enum), 1.37 serves v1beta1 (a struct) and no
# longer v1alpha2 (KEP-4671; k8s.io/api v0.36.0 scheduling/v1alpha2, master scheduling/v1beta1)
NATIVE_PODGROUP_APIS: tuple[tuple[tuple[int, int], str], ...] = (
    ((1, 36), "scheduling.k8s.io/v1alpha2"), ((1, 37), "scheduling.k8s.io/v1beta1"))
# nativeMode job-scheduling: Job.spec.scheduling first exists in 1.37 (a 1.36 apiserver drops it)
JOB_SCHEDULING_SINCE = (1, 37)
# the gate without which the apiserver drops a native gang's schedulingConstraints.topology (alpha in 1.36, 1.37)
TOPOLOGY_GATE = "TopologyAwareWorkloadScheduling"
# the scheduler's gang plugin: its own alpha gate in 1.35 and 1.36, part of GenericWorkload from 1.37 (KEP-4671)
GANG_GATE = "GangScheduling"
GANG_GATE_MERGED = (1, 37)
# workload-aware preemption (KEP-5710): its own alpha gate in 1.36, part of GenericWorkload from 1.37; without
# it a 1.36 apiserver drops a PodGroup's priorityClassName (measured on 1.36.2)
PREEMPTION_GATE = "WorkloadAwarePreemption"


def _fabric_keys(fabric: Fabric) -> tuple[str, ...]:
    """What means a fabric on a workload: its resources, pod annotation keys, "class:<DeviceClass>", "hostNetwork"."""
    return (*fabric.resources, *fabric.annotations, *(f"class:{c}" for c in fabric.deviceClasses),
            *(("hostNetwork",) if fabric.hostNetwork else ()))


@lru_cache(maxsize=4096)
def _matches_any(name: str, patterns: tuple[str, ...]) -> bool:
    """A name against fnmatch patterns (a handful of resource names per policy: remembered)."""
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


@dataclass(frozen=True)
class SourceRef:
    """Where a policy document was defined (for lint output and `check --explain`)."""

    file: str
    line: int
    document: int


# (the document's kind and name, field location, message, fix)
CrossProblem = tuple[tuple[str, str], tuple, str, str]


@dataclass(frozen=True)
class IntentKeys:
    pool: str
    gang: str
    topology: str
    datasets: str
    checkpoint: str
    priority: str
    queue: str
    applied: str
    podgroup: str  # label + annotation: the PodGroup the reconciler must create for this workload
    workload: str  # label on the Pods of a workload whose operator labels them with nothing stable
    preflight: str  # label on pod templates that carry the preflight; annotation with its status on the workload

    @classmethod
    def with_prefix(cls, prefix: str) -> IntentKeys:
        return cls(*(f"{prefix}/{k}" for k in
                     ("pool", "gang", "topology", "datasets", "checkpoint", "priority", "queue", "applied",
                      "podgroup", "workload", "preflight")))


@dataclass(frozen=True)
class PolicySet:
    platform_doc: Platform
    pools: dict[str, PoolSpec]
    datasets: dict[str, DatasetSpec]
    checkpoints: dict[str, CheckpointClassSpec]
    tiers: dict[str, PriorityTierSpec]
    quotas: dict[str, QuotaSpec]
    sources: dict[tuple[str, str], SourceRef]
    generation: str
    rules: dict[str, RuleSpec] = field(default_factory=dict)
    # derived at build time
    keys: IntentKeys = field(init=False)
    gpu_resources: frozenset[str] = field(init=False)
    gpu_device_classes: frozenset[str] = field(init=False)  # DRA DeviceClasses whose devices are GPUs
    default_pools: dict[str, str] = field(init=False)
    actions: dict[str, Action] = field(init=False)
    enforced: frozenset[Enforceable] = field(init=False)
    scheduler_name: str | None = field(init=False)  # the policy's own choice (an auto backend's: engine.target)
    nic_patterns: tuple[str, ...] = field(init=False)  # Platform.spec.nics.resources
    nic_class_patterns: tuple[str, ...] = field(init=False)  # Platform.spec.nics.deviceClasses
    # per fabric, the keys that mean it (resource names, annotation keys, "class:<DeviceClass>", "hostNetwork"),
    # and every such key of any fabric or pool (what a workload is scanned for)
    fabric_keys: tuple[tuple[str, tuple[str, ...]], ...] = field(init=False)
    fabric_wanted: frozenset[str] = field(init=False)
    compiled_rules: tuple[CompiledRule, ...] = field(init=False)  # in name order
    compile_problems: tuple[tuple[str, tuple, str], ...] = field(init=False)
    tier_by_class: dict[str, tuple[str, PriorityTierSpec]] = field(init=False)  # PriorityClass -> (tier, spec)
    quota_by_name: dict[str, tuple[str, QuotaSpec]] = field(init=False)  # exact namespace names
    quota_globs: tuple[tuple[str, str, QuotaSpec], ...] = field(init=False)  # (pattern, quota name, spec)

    @property
    def platform(self) -> PlatformSpec:
        return self.platform_doc.spec

    def __post_init__(self) -> None:
        spec = self.platform
        set_ = object.__setattr__
        set_(self, "keys", IntentKeys.with_prefix(spec.intentPrefix))
        set_(self, "gpu_resources", frozenset(spec.gpuResources) | {p.gpu.resource for p in self.pools.values()})
        set_(self, "gpu_device_classes", frozenset(spec.gpuDeviceClasses)
             | {c.name for p in self.pools.values() for c in p.gpu.deviceClasses})
        set_(self, "default_pools", {p.gpu.resource: n for n, p in sorted(self.pools.items()) if p.default})
        # only what differs from a rule's declared default: custom rules' actions and the overrides
        actions = {f"custom.{name}": Action(rule.action) for name, rule in self.rules.items()}
        actions.update(spec.rules)
        set_(self, "actions", actions)
        set_(self, "enforced", frozenset(spec.enforce))
        set_(self, "scheduler_name", spec.gang.schedulerName or BACKEND_SCHEDULERS.get(spec.gang.backend))
        set_(self, "nic_patterns", tuple(spec.nics.resources))
        set_(self, "nic_class_patterns", tuple(spec.nics.deviceClasses))
        keys = tuple((name, _fabric_keys(f)) for name, f in spec.fabrics.items())
        set_(self, "fabric_keys", keys)
        set_(self, "fabric_wanted", frozenset(k for _, ks in keys for k in ks) |
             frozenset(r for p in self.pools.values() if p.rdma for r in p.rdma.resources))
        compiled, problems = compile_rules(self.rules)  # once per generation, never per request
        set_(self, "compiled_rules", tuple(compiled))
        set_(self, "compile_problems", tuple(problems))
        set_(self, "tier_by_class", {tier.className: (name, tier) for name, tier in self.tiers.items()})
        exact: dict[str, tuple[str, QuotaSpec]] = {}
        globs: list[tuple[str, str, QuotaSpec]] = []
        for name in sorted(self.quotas):  # an exact name beats a glob; among either, the first by name
            quota = self.quotas[name]
            for pattern in quota.namespaces:
                if "*" in pattern or "?" in pattern or "[" in pattern:
                    globs.append((pattern, name, quota))
                else:
                    exact.setdefault(pattern, (name, quota))
        set_(self, "quota_by_name", exact)
        set_(self, "quota_globs", tuple(globs))

    @classmethod
    def build(cls, builtin_rules: Collection[str], unresolved: Mapping[str, Collection[str]] | None = None,
              handled_kinds: Collection[str] = (), **kwargs) -> tuple[PolicySet, list[CrossProblem]]:
        """Build the set and return it with its cross-reference problems (empty when sound).

        ``unresolved`` names, per kind, documents that exist but did not load (their own errors are
        reported): a reference to one of them is not reported again as a reference to nothing.
        ``handled_kinds``: the kinds the engine decides, which a custom Rule's ``kinds`` may name."""
        policy = cls(**kwargs)
        return policy, policy._cross_check(builtin_rules, unresolved or {}, handled_kinds)

    @property
    def platform_name(self) -> str:
        return self.platform_doc.metadata.name

    def _cross_check(self, builtin_rules: Collection[str], unresolved: Mapping[str, Collection[str]],
                     handled_kinds: Collection[str]) -> list[CrossProblem]:
        problems: list[CrossProblem] = []

        def missing(kind: str, name: str, defined: Collection[str]) -> bool:
            return name not in defined and name not in unresolved.get(kind, ())

        def instead(kind: str, name: str, defined: Collection[str]) -> str:
            names = sorted({*defined, *unresolved.get(kind, ())})
            close = difflib.get_close_matches(name, names, n=1)
            if close:
                return f"did you mean {close[0]}?"
            return f"define {kind} {name}, or use one of: {', '.join(names)}" if names else f"define {kind} {name}"

        platform_ref = ("Platform", self.platform_doc.metadata.name)
        for name, loc, message in self.compile_problems:
            problems.append((("Rule", name), loc, message,
                             "fix the CEL expression (the language of ValidatingAdmissionPolicy)"))
        custom = set(self.rules) | set(unresolved.get("Rule", ()))
        for rule in self.platform.rules:
            if rule not in builtin_rules and rule not in RETIRED_RULES and rule.removeprefix("custom.") not in custom:
                close = difflib.get_close_matches(rule, sorted(builtin_rules), n=1)
                problems.append((platform_ref, ("spec", "rules", rule), "unknown rule id",
                                 f"did you mean {close[0]}?" if close else
                                 f"use a built-in rule id ({', '.join(sorted(builtin_rules))}) or custom.<Rule name>"))
        for name, spec in self.rules.items():
            for i, kind in enumerate(spec.kinds):
                if handled_kinds and kind not in handled_kinds:
                    close = difflib.get_close_matches(kind, sorted(handled_kinds), n=1)
                    problems.append((("Rule", name), ("spec", "kinds", i), f"{kind!r} is not a kind trainadmit handles",
                                     f"did you mean {close[0]}?" if close else
                                     f"use one of: {', '.join(sorted(handled_kinds))}"))
        by_resource: dict[str, list[str]] = {}
        for name, pool in self.pools.items():
            if pool.default:
                by_resource.setdefault(pool.gpu.resource, []).append(name)
        for resource, names in by_resource.items():
            if len(names) > 1:
                for name in names[1:]:
                    problems.append((("Pool", name), ("spec", "default"),
                                     f"pools {names} are all the default for {resource}; only one may be",
                                     f"keep default: true on one pool for {resource}"))
        for name, fabric in self.platform.fabrics.items():
            for i, other in enumerate(fabric.yieldsTo):
                if other not in self.platform.fabrics:
                    problems.append((platform_ref, ("spec", "fabrics", name, "yieldsTo", i), f"no fabric {other!r}",
                                     f"use one of: {', '.join(sorted(self.platform.fabrics))}"))
        # pools' fabrics, tiers' classes, fabrics' device classes
        problems.extend(reference_problems(self, platform_loaded=not unresolved.get("Platform")))
        default_tier = self.platform.defaults.priority
        if default_tier is not None and missing("PriorityTier", default_tier, self.tiers):
            problems.append((platform_ref, ("spec", "defaults", "priority"), f"no PriorityTier named {default_tier!r}",
                             instead("PriorityTier", default_tier, self.tiers)))
        default_ckpt = self.platform.defaults.checkpoint
        if default_ckpt != "none" and missing("CheckpointClass", default_ckpt, self.checkpoints):
            problems.append((platform_ref, ("spec", "defaults", "checkpoint"),
                             f"no CheckpointClass named {default_ckpt!r}",
                             instead("CheckpointClass", default_ckpt, self.checkpoints) + " (or none)"))
        for name, quota in self.quotas.items():
            for i, pool in enumerate(quota.allowedPools or []):
                if missing("Pool", pool, self.pools):
                    problems.append((("Quota", name), ("spec", "allowedPools", i), f"no Pool named {pool!r}",
                                     instead("Pool", pool, self.pools)))
            for i, tier in enumerate(quota.allowedPriorities or []):
                if missing("PriorityTier", tier, self.tiers):
                    problems.append((("Quota", name), ("spec", "allowedPriorities", i),
                                     f"no PriorityTier named {tier!r}", instead("PriorityTier", tier, self.tiers)))
        return problems

    # ---- request-time look-ups -------------------------------------------------------------

    def is_nic_resource(self, name: str) -> bool:
        """Whether an extended resource is a NIC (Platform.spec.nics.resources), as a template brings one."""
        return _matches_any(name, self.nic_patterns)

    def is_nic_class(self, device_class: str) -> bool:
        """Whether a DRA DeviceClass holds NICs (Platform.spec.nics.deviceClasses); a class the policy calls a GPU
        class (``gpu_device_classes``) never is, so a claim's devices are GPUs or NICs, not both."""
        return device_class not in self.gpu_device_classes and _matches_any(device_class, self.nic_class_patterns)

    def is_exempt(self, namespace: str | None) -> bool:
        return namespace is not None and any(fnmatch.fnmatchcase(namespace, p) for p in self.platform.exemptNamespaces)

    def quota_for(self, namespace: str | None) -> tuple[str, QuotaSpec] | None:
        """The quota of a namespace: an exact name beats a glob; among globs the first by name."""
        if namespace is None:
            return None
        found = self.quota_by_name.get(namespace)
        if found is not None:
            return found
        for pattern, name, quota in self.quota_globs:
            if fnmatch.fnmatchcase(namespace, pattern):
                return name, quota
        return None
