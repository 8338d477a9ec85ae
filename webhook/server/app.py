"""The admission web app: POST /mutate and /validate, /healthz, /readyz, /metrics.

A Flask app (``create_app``) that ``gunicorn.serve`` runs over TLS. Every response is computed from
exactly one policy generation (the reference is read once per request).
"""

from __future__ import annotations

import json
import os
import threading
import time
import traceback
from dataclasses import dataclass, field

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from ..cluster.snapshot import SnapshotCluster
from ..engine import Request, decide
from ..engine.clusterview import ClusterView, NoCluster
from . import metrics
from .admission import BadReview, decision_response, parse_review, response
from .cost import Busy, MemoryBudget, TooCostly, estimate
from .limits import ReadLimits
from .runtime import CertStore, PolicyStore, emit

JSON = "application/json"


@dataclass
class ServerConfig:
    policy_dir: str = "policies"
    cert_file: str | None = None
    key_file: str | None = None
    cluster_files: list[str] = field(default_factory=list)
    reload_interval: float = 2.0
    # no-op admission endpoints, the stack's own floors for benchmarks: /noop answers allowed; /noop-patch
    # answers with the patch trainadmit gave the first object of that kind, without deciding
    enable_noop: bool = False
    cluster_live: bool = False  # watch Nodes, ResourceQuotas and referenced kinds through the Kubernetes API
    cluster_max_age: float = 180.0  # a live view older than this is stale: /readyz fails, decisions ignore it

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
            cluster_max_age=float(env.get("TRAINADMIT_CLUSTER_MAX_AGE", "180")),
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


def _json(body: dict, status: int = 200) -> Response:
    return Response(json.dumps(body, separators=(",", ":")), status=status, mimetype=JSON)


def create_app(config: ServerConfig | None = None) -> Flask:
    config = config or ServerConfig.from_env()
    app = Flask("trainadmit")
    limits = ReadLimits.from_env()  # the same limits the server's worker enforces before the app sees a request
    app.config["MAX_CONTENT_LENGTH"] = limits.largest_body
    memory = MemoryBudget(limits.decide_memory_bytes, limits.wait_timeout)
    policies = PolicyStore(config.policy_dir)
    policies.poll()
    cluster: ClusterView = SnapshotCluster.from_files(config.cluster_files) if config.cluster_files else NoCluster()
    live = None
    if config.cluster_live:
        from kubernetes import client

        from ..cluster.kube import load_config
        from ..cluster.live import LiveCluster

        load_config()
        live = LiveCluster(client.CoreV1Api(), log=lambda message: emit("cluster_view", message=message),
                           max_age=config.cluster_max_age, watch_timeout=live_watch_timeout(config.cluster_max_age))
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

    replayed: dict[str, list | None] = {}  # /noop-patch: the patch of the first object of each kind

    def refuse(webhook: str, status: int, message: str) -> Response:
        metrics.BAD_REQUESTS.labels(webhook, str(status)).inc()
        emit("bad_request", webhook=webhook, code=status, error=message)
        return _json({"error": message}, status)

    def admit(webhook: str) -> Response:
        started = time.perf_counter()
        body = request.get_data(cache=False)
        limit = limits.body_limit(request.path)
        if len(body) > limit:
            return refuse(webhook, 413, f"request body is {len(body)} bytes; the limit is {limit}")
        try:
            with memory.hold(estimate(body)):  # parsed and decided within this process's memory budget
                return answer(webhook, body, started)
        except TooCostly as exc:
            return refuse(webhook, 413, str(exc))
        except Busy as exc:
            return refuse(webhook, 503, str(exc))

    def answer(webhook: str, body: bytes, started: float) -> Response:
        try:
            review = parse_review(body)
        except BadReview as exc:
            return refuse(webhook, exc.status, exc.message)
        decisions = policies.decisions  # one generation for this whole response
        policy = decisions.policy if decisions is not None else None
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
        elif webhook == "noop-patch":  # the floor of a mutating webhook: no decision, the first patch replayed
            if kind not in replayed:
                replayed[kind] = decide(policy, Request(review.obj, namespace=review.namespace)).patch or None
            result = response(review.uid, True, patch=replayed[kind])
        else:
            req = Request(review.obj, operation=review.operation, old=review.old, namespace=review.namespace,
                          user=review.user, dry_run=review.dry_run, phase=webhook)
            try:
                # a large object is decided from scratch: keying it would double its cost, for a shape that
                # rarely repeats (decisions is not None here: it holds the policy)
                decision = decide(policy, req, cluster) if limits.is_large(len(body)) else \
                    decisions.decide(req, cluster)  # type: ignore[union-attr]
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
        labels = (webhook, metrics.kind_label(kind), metrics.operation_label(review.operation), outcome)
        metrics.REQUESTS.labels(*labels).inc()
        metrics.LATENCY.labels(*labels).observe(elapsed)
        if not webhook.startswith("noop"):
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

        @app.post("/noop-patch")
        def noop_patch() -> Response:
            return admit("noop-patch")

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
        problems.extend(cluster_view_problems(live))
        if problems:
            return _json({"status": "not ready", "problems": problems}, 503)
        body = {"status": "ready", "generation": policies.current.generation}  # type: ignore[union-attr]
        if policies.last_error:
            body["lastReloadError"] = policies.last_error
        return _json(body)

    @app.get("/metrics")
    def metrics_endpoint() -> Response:
        body = metrics.render() + (metrics.cluster_view_age(live.age()) if live is not None else b"")
        return Response(body, mimetype="text/plain; version=0.0.4")

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        code = exc.code or 400
        metrics.BAD_REQUESTS.labels(metrics.webhook_label(request.path), str(code)).inc()
        return _json({"error": exc.description or exc.name}, code)

    return app
