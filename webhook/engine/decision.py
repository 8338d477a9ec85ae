"""What the engine returns: the verdict, every violation at once, the patch, and why.

The same Decision feeds the AdmissionResponse, the CLI's text/JSON/YAML output and the policy
test runner, which is how CI and the cluster give the same answer.
"""

from __future__ import annotations

from dataclasses import field
from functools import lru_cache
from typing import Any

from ..grammars.lazydataclass import dataclass
from ..policy.vocab import Action
from .paths import Path, field_path, pointer


@dataclass(frozen=True, slots=True)
class FieldFix:
    """One field a fix sets, in the submitted object's own terms (a TrainJob's GPUs in ``spec.trainer``), and the
    value it sets: what a program applies (``Violation.fix``), and what the hint's text is rendered from."""

    path: Path
    value: object

    @property
    def field(self) -> str:
        return field_path(self.path)

    def text(self) -> str:
        return f"{self.field}: {self.value}"

    def as_dict(self) -> dict[str, object]:
        return {"path": self.field, "value": self.value}


def fix_text(fix: tuple[FieldFix, ...]) -> str:
    """``set a: 1 and b: 2``: a structured fix as people read it ("" for none)."""
    return "set " + " and ".join(f.text() for f in fix) if fix else ""


@dataclass(slots=True)
class Violation:
    """A rule that fired: its id, the field at fault, what is wrong and what to change. ``fix`` is the change as
    fields and values, when it is one a program can apply (the hint says it, and may add what no field holds)."""

    rule: str
    action: Action
    path: str
    message: str
    hint: str = ""
    fix: tuple[FieldFix, ...] = ()

    def text(self) -> str:
        out = f"[{self.rule}] {self.path}: {self.message}"
        if self.hint:
            out += f" ({self.hint})"
        return out

    def as_dict(self) -> dict[str, object]:
        return {"rule": self.rule, "action": self.action.value, "path": self.path,
                "message": self.message, "hint": self.hint, "fix": [f.as_dict() for f in self.fix]}


@dataclass(frozen=True, slots=True)
class Source:
    """The policy setting behind an injected value: a policy document and the field in it.

    ``kind`` is a policy kind (Pool, Platform, …) with the document's name, or ``object`` for an
    intent key the user wrote on the object itself (then ``field`` is the path in the object)."""

    kind: str
    name: str
    field: Path = ()
    note: str = ""

    def __str__(self) -> str:
        where = field_path(self.field)
        head = f"{self.kind} {self.name}" if self.kind != "object" else "the object's"
        text = f"{head}: {where}" if self.kind != "object" else f"{head} {where}"
        return f"{text} ({self.note})" if self.note else text


@lru_cache(maxsize=4096)
def shared_source(kind: str, name: str, field_: Path = (), note: str = "") -> Source:
    """The Source of a setting: one object per (kind, name, field, note), shared by every injection that names it,
    in a decision and across decisions (a Source is frozen; a decision names the same few settings for every env
    entry, toleration and volume it writes)."""
    return Source(kind, name, field_, note)


@dataclass(slots=True)
class Injection:
    """One field trainadmit set, and the policy setting that drove it (for --explain)."""

    location: Path
    concern: str
    source: Source

    @property
    def path(self) -> str:
        return pointer(self.location)

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "concern": self.concern, "source": str(self.source)}


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
    patch_json: str | None = None  # the patch already serialized (a remembered decision): wins over ``patch``
    # objects the decision names that could not be looked up (no cluster view): they may not exist
    unverified: list[str] = field(default_factory=list)
    # the rules on the whole object (custom CEL) apply: the object was decided, not left alone or malformed
    whole_object_rules: bool = False

    @property
    def denials(self) -> list[Violation]:
        return [v for v in self.violations if v.action is Action.deny]

    @property
    def warnings(self) -> list[Violation]:
        """What the user can change and should (``check --strict`` fails on these)."""
        return [v for v in self.violations if v.action is Action.warn]

    @property
    def notes(self) -> list[Violation]:
        """What will happen because of the platform, which no change to the workload removes (``Action.note``)."""
        return [v for v in self.violations if v.action is Action.note]

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
            "notes": [v.as_dict() for v in self.notes],
            "patch": self.patch,
            "injected": [i.as_dict() for i in self.injections],
            "companions": self.companions,
            "summary": self.summary,
            "unverified": self.unverified,
        }
