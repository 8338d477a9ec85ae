"""`trainadmit serve`: the HTTPS admission webhook the kube-apiserver calls.

A Flask app (``create_app``) served by gunicorn's threaded workers over TLS. The kube-apiserver
keeps its connections to a webhook open, so keep-alive matters more than anything else for the
stack's floor; threads keep a slow client from holding up others. Every response is computed
from exactly one policy generation (the reference is read once per request).
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from . import metrics
from .admission import MAX_BODY_BYTES, BadReview, decision_response, parse_review, response
from .cluster import ClusterView, NoCluster, SnapshotCluster
from .engine import Request, decide
from .runtime import CertStore, PolicyStore, emit

JSON = "application/json"


@dataclass
class ServerConfig:
    policy_dir: str = "policies"
    cert_file: str | None = None
    key_file: str | None = None
    cluster_files: list[str] = field(default_factory=list)
    reload_interval: float = 2.0
    enable_noop: bool = False  # a no-op admission endpoint: the stack's own floor, for benchmarks
    cluster_live: bool = False  # watch Nodes and ResourceQuotas through the Kubernetes API

    @classmethod
    def from_env(cls) -> ServerConfig:
        env = os.environ
        return cls(
            policy_dir=env.get("TRAINADMIT_POLICY_DIR", "policies"),
            cert_file=env.get("TRAINADMIT_TLS_CERT"), key_file=env.get("TRAINADMIT_TLS_KEY"),
            cluster_files=[f for f in env.get("TRAINADMIT_CLUSTER_SNAPSHOT", "").split(",") if f],
            reload_interval=float(env.get("TRAINADMIT_RELOAD_INTERVAL", "2")),
            enable_noop=env.get("TRAINADMIT_ENABLE_NOOP") == "1",
            cluster_live=env.get("TRAINADMIT_CLUSTER_LIVE") == "1",
        )


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


def _json(body: dict, status: int = 200) -> Response:
    return Response(json.dumps(body, separators=(",", ":")), status=status, mimetype=JSON)


def create_app(config: ServerConfig | None = None) -> Flask:
    config = config or ServerConfig.from_env()
    app = Flask("trainadmit")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    policies = PolicyStore(config.policy_dir)
    policies.poll()
    cluster: ClusterView = SnapshotCluster.from_files(config.cluster_files) if config.cluster_files else NoCluster()
    live = None
    if config.cluster_live:
        from kubernetes import client

        from .kube import load_config
        from .livecluster import LiveCluster

        load_config()
        live = LiveCluster(client.CoreV1Api(), log=lambda message: emit("cluster_view", message=message))
        live.start(threading.Event())
        cluster = live
    certs = cert_store(config.cert_file, config.key_file) if config.cert_file and config.key_file else None

    def reload_loop() -> None:
        while True:
            time.sleep(config.reload_interval)
            try:
                policies.poll()
            except Exception as exc:
                emit("policy_reload_error", error=repr(exc))

    threading.Thread(target=reload_loop, name="policy-reload", daemon=True).start()
    app.extensions["trainadmit"] = {"policies": policies, "certs": certs, "config": config}

    def admit(webhook: str) -> Response:
        started = time.perf_counter()
        try:
            body = request.get_data(cache=False)
            review = parse_review(body)
        except BadReview as exc:
            metrics.BAD_REQUESTS.labels(webhook, str(exc.status)).inc()
            emit("bad_request", webhook=webhook, code=exc.status, error=exc.message)
            return _json({"error": exc.message}, exc.status)
        policy = policies.current  # one generation for this whole response
        kind = str(review.kind.get("kind") or "")
        decision = None
        rules: list[str] = []
        if policy is None:
            result = response(review.uid, False, code=503, reason="ServiceUnavailable",
                              message="trainadmit has no policy loaded; refusing to admit without policy")
        elif review.problem:
            result = response(review.uid, False, code=400, reason="BadRequest", message=review.problem)
        elif webhook == "noop" or review.sub_resource or review.operation in ("DELETE", "CONNECT"):
            result = response(review.uid, True)
        else:
            req = Request(review.obj, operation=review.operation, old=review.old, namespace=review.namespace,
                          user=review.user, dry_run=review.dry_run, phase=webhook)
            try:
                decision = decide(policy, req, cluster)
            except Exception as exc:
                frame = traceback.extract_tb(exc.__traceback__)[-1]
                emit("engine_error", uid=review.uid, webhook=webhook, error=repr(exc),
                     at=f"{frame.filename.rsplit('/', 2)[-1]}:{frame.lineno}")
                result = response(review.uid, False, code=500, reason="InternalError",
                                  message=f"trainadmit could not evaluate this object ({type(exc).__name__}: {exc}); "
                                          "please report it with the object")
            else:
                result = decision_response(review.uid, decision, with_patch=webhook == "mutate")
                rules = [v.rule for v in decision.violations]
                for v in decision.denials:
                    metrics.DENIALS.labels(v.rule).inc()
                for v in decision.warnings:
                    metrics.WARNINGS.labels(v.rule).inc()
        allowed = result["response"]["allowed"]
        outcome = "denied" if not allowed else ("patched" if result["response"].get("patch") else "allowed")
        elapsed = time.perf_counter() - started
        metrics.REQUESTS.labels(webhook, kind, review.operation, outcome).inc()
        metrics.LATENCY.labels(webhook, kind, review.operation, outcome).observe(elapsed)
        if webhook != "noop":
            obj_meta = review.obj.get("metadata") if isinstance(review.obj, dict) else None
            name = review.name or (obj_meta.get("generateName") if isinstance(obj_meta, dict) else None)
            emit("decision", uid=review.uid, webhook=webhook, kind=kind, operation=review.operation,
                 namespace=review.namespace, name=name, dry_run=review.dry_run, allowed=allowed, result=outcome,
                 rules=rules, generation=policy.generation if policy else None,
                 latency_ms=round(elapsed * 1000, 3))
        return _json(result)

    @app.post("/mutate")
    def mutate() -> Response:
        return admit("mutate")

    @app.post("/validate")
    def validate() -> Response:
        return admit("validate")

    if config.enable_noop:
        @app.post("/noop")
        def noop() -> Response:
            return admit("noop")

    @app.get("/healthz")
    def healthz() -> Response:
        return _json({"status": "ok"})

    @app.get("/readyz")
    def readyz() -> Response:
        problems = []
        if policies.current is None:
            problems.append(f"no policy loaded ({policies.last_error or 'not loaded yet'})")
        if certs is not None and not certs.valid():
            problems.append("serving certificate missing, unreadable or expired")
        if live is not None and not live.synced.is_set():
            problems.append("cluster view not synced yet (listing nodes and resource quotas)")
        if problems:
            return _json({"status": "not ready", "problems": problems}, 503)
        body = {"status": "ready", "generation": policies.current.generation}  # type: ignore[union-attr]
        if policies.last_error:
            body["lastReloadError"] = policies.last_error
        return _json(body)

    @app.get("/metrics")
    def metrics_endpoint() -> Response:
        return Response(metrics.render(), mimetype="text/plain; version=0.0.4")

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        code = exc.code or 400
        metrics.BAD_REQUESTS.labels(request.path, str(code)).inc()
        return _json({"error": exc.description or exc.name}, code)

    return app


# ---- gunicorn --------------------------------------------------------------------------------


def _ssl_context(conf, default_factory):
    """gunicorn calls this for every new connection: serve the current certificate."""
    return cert_store(conf.certfile, conf.keyfile).context()


def serve(config: ServerConfig, bind: str = "0.0.0.0:8443", workers: int = 2, threads: int = 8,
          timeout: int = 30, graceful_timeout: int = 20, keepalive: int = 75) -> None:
    """Run gunicorn with TLS in this process (blocks). The apiserver only speaks HTTPS to webhooks."""
    from gunicorn.app.base import BaseApplication

    if not (config.cert_file and config.key_file):
        raise SystemExit("trainadmit serve needs --tls-cert and --tls-key (HTTPS only)")
    if "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="trainadmit-metrics-")
    # workers build their app from the environment (after fork, so each has its own reload thread)
    os.environ.update({
        "TRAINADMIT_POLICY_DIR": str(Path(config.policy_dir).resolve()),
        "TRAINADMIT_TLS_CERT": str(Path(config.cert_file).resolve()),
        "TRAINADMIT_TLS_KEY": str(Path(config.key_file).resolve()),
        "TRAINADMIT_CLUSTER_SNAPSHOT": ",".join(str(Path(f).resolve()) for f in config.cluster_files),
        "TRAINADMIT_RELOAD_INTERVAL": str(config.reload_interval),
        "TRAINADMIT_ENABLE_NOOP": "1" if config.enable_noop else "0",
        "TRAINADMIT_CLUSTER_LIVE": "1" if config.cluster_live else "0",
    })
    options = {
        "bind": bind, "workers": workers, "worker_class": "gthread", "threads": threads,
        "timeout": timeout, "graceful_timeout": graceful_timeout, "keepalive": keepalive,
        "certfile": os.environ["TRAINADMIT_TLS_CERT"], "keyfile": os.environ["TRAINADMIT_TLS_KEY"],
        "ssl_context": _ssl_context, "accesslog": None, "errorlog": "-", "loglevel": "warning",
        "limit_request_line": 8190, "limit_request_field_size": 16384,
        "child_exit": _child_exit,
    }

    class Application(BaseApplication):
        def load_config(self) -> None:
            for key, value in options.items():
                self.cfg.set(key, value)

        def load(self):
            return create_app(ServerConfig.from_env())

    Application().run()


def _child_exit(server, worker) -> None:
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)
