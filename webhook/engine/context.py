"""The per-request working state shared by mutations and rules.

One Context per decision: the policy generation, the cluster view, the request, the resolved intent
and the plan (both fixed before any mutation runs), the patcher holding the working copy, and the lists
that become the Decision. Mutations and rules are plain functions of a Context, which keeps each of them
small and testable on its own; they read the plan, never each other's state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import field

from ..grammars.lazydataclass import dataclass
from ..policy import PolicySet
from ..policy.vocab import Action
from .clusterview import ClusterView
from .decision import FieldFix, Injection, Source, Violation, shared_source
from .dra import listed_claims
from .fit import Fit, Limit, largest
from .intent import Resolved
from .network import claim_device_classes
from .patch import Patcher
from .paths import Path, field_path
from .plan import Plan
from .request import Request
from .rule import Resize, RuleId
from .workloads import ContainerRef, PodTemplate, Workload, resource_count

# a Context's plan until its decision's is made (the whole-object rules read none): frozen, so one serves them all
NO_PLAN = Plan()


@dataclass(eq=False)
class Context:
    policy: PolicySet
    cluster: ClusterView
    request: Request
    workload: Workload  # view of the object as received (cut down to what the concerns read)
    patcher: Patcher
    namespace: str
    resolved: Resolved = field(default_factory=Resolved)
    plan: Plan = NO_PLAN
    violations: list[Violation] = field(default_factory=list)
    injections: list[Injection] = field(default_factory=list)  # what this decision changed, and why
    companions: list[dict] = field(default_factory=list)  # objects the reconciler creates (PodGroups)
    concerns: dict[str, None] = field(default_factory=dict)  # concerns applied (injected or already met)
    unverified: list[str] = field(default_factory=list)  # objects named that no cluster view could look up
    notes: list[str] = field(default_factory=list)  # what was left to the user's choice or to another component
    # the size rules' bounds (``Concern.limits``, collected by the registry): what the one size fix must pass
    limits: tuple[Callable[[Context, Workload], Iterable[Limit]], ...] = ()
    _gpu_containers: dict[Path, list[ContainerRef]] = field(default_factory=dict, repr=False)
    _fits: dict[tuple[bool, str], Fit] = field(default_factory=dict, repr=False)

    # ---- violations --------------------------------------------------------------------------
    def report(self, rule: RuleId, path: str | Path, message: str, hint: str = "",
               fix: tuple[FieldFix, ...] = ()) -> None:
        """Record a violation at ``path``: a field path for people, or a path into the object, which is shown
        where the user's object has it (a TrainJob's container resources are in ``spec.trainer``). ``fix``: the
        change as fields and values, when a program can apply it (the hint says the same)."""
        action = self.policy.actions.get(rule.id, rule.default)
        if action is Action.off:
            return
        where = path if isinstance(path, str) else field_path(self.patcher.route(path))
        self.violations.append(Violation(rule.id, action, where, message, hint, fix))

    def size_fit(self, view: Workload, warnings: bool = False, without: str = "") -> Fit:
        """The one size fix of this decision (``fit.largest``): the largest shape that passes every size rule that
        refuses (with ``warnings``: and every one that warns; ``without``: but that rule), computed once, with the
        bounds the rules find on ``view`` (the object they see). Every size rule's fix is this one, so that no two
        fixes of a denial disagree."""
        key = (warnings, without)
        found = self._fits.get(key)
        if found is None:
            wanted = (Action.deny, Action.warn) if warnings else (Action.deny,)
            resize = self.plan.resize  # a resize runs a rule only a growth can break when it grows
            bounds = [lim for source in self.limits for lim in source(self, view)
                      if self.policy.actions.get(lim.rule.id, lim.rule.default) in wanted and lim.rule.id != without
                      and (resize is None or resize.grown or lim.rule.resize is Resize.any)]
            pool = self.resolved.pool
            # the shapes are counted on the object as received: the fix names the user's fields and values, not the
            # gang sizes a mutation wrote
            found = largest(self.workload, self.resolved, self.plan.scale,
                            pool.gpu.perNode if pool is not None else None, bounds, self.patcher.route)
            self._fits[key] = found
        return found

    def agreeing(self, view: Workload, fix: tuple[FieldFix, ...]) -> tuple[FieldFix, ...]:
        """``fix`` (a rule's own fields) with the size fix's value wherever the size fix sets the same field (a GPU
        request the size fix raises with its limit, a Job's completions it sets with parallelism)."""
        fitted = {f.path: f for f in self.size_fit(view).fix}
        return tuple(fitted.get(f.path, f) for f in fix)

    def user_field(self, path: Path) -> str:
        """``path`` as a field of the user's object (through the kind's aliases), for messages and fixes."""
        return field_path(self.patcher.route(path))

    # ---- injections --------------------------------------------------------------------------
    def inject(self, path: Path, value: object, concern: str, source: Source) -> bool:
        """Make ``path`` hold ``value``; True when that changed the object."""
        changed = self.patcher.set(path, value)
        if changed:
            self.injections.append(Injection(self.patcher.route(path), concern, source))
        self.concerns[concern] = None
        return changed

    def note(self, text: str) -> None:
        """Say what the decision left alone on purpose: the user's own choice, or what another component will do."""
        if text not in self.notes:
            self.notes.append(text)

    def satisfied(self, concern: str) -> None:
        """The object already holds what the policy prescribes for ``concern`` (the user's own value,
        or ours from an earlier pass): nothing to inject, but the concern counts as applied."""
        self.concerns[concern] = None

    def inject_extend(self, list_path: Path, items: list[tuple[object, Source]], concern: str) -> None:
        """Append (value, source) items to a list in as few patch operations as possible."""
        if not items:
            return
        start = len(self.patcher.get(list_path) or [])
        self.patcher.extend(list_path, [v for v, _ in items])
        where = self.patcher.route(list_path)
        for i, (_, source) in enumerate(items):
            self.injections.append(Injection((*where, start + i), concern, source))
        self.concerns[concern] = None

    def claim_classes(self, claim: dict) -> tuple[str, ...] | None:
        """The DeviceClasses a pod's ``resourceClaims`` entry gets devices from, as the cluster view knows them."""
        return claim_device_classes(self.cluster, self.namespace, claim)

    # ---- sources -----------------------------------------------------------------------------
    def platform_source(self, *field_: str | int, note: str = "") -> Source:
        return shared_source("Platform", self.policy.platform_name, field_, note)

    def pool_source(self, *field_: str | int, note: str = "") -> Source:
        return shared_source("Pool", self.resolved.pool_name or "", field_, note)

    # ---- views of the working copy -----------------------------------------------------------
    @property
    def current(self) -> Workload:
        return self.workload.with_object(self.patcher.doc)

    @property
    def pool_templates(self) -> tuple[PodTemplate, ...]:
        """The templates that get the pool's configuration (the plan's), as received."""
        return self.plan.pool_templates

    def pool_templates_in(self, view: Workload) -> list[PodTemplate]:
        """``pool_templates`` as they are in ``view`` (the object as it will be stored, for validation)."""
        placed = {t.root for t in self.plan.pool_templates}
        return [t for t in view.templates if t.root in placed]

    def gpu_containers(self, template: PodTemplate) -> list[ContainerRef]:
        """Regular containers of ``template`` that get the workload's GPUs (its GPU resource, or a DRA claim
        holding GPUs listed in ``resources.claims``): the ones that run NCCL."""
        cached = self._gpu_containers.get(template.root)
        if cached is None:
            resource = self.resolved.gpu_resource
            claims = self.resolved.gpu_claims.get(template.root, frozenset())
            cached = []
            for ref in template.main_containers:
                limit, request, _ = resource_count(ref.body, resource) if resource else (None, None, False)
                if (limit or request or 0) > 0 or (claims and listed_claims(ref.body) & claims):
                    cached.append(ref)
            self._gpu_containers[template.root] = cached
        return cached
