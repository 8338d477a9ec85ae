"""`trainadmit serve`: the app under gunicorn's threaded workers, over TLS.

The kube-apiserver keeps its connections to a webhook open, so keep-alive matters more than anything else
for the stack's floor; threads keep a slow computation from holding up others, and the worker class
(``worker.DeadlineThreadWorker``) reads every request under a deadline before a thread sees it, so slow
clients cannot hold the threads either.

gunicorn's configuration is derived from the settings tree here and nowhere else; the workers are forked
from this process and find the same settings object on their ``Application`` (``app.settings``).
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

from gunicorn.app.base import BaseApplication
from gunicorn.arbiter import Arbiter
from gunicorn.glogging import Logger

from .app import cert_store, create_apps
from .controller_process import ControllerProcess
from .controller_status import ControllerStatus
from .logs import JsonFormatter, emit
from .settings import ServerSettings

WORKER_CLASSES = {
    "deadline": "trainadmit.server.worker.DeadlineThreadWorker",
    # gunicorn's own threaded worker: no read deadlines, no body budget (the baseline of the hardening
    # benchmarks, and an escape hatch should a gunicorn upgrade break the subclass)
    "gthread": "gthread",
}


class JsonLogger(Logger):
    """gunicorn's own log lines (worker boots and exits, timeouts, errors) as JSON, like every other line."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for handler in self.error_log.handlers:
            handler.setFormatter(JsonFormatter("gunicorn"))


def _ssl_context(conf, default_factory):
    """gunicorn calls this for every new connection: serve the current certificate."""
    return cert_store(conf.certfile, conf.keyfile).context()


def _child_exit(server, worker) -> None:
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def gunicorn_options(settings: ServerSettings, listener_fd: int, metrics_fd: int | None = None) -> dict[str, Any]:
    """gunicorn's configuration: the processes section, TLS, the JSON log, and the listening sockets (bound
    already, so that a port in use is found before gunicorn starts, which would retry five times and exit 1;
    gunicorn takes the descriptors over and closes them when it has its own copies). ``metrics_fd``: the metrics
    listener's (the same workers and TLS serve it; ``app.Apps.wsgi`` tells its connections apart)."""
    processes = settings.processes
    return {
        "bind": [f"fd://{listener_fd}", *([f"fd://{metrics_fd}"] if metrics_fd is not None else [])],
        "workers": processes.workers, "threads": processes.threads,
        "worker_class": WORKER_CLASSES[processes.worker_class], "timeout": processes.timeout,
        "graceful_timeout": processes.graceful_timeout, "keepalive": processes.keepalive,
        "max_requests": processes.max_requests,
        "max_requests_jitter": processes.max_requests_jitter if processes.max_requests else 0,
        "certfile": settings.tls.cert_file, "keyfile": settings.tls.key_file, "ssl_context": _ssl_context,
        "accesslog": None, "errorlog": "-", "loglevel": "warning", "logger_class": JsonLogger,
        "limit_request_line": 8190, "limit_request_field_size": 16384,
        # gunicorn 27's control socket ($HOME/.gunicorn/gunicorn.ctl, shared by every server of a user): the
        # server is managed by signals and Kubernetes, not gunicornc
        "control_socket_disable": True,
        "child_exit": _child_exit, "when_ready": _listening(settings),
    }


def _listening(settings: ServerSettings):
    """gunicorn's ``when_ready``: it listens, its workers are next."""
    def when_ready(server) -> None:
        listen = settings.listen
        emit("listening", address=f"https://{listen.address}", pid=os.getpid(),
             metrics=f"https://{listen.metrics_address}" if listen.metrics_port is not None else None,
             metrics_auth=listen.metrics_auth if listen.metrics_port is not None else None,
             workers=settings.processes.workers, threads=settings.processes.threads,
             worker_class=settings.processes.worker_class)
    return when_ready


class Application(BaseApplication):
    """The gunicorn application of one server; its workers build their app from ``settings``."""

    def __init__(self, settings: ServerSettings, options: dict[str, Any],
                 controllers: ControllerStatus | None) -> None:
        self.settings, self.options, self.controllers = settings, options, controllers
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)

    def load(self):
        return create_apps(self.settings, self.controllers).wsgi(self.settings.listen.metrics_port)


class _Arbiter(Arbiter):
    """gunicorn's master, remembering the signal that stopped it (for the shutdown line), and keeping the
    controllers' process running (``controller_process``: this process forks with no thread of its own)."""

    stopped_by: str | None = None
    controller_process: ControllerProcess | None = None

    def manage_workers(self) -> None:
        super().manage_workers()
        if self.controller_process is not None and self.stopped_by is None:
            self.controller_process.keep_running()

    def handle_term(self) -> None:
        self.stopped_by = "SIGTERM"
        super().handle_term()

    def handle_int(self) -> None:
        self.stopped_by = "SIGINT"
        super().handle_int()

    def handle_quit(self) -> None:
        self.stopped_by = "SIGQUIT"
        super().handle_quit()


def serve(settings: ServerSettings, listener: socket.socket, controllers: ControllerStatus | None = None,
          metrics_listener: socket.socket | None = None, controller_process: ControllerProcess | None = None) -> int:
    """Run gunicorn with TLS in this process until it stops; the master's exit status (its workers leave
    through here too, with theirs, by SystemExit). The apiserver only speaks HTTPS to webhooks.
    ``controller_process``: started already; kept running while gunicorn runs, stopped when it has stopped."""
    master = os.getpid()
    metrics_fd = metrics_listener.detach() if metrics_listener is not None else None
    app = Application(settings, gunicorn_options(settings, listener.detach(), metrics_fd), controllers)
    arbiter = _Arbiter(app)
    if controller_process is not None:  # a restarted one must not hold gunicorn's copies of the listeners either
        arbiter.controller_process = controller_process
        controller_process.close_in_child = lambda: [lnr.sock.fileno() for lnr in arbiter.LISTENERS]
    status = 0
    try:
        arbiter.run()
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if os.getpid() != master:
            raise
    except RuntimeError as exc:  # gunicorn's configuration refused (BaseApplication.run prints it as text)
        emit("server_error", error=str(exc))
        status = 1
    if os.getpid() == master:
        if controller_process is not None:
            controller_process.stop()
        emit("shutdown", pid=master, signal=arbiter.stopped_by, exit_status=status)
    sys.stderr.flush()
    return status
