"""The per-request working state shared by mutations and rules.

One Context per decision: the policy generation, the cluster view, the resolved intent, the
patcher holding the working copy, and the lists that become the Decision. Mutations and rules are
plain functions of a Context, which keeps each of them small and testable on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .cluster import ClusterView
from .decision import Injection, Violation
from .intent import Resolved
from .patch import Patcher
from .policy import PolicySet
from .policy.models import Action, Enforceable
from .workloads import Path, Workload


def field_path(path: Path) -> str:
    """Human field path: spec.template.spec.containers[0].env, labels as ["key"]."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif "/" in part or ("." in part and out.endswith(("labels", "annotations", "limits", "requests",
                                                            "nodeSelector"))):
            out += f'["{part}"]'
        else:
            out += ("." if out else "") + part
    return out


@dataclass
class Context:
    policy: PolicySet
    cluster: ClusterView
    workload: Workload  # view of the object as received
    patcher: Patcher
    resolved: Resolved = field(default_factory=Resolved)
    violations: list[Violation] = field(default_factory=list)
    injections: list[Injection] = field(default_factory=list)
    companions: list[dict] = field(default_factory=list)
    concerns: list[str] = field(default_factory=list)
    changed: list[tuple[Path, str]] = field(default_factory=list)  # (path, concern) actually changed
    namespace: str | None = None
    cache: dict = field(default_factory=dict)  # per-request memo (e.g. the GPU containers)

    def report(self, rule: str, path: str, message: str, hint: str = "") -> None:
        action = self.policy.action(rule)
        if action is Action.off:
            return
        self.violations.append(Violation(rule, action, path, message, hint))

    def enforced(self, item: Enforceable) -> bool:
        return item in self.policy.enforced

    def conflict(self, item: Enforceable, path: Path, user_value: object, policy_value: object) -> None:
        """A user value differs from the policy's: a denial if enforced, otherwise the user wins."""
        if self.enforced(item):
            self.report("enforced.conflict", field_path(path),
                        f"the platform enforces {item.value}; this object sets {user_value!r}",
                        f"remove it or set {policy_value!r}")

    def inject(self, path: Path, value: object, concern: str, source: str) -> bool:
        changed = self.patcher.set(path, value)
        self._note(path, concern, source)
        if changed:
            self.changed.append((path, concern))
        return changed

    def inject_append(self, list_path: Path, value: object, concern: str, source: str) -> None:
        self.inject_extend(list_path, [(value, source)], concern)

    def inject_extend(self, list_path: Path, items: list[tuple[object, str]], concern: str) -> None:
        """Append (value, source) items to a list in as few patch operations as possible."""
        if not items:
            return
        start = len(self.patcher.get(list_path) or [])
        self.patcher.extend(list_path, [v for v, _ in items])
        for i, (_, source) in enumerate(items):
            self._note((*list_path, start + i), concern, source)
        self.changed.append((list_path, concern))

    def _note(self, path: Path, concern: str, source: str) -> None:
        self.injections.append(Injection(path, concern, source))
        if concern not in self.concerns:
            self.concerns.append(concern)

    # ---- views of the working copy --------------------------------------------------------------
    @property
    def current(self) -> Workload:
        return Workload(self.patcher.doc)
