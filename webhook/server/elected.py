"""A Lease-elected controller loop of the server's controllers' process, whose failures say what to change.

The loop holds the Lease itself, then lets the controller do one pass, so that it knows which of the two
failed. A failure the cluster's configuration causes (the namespace of the Lease does not exist, the
ServiceAccount may not get, create or update the Lease or call what the pass calls, the credentials are
refused) cannot pass by retrying: it is logged once as one line naming the namespace, the Lease and the
permission (the apiserver's own message names the verb, resource and user), and reported on ``/readyz``
until a pass works again. Any other failure (a timeout, a 5xx) is logged when it first happens and when it
stops, never every pass.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..cluster.lease import LeaderLease
from .controller_status import ControllerStatus
from .options import sources
from .settings import Controllers


def _apiserver_message(exc: BaseException) -> str:
    """The message of the apiserver's Status in an ApiException's body, else its reason."""
    body = getattr(exc, "body", None)
    try:
        message = json.loads(body).get("message") if body else None
    except (ValueError, AttributeError):
        message = None
    return str(message or getattr(exc, "reason", None) or exc).strip()


def explain(exc: BaseException, lease: LeaderLease, holding: bool) -> tuple[str, bool]:
    """What went wrong, as one line, and whether it is the cluster's configuration (retrying cannot help).
    ``holding``: the failure came from the pass, with the Lease held; else from holding the Lease."""
    status = getattr(exc, "status", None)
    where = f"Lease {lease.namespace}/{lease.name}"
    message = _apiserver_message(exc)
    if not holding and status == 404:
        setting = sources(Controllers, "namespace")
        return (f"namespace {lease.namespace} does not exist, so the {where} cannot be created: create the "
                f"namespace, or set {setting} to the namespace the server runs in ({message})", True)
    if not holding and status == 403:
        return (f"not allowed to use the {where}: grant get and update on leases.coordination.k8s.io named "
                f"{lease.name}, and create on leases, in namespace {lease.namespace} ({message})", True)
    if status == 401:
        return f"the apiserver refused the credentials ({message})", True
    if status == 403:
        return f"holding the {where}, but not allowed to do its work: {message}", True
    if status == 404 and holding:
        return f"holding the {where}, but what it works on is not served: {message}", False
    what = "holding the" if not holding else "a pass, holding the"
    return f"{what} {where} failed: {message if status else repr(exc)}", False


@dataclass
class ElectedLoop:
    """``work()`` once per ``interval`` while this replica holds ``lease``; its lines are logged."""

    name: str
    lease: LeaderLease
    work: Callable[[], Iterable[str]]
    log: Callable[[str], None]
    status: ControllerStatus | None = None
    problem: str | None = None  # the failure last logged, until a pass works again

    def step(self) -> None:
        holding = False
        try:
            holding = self.lease.hold()
            lines = list(self.work()) if holding else []
        except Exception as exc:  # a controller's failure must never stop the loop (nor the server)
            line, configuration = explain(exc, self.lease, holding)
            if line != self.problem:
                self.log(f"{self.name}: {line}")
                self.problem = line
            if self.status is not None:
                self.status.set(self.name, line if configuration else None)
            return
        if self.problem is not None:
            self.log(f"{self.name}: working again" + ("" if holding else f" (the Lease {self.lease.name} is held "
                                                                        "by another replica)"))
            self.problem = None
        if self.status is not None:
            self.status.set(self.name, None)
        for line in lines:
            self.log(f"{self.name}: {line}")

    def run(self, stop: threading.Event, interval: float) -> None:
        while not stop.is_set():
            self.step()
            stop.wait(interval)

    def start(self, interval: float) -> threading.Event:
        """Run as a daemon thread; returns the event that stops it."""
        stop = threading.Event()
        threading.Thread(target=self.run, args=(stop, interval), name=self.name, daemon=True).start()
        return stop
