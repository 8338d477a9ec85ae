"""`trainadmit serve`: the app under gunicorn's threaded workers, over TLS.

The kube-apiserver keeps its connections to a webhook open, so keep-alive matters more than anything else
for the stack's floor; threads keep a slow computation from holding up others, and the worker class
(``worker.DeadlineThreadWorker``) reads every request under a deadline before a thread sees it, so slow
clients cannot hold the threads either.
"""

from __future__ import annotations

import os

from .app import ServerConfig, cert_store, create_app
from .limits import MAX_REQUESTS, MAX_REQUESTS_JITTER

WORKER_CLASSES = {
    "deadline": "trainadmit.server.worker.DeadlineThreadWorker",
    # gunicorn's own threaded worker: no read deadlines, no body budget (the baseline the deadline worker is
    # measured against, and an escape hatch should a gunicorn upgrade break the subclass)
    "gthread": "gthread",
}


def _ssl_context(conf, default_factory):
    """gunicorn calls this for every new connection: serve the current certificate."""
    return cert_store(conf.certfile, conf.keyfile).context()


def serve(config: ServerConfig, bind: str = "0.0.0.0:8443", workers: int = 2, threads: int = 8,
          timeout: int = 30, graceful_timeout: int = 20, keepalive: int = 75, read_timeout: float | None = None,
          max_requests: int = MAX_REQUESTS, max_requests_jitter: int = MAX_REQUESTS_JITTER,
          worker_class: str = "deadline") -> None:
    """Run gunicorn with TLS in this process (blocks). The apiserver only speaks HTTPS to webhooks.

    Paths are made absolute but not resolved: a Secret or ConfigMap mount swaps its ``..data`` symlink on
    every update, and a path resolved at start would keep naming the old files (deleted by the kubelet soon
    after), in this process and in every worker started later.
    """
    from gunicorn.app.base import BaseApplication

    # workers build their app from the environment (after fork, so each has its own reload thread)
    os.environ.update({
        "TRAINADMIT_POLICY_DIR": os.path.abspath(config.policy_dir),
        "TRAINADMIT_TLS_CERT": os.path.abspath(config.cert_file),
        "TRAINADMIT_TLS_KEY": os.path.abspath(config.key_file),
        "TRAINADMIT_CLUSTER_SNAPSHOT": ",".join(os.path.abspath(f) for f in config.cluster_files),
        "TRAINADMIT_RELOAD_INTERVAL": str(config.reload_interval),
        "TRAINADMIT_ENABLE_NOOP": "1" if config.enable_noop else "0",
        "TRAINADMIT_CLUSTER_LIVE": "1" if config.cluster_live else "0",
        "TRAINADMIT_CLUSTER_MAX_AGE": str(config.cluster_max_age),
    })
    if read_timeout is not None:  # else the environment's, else ReadLimits' default (the workers read ReadLimits)
        os.environ["TRAINADMIT_READ_TIMEOUT"] = str(read_timeout)
    options = {
        "bind": bind, "workers": workers, "worker_class": WORKER_CLASSES[worker_class], "threads": threads,
        "timeout": timeout, "graceful_timeout": graceful_timeout, "keepalive": keepalive,
        "certfile": os.environ["TRAINADMIT_TLS_CERT"], "keyfile": os.environ["TRAINADMIT_TLS_KEY"],
        "ssl_context": _ssl_context, "accesslog": None, "errorlog": "-", "loglevel": "warning",
        "limit_request_line": 8190, "limit_request_field_size": 16384,
        "max_requests": max_requests, "max_requests_jitter": max_requests_jitter if max_requests else 0,
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
