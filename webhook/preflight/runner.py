"""Run the checks in order within the time budget; report one line and the termination message.

The checks run in a worker thread while the caller waits at most the budget: a read from a hung
network mount blocks in the kernel and cannot be interrupted, but the preflight must still say
which check hung and exit (the CLI then leaves with ``os._exit``, since that thread never returns).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

from ..grammars.preflight import TERMINATION_LOG, Check, Expectations, Result
from . import devices, gang, network, storage
from .host import Budget, CheckFailed, Host

CheckFunction = Callable[[Host, Expectations, Budget], str]
CHECKS: dict[Check, CheckFunction] = {
    Check.gpus: devices.gpus, Check.rdma: devices.rdma, Check.ports: devices.ports, Check.nccl: network.nccl,
    Check.shm: storage.shm, Check.datasets: storage.datasets, Check.checkpoint: storage.checkpoint,
    Check.gang: gang.gang,
}


def run(expect: Expectations, host: Host) -> tuple[Result, bool]:
    """(the result, whether a check is still blocked in the background after the budget ran out)."""
    started = time.monotonic()
    budget = Budget(started + expect.timeout_seconds)
    result = Result(ok=True, node=host.node, pod=host.pod)
    current: list[Check] = []

    def work() -> None:
        for check in expect.checks:
            current.append(check)
            try:
                result.passed[check.value] = CHECKS[check](host, expect, budget)
            except CheckFailed as exc:
                result.ok, result.check, result.message = False, check.value, str(exc)
                return
            except Exception as exc:  # a bug must still leave a result, not a traceback alone
                result.ok, result.check = False, check.value
                result.message = f"the {check.value} check failed unexpectedly: {exc!r}"
                return

    worker = threading.Thread(target=work, name="preflight-checks", daemon=True)
    worker.start()
    worker.join(timeout=expect.timeout_seconds)
    stuck = worker.is_alive()
    if stuck:
        check = current[-1].value if current else "start"
        result = Result(ok=False, node=host.node, pod=host.pod, check=check, passed=dict(result.passed),
                        message=f"the {check} check did not finish within the {expect.timeout_seconds}s budget "
                                "(a hung mount or device?)")
    result.seconds = time.monotonic() - started
    return result, stuck


def report(result: Result, host: Host, termination_log: str = TERMINATION_LOG) -> None:
    """The one line on stdout (passed) or stderr (failed), and the JSON result in the termination
    message file, which the kubelet copies into the container's status."""
    line = f"trainadmit preflight: {result.line()}"
    if not result.ok:
        line += f" [check {result.check}]"
    print(line, file=sys.stdout if result.ok else sys.stderr, flush=True)
    path = host.path(termination_log)
    try:
        path.write_text(result.to_json())
    except OSError as exc:
        print(f"trainadmit preflight: cannot write the termination message {termination_log}: {exc.strerror}",
              file=sys.stderr, flush=True)
