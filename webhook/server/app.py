"""The web apps: the admission app (POST /mutate and /validate, a bare /healthz and /readyz) and the metrics app
(/metrics and the detailed /readyz), each on its own listener.

Two Flask apps over one state (``create_apps``) that ``gunicorn_app.serve`` runs over TLS in each worker, the
connection's listener choosing the app (``Apps.wsgi``): what reaches the webhook port (anything on the node
network) learns nothing of namespaces, rules or reload errors; the metrics listener may ask for a Kubernetes
token (``metrics_auth``). The admission routes read the body and write what ``handler.answer_review`` returns;
each answer comes from exactly one policy generation (the store's decision cache is read once per request). The
benchmarks' floors are not part of it unless the settings ask for them (``floors``).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from ..cluster.kube import Permission
from ..cluster.snapshot import SnapshotCluster
from ..engine.clusterview import ClusterView, NoCluster
from ..engine.scale import SCALE_KINDS
from . import cluster_report, metrics, metrics_auth
from .controller_status import ControllerStatus
from .cost import MemoryBudget
from .handler import Answer, answer_review
from .logs import emit, write
from .process_view import ProcessView
from .runtime import CertStore, PolicyStore
from .settings import AppSettings, ServerSettings

JSON = "application/json"

_CERT_STORES: dict[tuple[str, str], CertStore] = {}
_CERT_LOCK = threading.Lock()


def cert_store(cert_file: str, key_file: str) -> CertStore:
    """One CertStore per process and file pair, shared by the TLS hook and /readyz."""
    key = (cert_file, key_file)
    with _CERT_LOCK:
        store = _CERT_STORES.get(key)
        if store is None:
            store = _CERT_STORES[key] = CertStore(cert_file, key_file)
        return store


def live_watch_timeout(max_age: float) -> int:
    """Server-side watch timeout: a quiet watch still confirms the view at least three times per max age."""
    return int(max(1, min(60, max_age // 3)))


def cluster_view_problems(live) -> list[str]:
    """Why /readyz must fail because of the live cluster view: not synced yet, or stale."""
    if live is None:
        return []
    if not live.synced.is_set():
        return ["cluster view not synced yet (listing nodes, resource quotas and referenced kinds)"]
    stale = live.stale()
    return [stale] if stale else []


# what reading the workload a /scale UPDATE resizes needs (deploy/base/rbac.yaml grants it; a test compares)
SCALE_PERMISSIONS = tuple(Permission(a.group, a.plural, ("get",)) for a in SCALE_KINDS)
_API: list = []


def fetch_stored(group: str, version: str, plural: str, namespace: str, name: str) -> dict | None:
    """The stored workload (a GET, 2 s at most), or None when it cannot be read: for a ``/scale`` UPDATE only."""
    try:
        from kubernetes import client

        if not _API:
            from ..cluster.kube import load_config

            load_config()
            _API.append(client.CustomObjectsApi())
        found = _API[0].get_namespaced_custom_object(group, version, namespace, plural, name, _request_timeout=2)
    except Exception as exc:  # not readable: the caller refuses, saying so
        emit("scale_read_error", group=group, resource=plural, namespace=namespace, name=name, error=repr(exc))
        return None
    return found if isinstance(found, dict) else None


def without_paths(text: str) -> str:
    """A reload error as the detailed /readyz shows it: what is wrong, not which file and line of the policy
    directory (the server's log has those)."""
    import re

    return re.sub(r"\S*\.ya?ml(?::\d+)*:?\s*", "", text).strip()


def _json(body: dict, status: int = 200) -> Response:
    return Response(json.dumps(body, separators=(",", ":")), status=status, mimetype=JSON)


def send(answer: Answer) -> Response:
    """Write an answer: count it, log its records, return its response."""
    if answer.outcome is None:
        metrics.BAD_REQUESTS.labels(answer.webhook, str(answer.status)).inc()
    else:
        labels = (answer.webhook, metrics.kind_label(answer.kind), metrics.operation_label(answer.operation),
                  answer.outcome)
        metrics.REQUESTS.labels(*labels).inc()
        metrics.LATENCY.labels(*labels).observe(answer.elapsed)
        if answer.counted:  # once per submission, each rule once (handler.counts)
            for rule in answer.denied:
                metrics.DENIALS.labels(metrics.rule_label(rule)).inc()
            for rule in answer.warned:
                metrics.WARNINGS.labels(metrics.rule_label(rule)).inc()
    for entry in answer.records:
        write(entry)
    return _json(answer.body, answer.status)


def _cluster_view(settings: AppSettings):
    """The cluster view decisions use, and the live view when there is one (for /readyz and /metrics)."""
    if settings.cluster_live:
        from kubernetes import client

        from ..cluster.kube import load_config
        from ..cluster.live import LiveCluster

        load_config()
        live = LiveCluster(client.CoreV1Api(), log=lambda message: emit("cluster_view", message=message),
                           max_age=settings.cluster_max_age, watch_timeout=live_watch_timeout(settings.cluster_max_age))
        live.start(threading.Event())
        return live, live
    cluster: ClusterView = SnapshotCluster.from_files(list(settings.cluster_files)) if settings.cluster_files \
        else NoCluster()
    return cluster, None


def _reload_loop(policies: PolicyStore, interval: float) -> None:
    while True:
        time.sleep(interval)
        try:
            policies.poll()
        except Exception as exc:
            emit("policy_reload_error", error=repr(exc))


@dataclass(frozen=True)
class Apps:
    """The two apps of one worker process, over one state (policy store, cluster view, certificate):
    ``admission`` (what the webhook port serves: ``/mutate``, ``/validate``, and ``/healthz`` and ``/readyz`` as a
    bare status for the kubelet's probes) and ``metrics`` (what the metrics listener serves: ``/metrics`` and
    ``/readyz`` with its detail: problems, cluster, degraded settings, the last reload error)."""

    admission: Flask
    metrics: Flask

    def wsgi(self, metrics_port: int | None):
        """The WSGI app gunicorn serves on both listeners: a request is the metrics app's when its connection
        was accepted on ``metrics_port`` (the socket's own local port, never a header a client writes)."""
        if metrics_port is None:
            return self.admission
        admission, metrics_app = self.admission.wsgi_app, self.metrics.wsgi_app

        def dispatch(environ, start_response):
            sock = environ.get("gunicorn.socket")
            try:
                port = sock.getsockname()[1] if sock is not None else None
            except (OSError, IndexError, TypeError):
                port = None
            return (metrics_app if port == metrics_port else admission)(environ, start_response)

        return dispatch


def create_app(settings: ServerSettings | None = None, controllers: ControllerStatus | None = None) -> Flask:
    """The admission app of one worker process (``create_apps``' first)."""
    return create_apps(settings, controllers).admission


def create_apps(settings: ServerSettings | None = None, controllers: ControllerStatus | None = None,
                auth: metrics_auth.Filter | None = None) -> Apps:
    """The apps of one worker process. ``controllers``: what the controllers' process reports (their
    problems make /readyz fail). ``auth``: the metrics listener's filter (``--metrics-auth`` makes one asking
    the apiserver)."""
    settings = settings or ServerSettings()
    config, limits = settings.app, settings.limits
    app = Flask("trainadmit")
    app.config["MAX_CONTENT_LENGTH"] = limits.largest_body
    memory = MemoryBudget(limits.decide_memory_bytes, limits.wait_timeout)
    policies = PolicyStore(config.policy_dir)
    policies.poll()
    view, live = _cluster_view(config)
    cluster = ProcessView(view, settings.controllers.reconcile, controllers)
    tls = settings.tls
    certs = cert_store(tls.cert_file, tls.key_file) if tls.cert_file and tls.key_file else None
    threading.Thread(target=_reload_loop, args=(policies, config.reload_interval), name="policy-reload",
                     daemon=True).start()
    app.extensions["trainadmit"] = {"policies": policies, "certs": certs, "settings": settings}
    if auth is None and settings.listen.metrics_auth:
        auth = metrics_auth.Filter(*metrics_auth.kube_reviews())

    def admit(webhook: str) -> Response:
        return send(answer_review(webhook, request.get_data(cache=False), decisions=policies.decisions, cluster=cluster,
                                  limits=limits, memory=memory, fetch=fetch_stored))

    @app.post("/mutate")
    def mutate() -> Response:
        return admit("mutate")

    @app.post("/validate")
    def validate() -> Response:
        return admit("validate")

    if config.enable_noop:
        from . import floors

        floors.install(app, policies, limits, memory, send)

    def problems() -> list[str]:
        found = []
        if policies.current is None:
            found.append(f"no policy loaded ({without_paths(policies.last_error or 'not loaded yet')})")
        if certs is not None and not certs.valid():
            found.append("serving certificate missing, unreadable or expired")
        found.extend(cluster_view_problems(live))
        return found

    @app.get("/healthz")
    def healthz() -> Response:
        return _json({"status": "ok"})

    @app.get("/readyz")
    def readyz() -> Response:
        """The kubelet's probe: the status alone (what is wrong is the metrics listener's /readyz, and the log)."""
        return _json({"status": "not ready"}, 503) if problems() else _json({"status": "ready"})

    detail = Flask("trainadmit-metrics")

    @detail.before_request
    def authenticated() -> Response | None:
        if auth is None:
            return None
        outcome = auth.check(request.headers.get("Authorization"))
        if outcome.status:
            emit("metrics_refused", status=outcome.status, path=request.path, user=outcome.user or None,
                 reason=outcome.message)
            return _json({"error": outcome.message}, outcome.status)
        return None

    @detail.get("/readyz")
    def readyz_detail() -> Response:
        found = problems()
        if found:
            return _json({"status": "not ready", "problems": found}, 503)
        policy = policies.current
        seen = cluster_report.detail(policy, cluster)  # type: ignore[arg-type]
        degraded = cluster_report.degraded(seen, controllers.problems() if controllers is not None else [])
        body = {"status": "degraded" if degraded else "ready", "generation": policy.generation,  # type: ignore
                "cluster": seen}
        if degraded:
            body["degraded"] = degraded
        if policies.last_error:
            body["lastReloadError"] = without_paths(policies.last_error)
        return _json(body)

    @detail.get("/metrics")
    def metrics_endpoint() -> Response:
        body = metrics.render() + (metrics.cluster_view_age(live.age()) if live is not None else b"")
        policy = policies.current
        if policy is not None:
            target, _ = cluster_report.target_of(policy, cluster)
            found = cluster_report.unhonoured(policy, target, cluster.reconciler())
            body += metrics.unhonoured_settings(cluster_report.SETTINGS, {u.setting for u in found})
        return Response(body, mimetype="text/plain; version=0.0.4")

    for served in (app, detail):
        @served.errorhandler(HTTPException)
        def http_error(exc: HTTPException) -> Response:
            code = exc.code or 400
            metrics.BAD_REQUESTS.labels(metrics.webhook_label(request.path), str(code)).inc()
            return _json({"error": exc.description or exc.name}, code)

    return Apps(app, detail)
