"""The size fix: the largest shape of a workload that passes every size rule at once, and the fields that give it.

Several rules bound a workload's size: the namespace's Quota (GPUs and workers per job, the GPU quota, what is
free now), the pool (its nodes, its GPUs per node, the largest domain of the requested level, the nodes that carry
its required labels, the nodes that are usable now). When each rule computed its own fix, one denial named
``spec.parallelism: 8`` and ``16``, and a user who applied one was refused by the next. So each size rule declares
its bound as a ``Limit`` on a ``Shape``, next to the rule (``Concern.limits``), and ``largest`` finds once per
decision the largest shape that passes all of them together: every size rule's fix is that one (``Fit``).

What a shape may change, in the kind's own fields:

- the count fields of the template advice changes (``plan.Scale``: the GPU template with the most Pods; its first
  count field that can do it), counted as the kind counts them, with the fields the kind ties to them
  (``Adapter.counts_with``: a Job's completions, a Volcano Job's minAvailable, an elastic job's bounds…; a value
  the kind's own admission refuses is never offered);
- the GPUs per Pod of the GPU templates: whole nodes of the pool (``topology.whole-node``), or, for one Pod, fewer;
  each GPU container's limit and request together (``gpu.requests-limits``), and the fields the kind ties to
  them (``Adapter.tied_to_gpus``: an MPIJob's slotsPerWorker).

"Largest": the most GPUs, then the fewest fields changed; never more Pods than the workload asks for at the GPUs
per Pod it asks for, nor (with whole nodes) more Pods than its GPUs fill. When no shape passes, ``Fit.unfixable``
says why in one line: the smallest shape and the bounds it still breaks. A bound that only time lifts (what the
namespace has free now: ``Limit.transient``) is dropped when nothing passes with it; the fix then passes every other
size rule, and the rule of that bound says to wait.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import field
from math import ceil

from ..grammars.lazydataclass import dataclass
from .decision import FieldFix
from .dra import pod_claims
from .intent import Resolved, gpu_request
from .paths import Path, field_path, get_path, with_values
from .plan import Scale, ScaleField
from .rule import RuleId
from .workloads import PodTemplate, Workload, resource_count


@dataclass(frozen=True)
class Shape:
    """Pods per template and GPUs per Pod per GPU template: what the size rules look at."""

    pods: tuple[tuple[Path, int], ...]
    gpus: tuple[tuple[Path, int], ...]  # GPUs per Pod, of the templates whose Pods ask for GPUs
    claimed: tuple[tuple[Path, int], ...] = ()  # of those, per Pod, through the template's own DRA claims
    shared_in: tuple[tuple[Path, int], ...] = ()  # and through ResourceClaims every Pod shares
    shared: int = 0  # the GPUs of those shared claims, held once for the whole workload

    def pods_of(self, root: Path) -> int:
        return dict(self.pods).get(root, 0)

    @property
    def gpu_pods(self) -> int:
        return sum(self.pods_of(root) for root, _ in self.gpus)

    @property
    def per_pod(self) -> tuple[int, ...]:
        return tuple(g for _, g in self.gpus)

    @property
    def total_gpus(self) -> int:
        shared = dict(self.shared_in)
        return sum(self.pods_of(root) * (g - shared.get(root, 0)) for root, g in self.gpus) + self.shared

    @property
    def extended_gpus(self) -> int:
        claimed, shared = dict(self.claimed), dict(self.shared_in)
        return sum(self.pods_of(root) * (g - claimed.get(root, 0) - shared.get(root, 0)) for root, g in self.gpus)

    @property
    def claimed_gpus(self) -> int:
        return self.total_gpus - self.extended_gpus

    def describe(self) -> str:
        """How messages name it: Pods times GPUs per Pod, one term per GPUs per Pod."""
        by: dict[int, int] = {}
        for root, g in self.gpus:
            by[g] = by.get(g, 0) + self.pods_of(root)
        return " + ".join(f"{pods} × {g} GPUs" for g, pods in sorted(by.items(), reverse=True)) or "no GPU Pods"

    def with_gpus(self, gpus: dict[Path, int]) -> Shape:
        return Shape(self.pods, tuple((root, gpus.get(root, g)) for root, g in self.gpus), self.claimed,
                     self.shared_in, self.shared)

    def with_pods(self, pods: dict[Path, int]) -> Shape:
        return Shape(tuple(pods.items()), self.gpus, self.claimed, self.shared_in, self.shared)


def shape_of(workload: Workload, resolved: Resolved) -> Shape:
    """The workload's shape as it is."""
    return Shape(tuple((t.root, t.pods) for t in workload.templates),
                 tuple((t.root, g) for t, g in resolved.gpu_templates),
                 tuple(resolved.claimed_in.items()), tuple(resolved.shared_in.items()),
                 sum(resolved.shared_gpus.values()))


@dataclass(frozen=True)
class Limit:
    """One size rule's bound: whether a shape passes it, and what it allows (for a fix no shape passes).
    ``transient``: a bound that only time lifts (the GPUs the namespace has free now)."""

    rule: RuleId
    passes: Callable[[Shape], bool]
    bound: str
    transient: bool = False


@dataclass(frozen=True)
class Fit:
    """The size fix of one decision: the fields to set, the shape they give, and what the hint says.

    ``fix`` empty and ``unfixable`` empty: the shape as it is passes every size rule (``failing`` is empty).
    ``failing``: the rules the shape as it is breaks. ``waits``: the fix passes every size rule but what the
    namespace has free now (nothing smaller would). ``texts``: what the fix changes that no field of the object
    holds (a DRA claim's count, in the claim)."""

    gpu_fix: tuple[FieldFix, ...] = ()  # the GPU fields
    count_fix: tuple[FieldFix, ...] = ()  # the count fields (and what the kind ties to them)
    tied_fix: tuple[FieldFix, ...] = ()  # what the kind ties to the GPUs per Pod
    shape: Shape | None = None
    current: Shape | None = None
    failing: frozenset[str] = frozenset()
    unfixable: str = ""
    texts: tuple[str, ...] = ()
    waits: bool = False

    @property
    def fix(self) -> tuple[FieldFix, ...]:
        return (*self.gpu_fix, *self.count_fix, *self.tied_fix)

    @property
    def counts(self) -> bool:
        """The fix changes a count field."""
        return bool(self.count_fix)

    @property
    def changes(self) -> str:
        """What the fix sets, without the verb: "a: 1 and b: 2" ("" for nothing)."""
        return " and ".join([*(f.text() for f in self.gpu_fix), *self.texts,
                             *(f.text() for f in (*self.count_fix, *self.tied_fix))])

    @property
    def hint(self) -> str:
        if self.unfixable:
            return self.unfixable
        if not self.changes:
            return ""
        hint = f"set {self.changes}"
        shape, current = self.shape, self.current
        if shape is not None and current is not None and shape.per_pod != current.per_pod \
                and shape.total_gpus != current.total_gpus:
            hint += f" ({shape.total_gpus} GPUs in all)"
        return hint


@dataclass
class _Search:
    """The candidate shapes of one workload (each count evaluated once, as the kind counts it)."""

    workload: Workload
    scale: Scale
    current: Shape
    counted: dict[tuple, tuple[dict[Path, int], Shape, bool]] = field(default_factory=dict)

    def count(self, values: dict[Path, int]) -> tuple[dict[Path, int], Shape, bool]:
        """The count fields to write for ``values`` (with the ones the kind ties to them), the shape the Pods then
        have (at the GPUs per Pod asked for), and whether the kind's own admission takes those counts."""
        key = tuple(values.items())
        if key not in self.counted:
            adapter = self.workload.adapter
            full = adapter.counts_with(self.workload.obj, values)
            obj = with_values(self.workload.obj, full)
            specs = adapter.templates_of(obj, self.workload.inherited)
            self.counted[key] = (full, self.current.with_pods({s.root: s.pods for s in specs}),
                                 adapter.counts_valid(obj))
        return self.counted[key]


def _largest_count(search: _Search, gpus: dict[Path, int], ok: Callable[[Shape], bool], most: int = 1
                   ) -> tuple[dict[Path, int], Shape] | None:
    """The counts of the largest shape with ``gpus`` GPUs per Pod that ``ok`` passes, or None when none does (counts
    unchanged: ``{}``). The count fields are tried in order (``_count_fields``): the first that gives a passing shape
    at some value takes its largest such value (one the kind takes); one that cannot, even at 1, stays at 1 while
    the next is tried (a JobSet's replicas, then its Jobs' parallelism, then its other GPU Jobs'). Only the first
    may grow past its value, to at most ``most`` (more Pods of fewer GPUs each)."""
    as_is = search.current.with_gpus(gpus)
    fixed: dict[Path, int] = {}
    for changed in _count_fields(search.scale, gpus):
        now = changed.value if isinstance(changed.value, int) and not isinstance(changed.value, bool) else 1
        low, high, best = 1, max(most, now, 1) if not fixed else max(now, 1), 0
        while low <= high:  # every count grows with its field: the largest value that passes
            mid = (low + high) // 2
            if ok(search.count({**fixed, changed.path: mid})[1].with_gpus(gpus)):
                best, low = mid, mid + 1
            else:
                high = mid - 1
        while best >= 1 and not search.count({**fixed, changed.path: best})[2]:  # one the kind refuses: below it
            best -= 1
        if best >= 1:
            if best == now and not fixed:  # its count as it is: nothing to change
                return {}, as_is
            full, shape, _ = search.count({**fixed, changed.path: best})
            return full, shape.with_gpus(gpus)
        fixed[changed.path] = 1
    return ({}, as_is) if not fixed and ok(as_is) else None


def _count_fields(scale: Scale, gpus: dict[Path, int]) -> list[ScaleField]:
    """The count fields a size fix may change, in the order it tries them: the target template's (the GPU template
    with the most Pods), then those of the kind's other GPU templates, the largest first."""
    target = scale.target
    others = sorted((t for t in scale.templates if t is not target and t.root in gpus), key=lambda t: -t.pods)
    return [f for t in ([target] if target is not None else []) + others for f in t.fields]


def _smallest(search: _Search, gpus: dict[Path, int]) -> Shape:
    """The smallest shape with ``gpus`` GPUs per Pod the kind takes (for saying why none passes)."""
    fields = _count_fields(search.scale, gpus)
    if not fields:
        return search.current.with_gpus(gpus)
    ones = {f.path: 1 for f in fields}
    for value in range(1, 9):
        _, shape, valid = search.count({**ones, fields[-1].path: value})
        if valid:
            return shape.with_gpus(gpus)
    return search.current.with_gpus(gpus)


def largest(workload: Workload, resolved: Resolved, scale: Scale, per_node: int | None, limits: Iterable[Limit],
            route: Callable[[Path], Path] = lambda p: p) -> Fit:
    """The largest shape that passes every limit, and the fields of the user's object that give it (``route``: a
    template path as a field of the submitted object)."""
    limits = list(limits)
    current = shape_of(workload, resolved)
    failing = frozenset(lim.rule.id for lim in limits if not lim.passes(current))
    if not failing:
        return Fit(shape=current, current=current)
    search = _Search(workload, scale, current)
    asked = dict(current.gpus)
    options: list[tuple[dict[Path, int], int]] = [(asked, current.gpu_pods)]  # (GPUs per Pod, at most GPU Pods)
    if per_node and any(g != per_node for g in asked.values()):
        whole = {root: per_node for root in asked}
        options.append((whole, max(ceil(current.total_gpus / per_node), _smallest(search, whole).gpu_pods)))
    found, waits = None, False
    for strict in (True, False):
        kept = [lim for lim in limits if strict or not lim.transient]
        if not strict and len(kept) == len(limits):
            break
        candidates = []
        for gpus, most in options:
            best = _largest_count(search, gpus,
                                  lambda s, m=most, k=kept: s.gpu_pods <= m and all(lm.passes(s) for lm in k), most)
            if best is not None:
                changes = len(best[0]) + sum(g != asked[r] for r, g in gpus.items())
                candidates.append((best[1].total_gpus, -changes, best, gpus))
        if per_node and len(asked) == 1 and not candidates:  # one GPU Pod, with fewer GPUs than it asks for
            root, g = next(iter(asked.items()))
            one = _largest_count(search, asked, lambda s: s.gpu_pods <= 1)
            for fewer in range(min(g, per_node), 0, -1) if one is not None else ():
                shape = one[1].with_gpus({root: fewer})  # type: ignore[index]
                if all(lm.passes(shape) for lm in kept):
                    candidates.append((shape.total_gpus, 0, (one[0], shape), {root: fewer}))  # type: ignore[index]
                    break
        if candidates:
            found, waits = max(candidates, key=lambda c: (c[0], c[1])), not strict
            break
    if found is None:
        smallest = min((_smallest(search, gpus) for gpus, _ in options),
                       key=lambda s: sum(not lm.passes(s) for lm in limits))
        bounds = list(dict.fromkeys(lm.bound for lm in limits if not lm.passes(smallest)))
        return Fit(current=current, failing=failing, unfixable=(
            f"no size of this {workload.kind} passes every size rule (at its smallest, {smallest.describe()}): "
            f"{'; '.join(bounds)}"))
    _, _, (counts, shape), gpus = found
    gpu_fix, texts, tied = _gpu_fix(workload, resolved, gpus, route)
    count_fix = tuple(FieldFix(route(path), value) for path, value in counts.items()
                      if get_path(workload.obj, path) != value)
    return Fit(gpu_fix, count_fix, tied, shape, current, failing, texts=texts, waits=waits)


def _gpu_fix(workload: Workload, resolved: Resolved, gpus: dict[Path, int], route: Callable[[Path], Path]
             ) -> tuple[tuple[FieldFix, ...], tuple[str, ...], tuple[FieldFix, ...]]:
    """The fields that give each GPU template ``gpus`` GPUs per Pod (the GPU container's limit and request together),
    text for GPUs only a DRA claim holds, and the fields the kind ties to the GPUs per Pod."""
    asked = {t.root: (t, g) for t, g in resolved.gpu_templates}
    fix: list[FieldFix] = []
    texts: list[str] = []
    ties: list[FieldFix] = []
    resource = resolved.gpu_resource
    for root, wanted in gpus.items():
        template, g = asked[root]
        if wanted == g:
            continue
        ties.extend(FieldFix(route(p), v) for p, v in workload.adapter.tied_to_gpus(workload.obj, root, g,
                                                                                  wanted).items())
        own = g - resolved.claimed_in.get(root, 0) - resolved.shared_in.get(root, 0)  # of the extended resource
        path = gpu_request(template, resource) if resource and own > 0 else None
        container = _container(template, path) if path is not None else None
        if container is None:
            unit = resolved.gpu_classes[0] if resolved.gpu_classes else "GPU"
            held = resolved.gpu_claims.get(root, frozenset())
            index = next((c.index for c in pod_claims(template.pod_spec) if c.name in held), 0)
            claim = (*template.spec_path, "resourceClaims", index)
            texts.append(f"count: {wanted} in the {unit} request of the claim named at {field_path(route(claim))}")
            continue
        base, body = container
        limit, request, _ = resource_count(body, resource or "")
        amount = (limit if limit is not None else request or 0) + wanted - g
        if amount < 1:
            texts.append(f"GPUs per Pod of {template.label} to {wanted}")
            continue
        fix.append(FieldFix(route((*base, "limits", resource)), amount))  # type: ignore[arg-type]
        if request is not None:  # the request goes with the limit, or gpu.requests-limits refuses the fix
            fix.append(FieldFix(route((*base, "requests", resource)), amount))  # type: ignore[arg-type]
    return tuple(fix), tuple(texts), tuple(dict.fromkeys(ties))


def _container(template: PodTemplate, path: Path) -> tuple[Path, dict] | None:
    """(the resources path, the container) of the container that holds ``path`` (a GPU limit or request)."""
    if "resources" not in path:
        return None
    at = path.index("resources")
    body = next((ref.body for ref in template.all_containers if template.container_path(ref) == path[:at]), None)
    return (path[: at + 1], body) if isinstance(body, dict) else None
