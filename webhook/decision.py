"""What the engine returns: the verdict, every violation at once, the patch, and why.

The same Decision feeds the AdmissionResponse, the CLI's text/JSON/YAML output and the policy
test runner, which is how CI and the cluster give the same answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .policy.models import Action


@dataclass(slots=True)
class Violation:
    """A rule that fired: its id, the field at fault, what is wrong and what to change."""

    rule: str
    action: Action
    path: str
    message: str
    hint: str = ""

    def text(self) -> str:
        out = f"[{self.rule}] {self.path}: {self.message}"
        if self.hint:
            out += f" ({self.hint})"
        return out

    def as_dict(self) -> dict[str, str]:
        return {"rule": self.rule, "action": self.action.value, "path": self.path,
                "message": self.message, "hint": self.hint}


@dataclass(slots=True)
class Injection:
    """One field trainadmit set, and the policy setting that drove it (for --explain)."""

    location: tuple
    concern: str
    source: str

    @property
    def path(self) -> str:
        from .patch import pointer

        return pointer(self.location)

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "concern": self.concern, "source": self.source}


@dataclass
class Decision:
    matched: bool
    reason: str = ""
    violations: list[Violation] = field(default_factory=list)
    patch: list[dict] = field(default_factory=list)
    mutated: dict | None = None
    injections: list[Injection] = field(default_factory=list)
    companions: list[dict] = field(default_factory=list)
    generation: str = ""
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def denials(self) -> list[Violation]:
        return [v for v in self.violations if v.action is Action.deny]

    @property
    def warnings(self) -> list[Violation]:
        return [v for v in self.violations if v.action is Action.warn]

    @property
    def allowed(self) -> bool:
        return not self.denials

    def denial_message(self) -> str:
        lines = [v.text() for v in self.denials]
        plural = "s" if len(lines) != 1 else ""
        return f"trainadmit denied this object ({len(lines)} problem{plural}): " + "; ".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {
            "matched": self.matched,
            "reason": self.reason,
            "allowed": self.allowed,
            "generation": self.generation,
            "violations": [v.as_dict() for v in self.denials],
            "warnings": [v.as_dict() for v in self.warnings],
            "patch": self.patch,
            "injected": [i.as_dict() for i in self.injections],
            "companions": self.companions,
            "summary": self.summary,
        }
