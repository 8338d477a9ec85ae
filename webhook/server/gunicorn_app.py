"""`trainadmit serve`: the app under gunicorn's threaded workers, over TLS.

The kube-apiserver keeps its connections to a webhook open, so keep-alive matters more than
anything else for the stack's floor; threads keep a slow client from holding up others.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .app import ServerConfig, cert_store, create_app


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
        "TRAINADMIT_CLUSTER_MAX_AGE": str(config.cluster_max_age),
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
