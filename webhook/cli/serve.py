"""`trainadmit serve`: the webhook server, and the controllers that run beside it.

Every input is checked before gunicorn starts (policy, certificate and key, cluster snapshots, API access),
so that a bad one is a single line naming the file and exit code 2, never a traceback from a worker.
"""

from __future__ import annotations

import argparse
import sys

from .common import EXIT_ERROR, EXIT_OK, load_policy_or_report


def cmd_serve(args: argparse.Namespace) -> int:
    if not (args.tls_cert and args.tls_key):
        print("trainadmit serve: needs --tls-cert and --tls-key (HTTPS only; or TRAINADMIT_TLS_CERT and "
              "TRAINADMIT_TLS_KEY)", file=sys.stderr)
        return EXIT_ERROR
    from ..server import metrics_dir

    created = metrics_dir.create()  # prometheus_client picks its multi-process mode when first imported
    try:
        return _serve(args)
    finally:  # gunicorn's workers leave through here too: remove() acts in this process only
        metrics_dir.remove(created)


def _check_inputs(args: argparse.Namespace) -> str | None:
    """The first unusable input, as one line; None when all are usable."""
    from ..server.startup import StartupError, check_cluster_files, check_kube_config, check_tls_pair

    try:
        try:
            check_tls_pair(args.tls_cert, args.tls_key)
        except StartupError as exc:
            if not args.manage_certs:
                raise
            # in-cluster certificate mode: this server's own controller writes the Secret (the kubelet then
            # projects it), so a missing or stale pair is what it is about to fix, not a reason to exit
            print(f"trainadmit serve: {exc}; waiting for the certificate controller (--manage-certs)",
                  file=sys.stderr)
        check_cluster_files(args.cluster or [])
        if args.cluster_live or args.reconcile or args.manage_certs:
            check_kube_config()
    except StartupError as exc:
        return str(exc)
    return None


def _serve(args: argparse.Namespace) -> int:
    problem = _check_inputs(args)
    if problem:
        print(f"trainadmit serve: {problem}", file=sys.stderr)
        return EXIT_ERROR
    policy = load_policy_or_report(args.policy)  # every problem with file and field, before any worker starts
    if policy is None:
        return EXIT_ERROR
    from ..server.app import ServerConfig
    from ..server.gunicorn_app import serve

    if args.manage_certs:
        start_cert_controller(args.namespace, args.service, interval=30.0)
    if args.reconcile:
        start_reconciler(args.namespace, policy.keys.podgroup, args.policy, args.cluster_max_age)
        start_preflight_status(args.namespace, policy.keys.preflight, policy.keys.applied)
    config = ServerConfig(policy_dir=args.policy, cert_file=args.tls_cert, key_file=args.tls_key,
                          cluster_files=args.cluster or [], reload_interval=args.reload_interval,
                          enable_noop=args.enable_noop, cluster_live=args.cluster_live,
                          cluster_max_age=args.cluster_max_age)
    serve(config, bind=f"{args.host}:{args.port}", workers=args.workers, threads=args.threads,
          timeout=args.timeout, graceful_timeout=args.graceful_timeout, read_timeout=args.read_timeout,
          max_requests=args.max_requests, max_requests_jitter=args.max_requests_jitter,
          worker_class=args.worker_class)
    return EXIT_OK


def start_cert_controller(namespace: str, service: str, interval: float):
    """In-cluster certificate mode: a thread (in the gunicorn master) that keeps the Secret current."""
    import threading

    from ..certs.incluster import from_kubeconfig
    from ..server.runtime import emit

    controller = from_kubeconfig(namespace=namespace, service=service,
                                 log=lambda message: emit("certificates", message=message))
    stop = threading.Event()
    threading.Thread(target=controller.run, args=(stop, interval), name="cert-controller", daemon=True).start()
    return stop


def _elected(namespace: str, lease_name: str, thread_name: str, log_event: str, make, interval: float):
    """Start ``make(lease, identity, log).run`` as a daemon thread of the server's main process, elected
    through the Lease ``lease_name`` (one replica runs it); returns the thread's stop event."""
    import threading

    from kubernetes import client

    from ..cluster.kube import identity, load_config
    from ..cluster.lease import LeaderLease
    from ..server.runtime import emit

    load_config()
    log = lambda message: emit(log_event, message=message)  # noqa: E731
    me = identity()
    worker = make(LeaderLease(client.CoordinationV1Api(), namespace, lease_name, me, log=log), me, log)
    stop = threading.Event()
    threading.Thread(target=worker.run, args=(stop, interval), name=thread_name, daemon=True).start()
    return stop


def start_reconciler(namespace: str, key: str, policy_dir: str = "policies", max_age: float = 180.0,
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
    from ..server.metrics import record_report_violations

    def make(lease, me, log):
        core, custom = client.CoreV1Api(), client.CustomObjectsApi()
        # discovery every 15 s: a report CRD installed later is written to within that
        view = LiveCluster(core, custom=custom, log=log, max_age=max_age, discovery_interval=15.0,
                           on_change=lambda what, ns: writer.mark(what, ns), keep_workloads=True)
        writer = ReportWriter(custom, view, log=log, on_counts=record_report_violations)
        budgets = BudgetQuotas(core, lambda ns: view.quota_object(ns, BUDGET_NAME), log=log,
                               ready=lambda: view.synced.is_set() and view.stale() is None)
        policy = PolicyDirectory(policy_dir, log).current
        return Reconciler(lease, PodGroupReconciler(custom, None, key=key, log=log), policy,
                          [("budgets", budgets.step), ("reports", writer.step)], log,
                          on_elected=lambda: view.start(threading.Event()))

    return _elected(namespace, RECONCILER_LEASE, "podgroup-reconciler", "reconciler", make, interval)


def start_preflight_status(namespace: str, key: str, applied_key: str, interval: float = 5.0):
    """The preflight status reconciler, feeding the preflight metrics of the server's /metrics."""
    from kubernetes import client

    from ..cluster.lease import PREFLIGHT_STATUS_LEASE
    from ..cluster.preflight_status import PreflightStatus
    from ..server.metrics import PREFLIGHT_FAILURES, PREFLIGHT_READY

    return _elected(namespace, PREFLIGHT_STATUS_LEASE, "preflight-status", "preflight-status",
                    lambda lease, me, log: PreflightStatus(
                        client.CoreV1Api(), client.CustomObjectsApi(), lease, key=key, applied_key=applied_key,
                        identity=me, log=log,
                        on_failure=lambda pool, node, check: PREFLIGHT_FAILURES.labels(pool, node, check).inc(),
                        on_ready=lambda pool, seconds: PREFLIGHT_READY.labels(pool).observe(seconds)),
                    interval)
