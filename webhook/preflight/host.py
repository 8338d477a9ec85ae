"""Where the preflight looks and who it is: the filesystem root, the node, the Pod, the gang's run."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..grammars.preflight import ENV_NODE, ENV_POD, ENV_ROOT, ENV_RUN


class CheckFailed(Exception):
    """A check found the node short of what the decision expects; the message is the one line."""


@dataclass(frozen=True)
class Host:
    """The node as the preflight sees it. ``root`` prefixes every absolute path it reads or writes, so
    that a test can lay out ``sys/class/infiniband``, ``dev/nvidia*`` and mounts in a temporary
    directory; in a Pod it is ``/``."""

    root: Path = Path("/")
    node: str = ""
    pod: str = ""
    run: str = ""  # unique to one run of the workload (a Job's controller-uid), or empty
    started: float = field(default_factory=time.time)  # wall clock: gang markers of older runs are stale

    @classmethod
    def from_environment(cls, root: str | None = None, node: str | None = None) -> Host:
        """The Pod's own identity from the downward-API variables the injected container sets."""
        return cls(root=Path(root or os.environ.get(ENV_ROOT) or "/"),
                   node=node or os.environ.get(ENV_NODE) or socket.gethostname(),
                   pod=os.environ.get(ENV_POD, ""), run=os.environ.get(ENV_RUN, ""))

    def path(self, absolute: str) -> Path:
        """An absolute path inside the Pod, under the root."""
        return self.root / absolute.lstrip("/")

    def listdir(self, absolute: str) -> list[str]:
        """Names in a directory, sorted; none when it is absent (a class the kernel does not have)."""
        try:
            return sorted(os.listdir(self.path(absolute)))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def read(self, absolute: str) -> str:
        """A sysfs attribute, stripped; empty when unreadable."""
        try:
            return self.path(absolute).read_text().strip()
        except OSError:
            return ""


@dataclass(frozen=True)
class Budget:
    """The time left of the preflight's budget (monotonic clock)."""

    deadline: float

    def remaining(self) -> float:
        return self.deadline - time.monotonic()
