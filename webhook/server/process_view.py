"""The server's cluster view, with what only the server's own processes know: whether a reconciler runs.

Decisions leave the PodGroups of some gang backends (and the placement gate's release) to the elected
reconciler, which runs in the controllers' process of the replicas started with ``--reconcile``; the workers that
decide learn from the controllers' process's status (shared memory, ``controller_status``) whether it
works. So the workers' view answers ``ClusterView.reconciler``: a server without ``--reconcile`` has none; one
whose reconciler cannot hold its Lease or is refused its work (a configuration failure, ``elected``) has none
that works; a replica that runs it, or waits while another replica holds the Lease, has one.
"""

from __future__ import annotations

from typing import Any

from .controller_status import ControllerStatus

RECONCILER_LOOP = "reconciler"  # the elected loop's name (cli.serve.start_reconciler)


def missing_reconciler(reconcile: bool, status: ControllerStatus | None) -> str | None:
    """Why no reconciler works for this server, as a phrase; None when one does."""
    if not reconcile:
        return "serve runs without --reconcile"
    problem = status.problem(RECONCILER_LOOP) if status is not None else None
    return f"its reconciler cannot work ({problem})" if problem else None


class ProcessView:
    """``view``, answering ``reconciler()`` from this server's processes. Never constant: the decision cache
    asks again on every hit, so a reconciler that starts or stops working changes the next decision."""

    constant = False

    def __init__(self, view: Any, reconcile: bool, status: ControllerStatus | None) -> None:
        self._view, self._reconcile, self._status = view, reconcile, status

    def __getattr__(self, name: str) -> Any:
        return getattr(self._view, name)

    def reconciler(self) -> str | None:
        return missing_reconciler(self._reconcile, self._status)
