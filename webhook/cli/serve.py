"""`trainadmit serve`: the webhook server, and the controllers that run beside it.

Every setting and input is checked before gunicorn starts (the settings' values, policy, certificate and
key, cluster snapshots, API access, the address to listen on), so that a bad one is a single line naming
the flag, variable, file or address, and exit code 2, never a traceback from a worker. Once it runs, every
line it writes is JSON (``server.logs``).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from .common import EXIT_ERROR, load_policy_or_report

if TYPE_CHECKING:
    from ..server.settings import ServerSettings


def _refuse(problem: str) -> int:
    print(f"trainadmit serve: {problem}", file=sys.stderr)
    return EXIT_ERROR


def cmd_serve(args: argparse.Namespace) -> int:
    from ..server.settings import SettingError, load

    try:
        settings = load(args, os.environ)
    except SettingError as exc:
        return _refuse(str(exc))
    if not (settings.tls.cert_file and settings.tls.key_file):
        return _refuse("needs --tls-cert and --tls-key (HTTPS only; or TRAINADMIT_TLS_CERT and TRAINADMIT_TLS_KEY)")
    from ..server import metrics_dir

    created = metrics_dir.create()  # prometheus_client picks its multi-process mode when first imported
    try:
        return _serve(settings)
    finally:  # gunicorn's workers leave through here too: remove() acts in this process only
        metrics_dir.remove(created)


def _check_inputs(settings: ServerSettings) -> str | None:
    """The first unusable input, as one line; None when all are usable."""
    from ..server.logs import emit
    from ..server.startup import StartupError, check_cluster_files, check_kube_config, check_tls_pair

    controllers = settings.controllers
    try:
        try:
            check_tls_pair(settings.tls.cert_file, settings.tls.key_file)
        except StartupError as exc:
            if not controllers.manage_certs:
                raise
            # in-cluster certificate mode: this server's own controller writes the Secret (the kubelet then
            # projects it), so a missing or stale pair is what it is about to fix, not a reason to exit
            emit("startup", message=f"{exc}; waiting for the certificate controller (--manage-certs)")
        check_cluster_files(list(settings.app.cluster_files))
        if settings.app.cluster_live or controllers.reconcile or controllers.manage_certs or \
                settings.listen.metrics_auth:
            check_kube_config()
    except StartupError as exc:
        return str(exc)
    return None


def _serve(settings: ServerSettings) -> int:
    from ..server.logs import capture_warnings
    from ..server.stacks import dump_on_signal
    from ..server.startup import StartupError, bind_listeners

    capture_warnings()  # from here on every line is JSON, a library's warnings included
    dump_on_signal()  # `kill -PWR`: every thread's stack on stderr (the one kind of line that is not JSON)
    problem = _check_inputs(settings)
    if problem:
        return _refuse(problem)
    policy = load_policy_or_report(settings.app.policy_dir)  # every problem with file and field, first
    if policy is None:
        return EXIT_ERROR
    try:
        listener, metrics_listener = bind_listeners(settings.listen)
    except StartupError as exc:
        return _refuse(str(exc))
    from ..server.controller_process import ControllerProcess
    from ..server.controller_status import ControllerStatus
    from ..server.gunicorn_app import serve
    from ..server.logs import emit

    controllers = settings.controllers
    names = [*(["certificates"] if controllers.manage_certs else []),
             *(["reconciler", "preflight-status", "placement"] if controllers.reconcile else [])]
    status = ControllerStatus(names) if names else None  # shared memory, mapped before any fork
    monitor = _report_cluster(settings, status)  # its first lines now, before listening

    def run_controllers(stop) -> None:
        """In the controllers' process: every thread the server runs beside its workers."""
        monitor.start()
        if controllers.manage_certs:
            start_cert_controller(controllers.namespace, controllers.service, status)
        if controllers.reconcile:
            start_reconciler(controllers.namespace, policy.keys.podgroup, str(settings.app.policy_dir),
                             settings.app.cluster_max_age, status)
            start_preflight_status(controllers.namespace, policy.keys.preflight, policy.keys.applied, status)
            start_placement(controllers.namespace, f"{policy.keys.podgroup.rsplit('/', 1)[0]}/placement", status)

    sockets = [s for s in (listener, metrics_listener) if s is not None]
    process = ControllerProcess(run_controllers, emit, lambda: [s.fileno() for s in sockets if s.fileno() >= 0])
    try:
        process.start()  # before gunicorn: this process forks its workers with no thread of its own
    except OSError as exc:
        return _refuse(f"cannot start the controllers' process: {exc.strerror or exc}")
    return serve(settings, listener, status, metrics_listener, process)


def _report_cluster(settings: ServerSettings, status):
    """The cluster decisions are for, and each setting it or this server cannot honour: one line each now, before
    listening, and again whenever they change once the returned ``server.cluster_report.Monitor`` is started."""
    from ..cluster.policy_dir import PolicyDirectory
    from ..server import cluster_report
    from ..server.logs import emit
    from ..server.process_view import missing_reconciler

    app = settings.app
    if app.cluster_live:
        discover = lambda: cluster_report.discover(  # noqa: E731
            lambda message: emit("cluster_discovery_failed", message=message))
    elif app.cluster_files:
        from ..cluster.snapshot import SnapshotCluster

        found = SnapshotCluster.from_files(list(app.cluster_files)).discovered()
        discover = lambda: found  # noqa: E731
    else:
        discover = lambda: None  # noqa: E731
    policies = PolicyDirectory(app.policy_dir, lambda message: emit("cluster_report", message=message))
    reconcile = settings.controllers.reconcile
    monitor = cluster_report.Monitor(policies.current, discover, lambda: missing_reconciler(reconcile, status),
                                     viewed=app.cluster_live or bool(app.cluster_files))
    monitor.step()
    return monitor


def _elected(namespace: str, lease_name: str, name: str, make, status, interval: float):
    """Run ``make(me, log)``'s one pass (a callable returning the lines to log) in a daemon thread of the
    server's controllers' process while this replica holds the Lease ``lease_name``; returns the thread's stop event."""
    from kubernetes import client

    from ..cluster.kube import identity, load_config
    from ..cluster.lease import LeaderLease
    from ..server.elected import ElectedLoop
    from ..server.logs import emit

    load_config()
    log = lambda message: emit(name, message=message)  # noqa: E731
    me = identity()
    lease = LeaderLease(client.CoordinationV1Api(), namespace, lease_name, me, log=log)
    return ElectedLoop(name, lease, make(me, log), log, status).start(interval)


def start_cert_controller(namespace: str, service: str, status=None, interval: float = 30.0):
    """In-cluster certificate mode: keeps the Secret and the caBundle current."""
    from ..certs.incluster import from_kubeconfig
    from ..cluster.lease import CERTS_LEASE

    def make(me, log):
        controller = from_kubeconfig(namespace=namespace, service=service, identity=me, log=log)

        def work() -> list[str]:
            message = controller.reconcile()
            return [] if message == "nothing due" else [message]
        return work

    return _elected(namespace, CERTS_LEASE, "certificates", make, status, interval)


def start_reconciler(namespace: str, key: str, policy_dir: str = "policies", max_age: float = 180.0, status=None,
                     interval: float = 5.0):
    """The reconciler (the PodGroups the coscheduling and native backends need, the budgets' ResourceQuotas
    and the reports), on a cluster view of its own that keeps the workloads whole, started once elected."""
    import threading

    from kubernetes import client

    from ..cluster.budget import BUDGET_NAME, BudgetQuotas
    from ..cluster.lease import RECONCILER_LEASE
    from ..cluster.live import LiveCluster
    from ..cluster.policy_dir import PolicyDirectory
    from ..cluster.reconciler import PodGroupReconciler, Reconciler
    from ..cluster.report_writer import ReportWriter
    from ..server.metrics import RECONCILER_EVENT_LAG, RECONCILER_PASS, record_report_violations, record_write

    def make(me, log):
        core, custom = client.CoreV1Api(), client.CustomObjectsApi()
        # PodGroups from the workloads' watch events; the full pass every 30 s is the safety net
        podgroups = PodGroupReconciler(custom, None, key=key, log=log, resync=30.0, on_write=record_write,
                                       on_lag=RECONCILER_EVENT_LAG.observe)
        # discovery every 15 s: a report CRD installed later is written to within that
        view = LiveCluster(core, custom=custom, log=log, max_age=max_age, discovery_interval=15.0,
                           on_change=lambda what, ns: writer.mark(what, ns), keep_workloads=True,
                           on_workload=podgroups.event)
        writer = ReportWriter(custom, view, log=log, on_counts=record_report_violations, on_write=record_write)
        budgets = BudgetQuotas(core, lambda ns: view.quota_object(ns, BUDGET_NAME), log=log,
                               ready=lambda: view.synced.is_set() and view.stale() is None, on_write=record_write)
        policy = PolicyDirectory(policy_dir, log).current

        def elected() -> None:
            stop = threading.Event()
            threading.Thread(target=podgroups.run_events, args=(stop,), name="podgroup-events", daemon=True).start()
            view.start(stop)

        return Reconciler(None, podgroups, policy, [("budgets", budgets.step), ("reports", writer.step)], log,
                          on_elected=elected, on_pass=RECONCILER_PASS.observe).step

    return _elected(namespace, RECONCILER_LEASE, "reconciler", make, status, interval)


def start_preflight_status(namespace: str, key: str, applied_key: str, status=None, interval: float = 5.0):
    """The preflight status reconciler, feeding the preflight metrics of the server's /metrics."""
    from kubernetes import client

    from ..cluster.lease import PREFLIGHT_STATUS_LEASE
    from ..cluster.preflight_status import PreflightStatus
    from ..server.metrics import PREFLIGHT_FAILURES, PREFLIGHT_READY

    return _elected(namespace, PREFLIGHT_STATUS_LEASE, "preflight-status",
                    lambda me, log: PreflightStatus(
                        client.CoreV1Api(), client.CustomObjectsApi(), None, key=key, applied_key=applied_key,
                        identity=me, log=log,
                        on_failure=lambda pool, node, check: PREFLIGHT_FAILURES.labels(pool, node, check).inc(),
                        on_ready=lambda pool, seconds: PREFLIGHT_READY.labels(pool).observe(seconds)).step,
                    status, interval)


def start_placement(namespace: str, gate: str, status=None):
    """The placement gate's ungater (``cluster.placement``): once elected, its own watch of Pods and Nodes; a pass on
    every change of them (and at each renewal of its Lease), never on a period alone."""
    import threading

    from kubernetes import client

    from ..cluster.kube import identity, load_config
    from ..cluster.lease import PLACEMENT_LEASE, LeaderLease
    from ..cluster.placement import RenewedLease, Ungater, run
    from ..cluster.pod_store import PodStore, Watcher
    from ..server.elected import ElectedLoop
    from ..server.logs import emit

    load_config()
    log = lambda message: emit("placement", message=message)  # noqa: E731
    core = client.CoreV1Api()
    lease = RenewedLease(LeaderLease(client.CoordinationV1Api(), namespace, PLACEMENT_LEASE, identity(), log=log))
    store = PodStore(gate, f"{gate}-domain")
    ungater = Ungater(core, store, gate, log)
    stop = threading.Event()
    started: list[bool] = []

    def work() -> list[str]:
        if not started:  # the watches start once this replica leads: the others keep no Pods
            started.append(True)
            Watcher(core, store, log).start(stop)
        return ungater.step()

    loop = ElectedLoop("placement", lease, work, log, status)  # type: ignore[arg-type]
    threading.Thread(target=run, args=(loop.step, store, stop), name="placement", daemon=True).start()
    return stop
