"""Where a YAML or JSON text stops parsing, as editors and compilers point at it: ``LINE:COL`` (1-based) and one
line of message, never the parser's own ``in "<unicode string>", line 1, column 11`` (the parser was handed the
text, not the file: the caller names the file).

Invariant: the position is the parser's problem mark (where it found what it did not expect), the message its
problem, with its context (``while parsing a flow mapping``) and that context's position when the parser gives one.
"""

from __future__ import annotations

import json

from .lazydataclass import dataclass


@dataclass(frozen=True)
class SyntaxProblem:
    line: int | None
    column: int | None
    message: str

    def at(self, source: str, prefix: str = "") -> str:
        """``SOURCE:LINE:COL: <prefix>message`` (``SOURCE: <prefix>message`` without a position)."""
        where = f"{source}:{self.line}:{self.column}" if self.line is not None and self.column is not None else source
        return f"{where}: {prefix}{self.message}"


def yaml_problem(exc: Exception) -> SyntaxProblem:
    """A PyYAML error (``MarkedYAMLError`` or any other ``YAMLError``) as a position and one line."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None)
    context = getattr(exc, "context", None)
    context_mark = getattr(exc, "context_mark", None)
    if problem is None:
        text = " ".join(part.strip() for part in str(exc).splitlines() if part.strip() and '"<' not in part)
        return SyntaxProblem(mark.line + 1 if mark else None, mark.column + 1 if mark else None,
                             text or type(exc).__name__)
    message = problem
    if context:
        elsewhere = context_mark is not None and (mark is None or (context_mark.line, context_mark.column) != (
            mark.line, mark.column))
        at = f" at {context_mark.line + 1}:{context_mark.column + 1}" if elsewhere else ""
        message += f" ({context}{at})"
    return SyntaxProblem(mark.line + 1 if mark else None, mark.column + 1 if mark else None, message)


def json_problem(exc: json.JSONDecodeError) -> SyntaxProblem:
    return SyntaxProblem(exc.lineno, exc.colno, exc.msg)
