"""What every command shares: exit codes (DESIGN §6) and loading a policy with a readable error."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..policy import PolicySet

EXIT_OK, EXIT_DENIED, EXIT_ERROR = 0, 1, 2
DEFAULT_POLICY_DIR = os.environ.get("TRAINADMIT_POLICY_DIR", "policies")


def load_policy_or_report(path: str) -> PolicySet | None:
    """The policy set, or None after printing every problem with its file, line and field.
    The engine is imported here, not at the top: `trainadmit preflight` runs in every training Pod's
    init container and must not pay for the policy models and CEL it never uses."""
    from ..engine import load_policy
    from ..policy import PolicyError

    try:
        return load_policy(path)
    except PolicyError as exc:
        if len(exc.problems) == 1:  # one line, as every other startup error
            print(f"trainadmit: invalid policy in {path}: {exc.problems[0]}", file=sys.stderr)
            return None
        print(f"trainadmit: invalid policy in {path}:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return None
