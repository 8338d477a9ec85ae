"""What the server says about the cluster it runs against, and what it cannot honour: at startup and on
change in its log, on ``/readyz`` and in ``/metrics``.

A setting the cluster or the process cannot honour used to show only as its consequence: every GPU Job refused
at ``/validate`` (a backend not served), or gangs whose Pods waited for a PodGroup nobody created (a server
without its reconciler). Now the platform team learns it four ways from one computation (``unhonoured``: the
policy and the cluster's discovery through ``engine.target.choose``, the same the decisions make, and whether
the elected reconciler runs, ``process_view.missing_reconciler``): a ``setting_unhonoured`` log line when
``serve`` starts and whenever the set changes (``setting_honoured`` when one is resolved), the ``degraded`` detail
of ``/readyz`` (200: admissions stay safe, each affected one says what happens to it), the gauge
``trainadmit_policy_setting_unhonoured{setting}``, and a warning on every workload it affects
(``gang.unavailable``, ``reconciler.missing``). Without a cluster view the startup line says what ``auto``
assumes. The notes of the platform (``engine.platform``: what every gang workload is told and only the platform
changes, such as no scheduler that holds a rack) are said the same way once: a ``platform_note`` log line at start
and on change, and ``/readyz``'s ``cluster.notes``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..engine.clusterview import ClusterView, Discovered
from ..engine.platform import PlatformNote, target_notes
from ..engine.target import POD_GROUP, Target, choose
from ..policy.vocab import GangBackend
from .logs import emit

if TYPE_CHECKING:
    from ..policy import PolicySet

RECONCILER = "reconciler"
# the settings an unhonoured report can name (the gauge's label values: a closed set)
SETTINGS = ("kubernetesVersion", "gang.backend", "gang.nativeMode", "featureGates", RECONCILER)


@dataclass(frozen=True)
class Unhonoured:
    """One setting the cluster or this server cannot honour: its name (a gauge label), how the log names it
    (``Platform.spec.…``, a flag), and what it means."""

    setting: str
    logged_as: str
    message: str


def target_of(policy: PolicySet, cluster: ClusterView | None) -> tuple[Target, Discovered | None]:
    discovered = cluster.discovered() if cluster is not None else None
    return choose(policy.platform, discovered), discovered


def needs_reconciler(target: Target) -> str:
    """What of the gangs ``target`` gives only the elected reconciler makes ("" when nothing): the standalone
    PodGroups of the native pod-group, coscheduling and Volcano backends (a batch Job's gang). The placement
    gate's release joins it once the engine plans it (``engine.concerns.reconciler.needs``, per workload)."""
    backend = target.backend
    if backend is GangBackend.coscheduling or backend is GangBackend.volcano or (
            backend is GangBackend.native and target.native_mode == POD_GROUP):
        return f"gang backend {target.backend_name} gets its PodGroups from trainadmit's reconciler"
    return ""


def unhonoured(policy: PolicySet, target: Target, missing_reconciler: str | None) -> list[Unhonoured]:
    """Every setting that cannot be honoured now (``missing_reconciler``: why no reconciler runs, or None)."""
    out = [Unhonoured(u.setting, f"Platform.spec.{u.setting}", u.message) for u in target.unhonoured]
    needs = needs_reconciler(target)
    if needs and missing_reconciler:
        out.append(Unhonoured(RECONCILER, "--reconcile",
                              f"{needs}, and {missing_reconciler}: gang Pods wait for a PodGroup nobody creates "
                              "(each such workload is admitted with warning reconciler.missing); run serve "
                              "--reconcile"))
    return out


def detail(policy: PolicySet, cluster: ClusterView | None) -> dict[str, Any]:
    """``/readyz``'s ``cluster`` field: the version and gang backend decisions use, and what cannot be honoured."""
    target, discovered = target_of(policy, cluster)
    body: dict[str, Any] = {"kubernetesVersion": target.version_text, "versionFrom": target.version_from,
                            "gangBackend": target.backend_name, "summary": target.summary(
                                discovered.git_version if discovered else "")}
    found = unhonoured(policy, target, cluster.reconciler() if cluster is not None else None)
    if found:
        body["unhonoured"] = [{"setting": u.setting, "message": u.message} for u in found]
    notes = target_notes(policy, target)
    if notes:
        body["notes"] = [{"rule": n.rule, "message": n.message} for n in notes]
    if target.assumed:
        body["assumed"] = target.assumed
    return body


def degraded(body: dict[str, Any], controller_problems: list[str]) -> list[str]:
    """``/readyz``'s ``degraded`` lines: what the server admits with and cannot honour (each named), and the
    problems of its Lease-elected controllers. None of them makes an admission unsafe (the certificate and the
    policy, which would, fail readiness): each affected workload is admitted with a warning saying what will
    happen to it, and the replica stays in the Service (all of them failing readiness would refuse every GPU
    workload, the validating webhook failing closed)."""
    return [f"unhonoured {u['setting']}: {u['message']}" for u in body.get("unhonoured", [])] + controller_problems


class Monitor:
    """The log lines of the controllers' process (the first ones the main process's, before listening): the cluster
    decisions are for and each setting that cannot be honoured, once at startup and again whenever they change (the
    workers' views answer ``/readyz`` and ``/metrics``; one writer keeps the log free of one copy per worker)."""

    def __init__(self, policy: Callable[[], PolicySet | None], discover: Callable[[], Discovered | None],
                 missing_reconciler: Callable[[], str | None], viewed: bool, rediscover: float = 30.0,
                 clock: Callable[[], float] | None = None) -> None:
        import time

        self.policy, self.discover, self.missing_reconciler = policy, discover, missing_reconciler
        self.viewed, self.rediscover = viewed, rediscover
        self.clock = clock or time.monotonic
        self._discovered: Discovered | None = None
        self._read_at: float | None = None
        self._summary: str | None = None
        self._said: dict[str, Unhonoured] = {}
        self._noted: dict[str, PlatformNote] = {}

    def step(self) -> None:
        policy = self.policy()
        if policy is None:
            return
        now = self.clock()
        if self._read_at is None or now - self._read_at >= self.rediscover:
            self._read_at = now
            found = self.discover()
            self._discovered = found if found is not None else self._discovered
        discovered = self._discovered
        target = choose(policy.platform, discovered)
        summary = target.summary(discovered.git_version if discovered else "")
        if summary != self._summary:
            first = self._summary is None
            self._summary = summary
            emit("cluster", message=summary, kubernetes_version=target.version_text,
                 gang_backend=target.backend_name, **({"assumed": target.assumed} if target.assumed else {}),
                 **({} if self.viewed else {"note": "no cluster view (--cluster-live or --cluster): auto cannot see "
                                                    "the cluster"}), **({} if first else {"changed": True}))
        now_unhonoured = {u.setting: u for u in unhonoured(policy, target, self.missing_reconciler())}
        for setting, u in now_unhonoured.items():
            if self._said.get(setting) != u:
                emit("setting_unhonoured", setting=u.logged_as, message=u.message)
        for setting, u in self._said.items():
            if setting not in now_unhonoured:
                emit("setting_honoured", setting=u.logged_as, message=f"honoured now (was: {u.message})")
        self._said = now_unhonoured
        notes = {n.rule: n for n in target_notes(policy, target)}
        for rule, n in notes.items():
            if self._noted.get(rule) != n:
                emit("platform_note", rule=rule, message=n.message)
        self._noted = notes

    def run(self, stop: threading.Event, interval: float) -> None:
        while not stop.wait(interval):
            try:
                self.step()
            except Exception as exc:  # a log line's failure must never stop the server
                emit("cluster_report_error", error=repr(exc))

    def start(self, interval: float = 5.0) -> threading.Event:
        """One step per ``interval``, the first after one interval: the caller takes the first itself, so that
        the startup lines come before ``listening`` (the main process's, before it forks the controllers')."""
        stop = threading.Event()
        threading.Thread(target=self.run, args=(stop, interval), name="cluster-report", daemon=True).start()
        return stop


def discover(log) -> Discovered | None:
    """The cluster's discovery, read for the log lines (the workers' live views read their own); None, after one
    line, when it cannot be read."""
    from kubernetes import client

    from ..cluster.discovery import read
    from ..cluster.kube import load_config

    try:
        load_config()
        served, version, git_version = read(client.ApiClient(), lambda func, *a, **kw: func(*a, **kw))
    except Exception as exc:  # unreachable, refused, timed out: the live views retry on their own
        log(f"cannot read the cluster's /version and /apis yet ({type(exc).__name__}: {str(exc)[:200]}); "
            "decisions wait for the live view")
        return None
    return Discovered(version, git_version, frozenset(served))
