"""The policy of a directory for the controllers of the elected replica, reloaded when its files change.

The webhook's workers reload their own policy (``server.runtime.PolicyStore``); the reconciler runs
in the server's controllers' process and needs the same generation to write reports and ResourceQuotas
from. Same rule as the workers: a version that fails to load leaves the previous one in use.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ..policy import PolicyError, PolicySet
from ..policy.files import policy_files


def _fingerprint(directory: Path) -> tuple:
    try:
        files = policy_files(directory)
    except OSError:
        return ()
    out = []
    for path in files:
        try:
            st = os.stat(path)  # follows the ..data symlink of a mounted ConfigMap
            out.append((str(path), st.st_ino, st.st_mtime_ns, st.st_size))
        except OSError:
            out.append((str(path), None))
    return tuple(out)


class PolicyDirectory:
    """``current()``: the last policy of ``directory`` that loaded cleanly (None before the first)."""

    def __init__(self, directory: str | Path, log: Callable[[str], None] = print):
        self.directory = Path(directory)
        self.log = log
        self.policy: PolicySet | None = None
        self._fp: tuple | None = None

    def current(self) -> PolicySet | None:
        from ..engine import load_policy

        fp = _fingerprint(self.directory)
        if fp != self._fp:
            self._fp = fp
            try:
                self.policy = load_policy(self.directory)
            except (PolicyError, OSError, UnicodeDecodeError) as exc:
                kept = self.policy.generation if self.policy is not None else None
                self.log(f"policy {self.directory} did not load ({exc}); keeping generation {kept}")
        return self.policy
