"""What is wrong with a policy directory: one problem (file, document, line, field, message, fix) and
the error that carries all of them.

Apart from the loader because the policy cache (``cache``) and the CLI report these without
loading pydantic, which the loader needs to validate documents."""

from __future__ import annotations

from ..grammars.lazydataclass import dataclass


@dataclass(frozen=True)
class PolicyProblem:
    file: str
    document: int | None
    field: str
    message: str
    line: int | None = None
    unreadable: bool = False  # the file could not be read or parsed at all (exit code 2 for lint)
    severity: str = "error"  # or "warning": reported by lint, does not stop the policy from loading
    fix: str = ""  # what to change
    column: int | None = None  # 1-based, where a file stops parsing (``file:line:column``, as compilers print it)

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}" + (f":{self.column}" if self.column is not None else "")
        if self.document is not None:
            where += f" (document {self.document})"
        field = f" {self.field}:" if self.field else ""
        return f"{where}:{' warning:' if not self.is_error else ''}{field} {self.message}"


class PolicyError(Exception):
    """The policy set cannot be loaded; ``problems`` names every file, document and field at fault."""

    def __init__(self, problems: list[PolicyProblem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


