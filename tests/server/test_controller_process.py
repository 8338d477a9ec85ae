"""The controllers' process (``server.controller_process``) of a real server: restarted when it dies, gone when
the main process is, and never one of the processes that serve."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from support.paths import POLICIES
from support.server import Server, alive, issue_certs, wait_until


def test_it_is_started_again_when_it_dies_and_ends_with_the_main_process(tmp_path):
    server = Server(POLICIES, issue_certs(tmp_path / "certs"), workers=1)
    with server:
        server.wait_ready()
        first = wait_until(server.controllers_pid, message="no controllers' process")
        # it holds no copy of the listeners: only the workers serve them (and none keeps the port after a stop)
        ports = {server.port, server.metrics_port}
        [worker] = server.worker_pids()
        assert _listening_ports(worker) >= ports  # what serving looks like, seen the same way
        assert not _listening_ports(first) & ports
        os.kill(first, signal.SIGKILL)
        second = wait_until(lambda: (pid := server.controllers_pid()) not in (None, first) and pid, 10,
                            "the controllers' process was not started again")
        [line] = server.wait_log(lambda r: r.get("event") == "controllers_restarted")
        assert line["previous_pid"] == first and line["pid"] == second
        assert not _listening_ports(second) & ports
        server.wait_ready()
        os.kill(server.proc.pid, signal.SIGKILL)  # the main process killed outright: no shutdown of its own
        wait_until(lambda: not alive(second), 10, "the controllers' process outlived the main process")


def _listening_ports(pid: int) -> set[int]:
    """The TCP ports ``pid`` holds a listening socket of (its descriptors' inodes in /proc/net/tcp)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports
