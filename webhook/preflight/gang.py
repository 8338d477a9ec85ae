"""The gang shares one checkpoint directory: each worker writes a marker, and waits, within the
budget, until it sees the markers of the whole gang.

Every worker must see every other's marker, not only the last to arrive: a checkpoint volume that
is not really shared (a ReadWriteOnce or node-local volume behind the same claim name) shows each
worker its own directory, and then nobody is ever "last". Gang scheduling starts the workers
together, so the wait is short when the volume is right. Markers sit under the checkpoint mount in a
directory per workload (and per run, where the Pods carry a run label: a Job's controller-uid);
without a run label, markers older than the budget belong to an earlier run and are not counted.
"""

from __future__ import annotations

import json
import os
import re
import time

from ..grammars.preflight import MARKER_DIR, Expectations
from .host import Budget, CheckFailed, Host

POLL_SECONDS = 0.2
MARGIN_SECONDS = 0.5  # report the gang's own message before the budget's watchdog does


def marker_dir(expect: Expectations, host: Host) -> str:
    """The gang's marker directory, inside the Pod."""
    name = re.sub(r"[^A-Za-z0-9_.-]", ".", expect.gang_id or "gang")
    if host.run:
        name += "-" + re.sub(r"[^A-Za-z0-9_.-]", ".", host.run)
    return f"{(expect.checkpoint or '').rstrip('/')}/{MARKER_DIR}/{name}"


def _write_marker(directory, name: str, body: dict) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{name}.tmp"
    with open(tmp, "w") as f:
        json.dump(body, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, directory / f"{name}.json")


def _seen(directory, host: Host, window: float) -> list[str]:
    out = []
    for entry in sorted(directory.glob("*.json")):
        try:
            body = json.loads(entry.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(body, dict):
            continue
        stamp = body.get("time")
        if not host.run and (not isinstance(stamp, int | float) or stamp < host.started - window):
            continue  # an earlier run of a workload with the same name
        out.append(entry.stem)
    return out


def gang(host: Host, expect: Expectations, budget: Budget) -> str:
    shown = marker_dir(expect, host)
    directory = host.path(shown)
    me = re.sub(r"[^A-Za-z0-9_.-]", ".", host.pod or host.node or f"pid{os.getpid()}")
    try:
        _write_marker(directory, me, {"pod": host.pod, "node": host.node, "time": time.time()})
    except OSError as exc:
        raise CheckFailed(f"cannot write the gang marker in {shown}: {exc.strerror or exc}") from None
    wanted = expect.gang_size or 1
    started = time.monotonic()
    while True:
        seen = _seen(directory, host, float(expect.timeout_seconds))
        if len(seen) >= wanted:
            return f"sees all {wanted} workers' markers"
        if budget.remaining() <= MARGIN_SECONDS:
            raise CheckFailed(f"sees {len(seen)} of {wanted} workers' markers in {shown} after "
                              f"{time.monotonic() - started:.0f}s: the checkpoint volume is not shared by the whole "
                              "gang, or some workers did not start")
        time.sleep(min(POLL_SECONDS, max(budget.remaining() - MARGIN_SECONDS, 0.01)))
