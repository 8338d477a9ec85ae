"""The Prometheus multi-process directory of one ``trainadmit serve``: created before prometheus_client is
first imported (it picks its mode at import), removed when the server exits.

Why the cleanup matters: every start used to leave a ``trainadmit-metrics-*`` folder behind.
In the Deployment ``/tmp`` is a memory-backed emptyDir that survives container restarts and is
charged to the container's memory, so a crash-looping container would also fill it; folders left by a
server that no longer runs (killed before it could clean up) are removed at the next start.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

ENV = "PROMETHEUS_MULTIPROC_DIR"
PREFIX = "trainadmit-metrics-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def create() -> Path | None:
    """Set ``PROMETHEUS_MULTIPROC_DIR`` to a new folder unless the environment names one; the folder created
    (for ``remove``), or None when it was given. Folders of earlier servers no longer running are removed."""
    if os.environ.get(ENV):
        return None
    base = Path(tempfile.gettempdir())
    for old in base.glob(f"{PREFIX}*"):
        owner = old.name[len(PREFIX):].split("-", 1)[0]
        if owner.isdigit() and (int(owner) == os.getpid() or not _alive(int(owner))):
            shutil.rmtree(old, ignore_errors=True)
    path = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=base))
    os.environ[ENV] = str(path)
    return path


def remove(path: Path | None) -> None:
    """Remove a folder ``create`` made, in the process that made it only: gunicorn's workers are forked from
    the server's process and leave through the same ``finally`` blocks when they exit."""
    if path is not None and path.name.startswith(f"{PREFIX}{os.getpid()}-"):
        with contextlib.suppress(OSError):
            shutil.rmtree(path)
