"""`trainadmit serve` with an unusable input or setting exits before it listens: one line naming the file,
flag or address, exit code 2 (the code of unreadable input and invalid policies, for certificates, cluster
snapshots, API access, worker counts and ports alike), no traceback, and never a server that starts and
cannot answer (a garbage certificate failing every handshake, ``--workers 0``). Each case runs the real
program."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import socket
import subprocess
import sys

import pytest
from support.paths import POLICIES, ROOT
from support.server import free_port

from trainadmit.certs import pki


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    root = tmp_path_factory.mktemp("startup-certs")
    pki.issue(root / "good", "trainadmit", "trainadmit-system")
    pki.issue(root / "other", "trainadmit", "trainadmit-system")
    pki.issue(root / "expired", "trainadmit", "trainadmit-system", now=pki.utcnow() - dt.timedelta(days=400),
              serving_days=30)
    (root / "garbage.crt").write_text("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n")
    return root


def serve(*args: str, env: dict | None = None, cert: str | None = None, key: str | None = None
          ) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items()
               if k not in ("TRAINADMIT_TLS_CERT", "TRAINADMIT_TLS_KEY", "KUBERNETES_SERVICE_HOST")}
    environ.update(env or {})
    tls = [*(["--tls-cert", cert] if cert else []), *(["--tls-key", key] if key else [])]
    return subprocess.run([sys.executable, "-m", "trainadmit.cli", "serve", "--host", "127.0.0.1", "--port",
                           str(free_port()), *tls, *args], capture_output=True, text=True, cwd=ROOT, env=environ,
                          timeout=60)


def refused(result: subprocess.CompletedProcess, *words: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    for word in words:
        assert word in lines[0], lines[0]


def test_no_certificate_named(pairs):
    refused(serve("-p", str(POLICIES)), "needs --tls-cert and --tls-key")


@pytest.mark.parametrize("case", ["missing", "garbage", "mismatched", "expired"])
def test_unusable_certificate_or_key(pairs, case):
    good = pairs / "good"
    cert, key, words = {
        "missing": (pairs / "none" / "tls.crt", good / "tls.key", ["does not exist", "none/tls.crt"]),
        "garbage": (pairs / "garbage.crt", good / "tls.key", ["garbage.crt", "not a PEM certificate"]),
        "mismatched": (good / "tls.crt", pairs / "other" / "tls.key", ["other/tls.key", "does not belong"]),
        "expired": (pairs / "expired" / "tls.crt", pairs / "expired" / "tls.key", ["expired/tls.crt", "expired at"]),
    }[case]
    refused(serve("-p", str(POLICIES), cert=str(cert), key=str(key)), *words)


def test_unreadable_policy_file(pairs, tmp_path):
    policy = tmp_path / "policy"
    shutil.copytree(POLICIES, policy)
    # root reads any file whatever its mode; nobody can read /proc/self/mem from offset 0 (EIO)
    (policy / "unreadable.yaml").symlink_to("/proc/self/mem")
    refused(serve("-p", str(policy), cert=str(pairs / "good" / "tls.crt"), key=str(pairs / "good" / "tls.key")),
            "unreadable.yaml", "cannot read the file")


@pytest.mark.parametrize("content", ["kind: [", "- just\n- a list\n"])
def test_bad_cluster_snapshot(pairs, tmp_path, content):
    snapshot = tmp_path / "nodes.yaml"
    snapshot.write_text(content)
    refused(serve("-p", str(POLICIES), "--cluster", str(snapshot), cert=str(pairs / "good" / "tls.crt"),
                  key=str(pairs / "good" / "tls.key")), "nodes.yaml")


def test_missing_kubeconfig(pairs, tmp_path):
    refused(serve("-p", str(POLICIES), "--cluster-live", cert=str(pairs / "good" / "tls.crt"),
                  key=str(pairs / "good" / "tls.key"), env={"KUBECONFIG": str(tmp_path / "kubeconfig")}),
            "kubeconfig", str(tmp_path / "kubeconfig"))


@pytest.mark.parametrize("flag,value", [("--workers", "0"), ("--threads", "0"), ("--port", "0"), ("--port", "65536"),
                                        ("--timeout", "-5"), ("--worker-class", "sync")])
def test_invalid_counts_and_ports_are_refused_before_start(pairs, flag, value):
    """``--workers 0`` used to listen and never answer, logging nothing."""
    good = pairs / "good"
    refused(serve("-p", str(POLICIES), flag, value, cert=str(good / "tls.crt"), key=str(good / "tls.key")),
            flag, repr(value))


def test_a_port_in_use_is_one_line(pairs):
    """gunicorn retried five times, logged ten lines and exited 1."""
    good = pairs / "good"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "trainadmit.cli", "serve", "-p", str(POLICIES), "--host",
                                 "127.0.0.1", "--port", str(port), "--tls-cert", str(good / "tls.crt"),
                                 "--tls-key", str(good / "tls.key")], capture_output=True, text=True, cwd=ROOT,
                                timeout=60)
    refused(result, f"cannot listen on 127.0.0.1:{port}", "the port is in use", "--port")


def test_a_metrics_address_in_use_or_on_the_admission_port_is_one_line(pairs):
    good = pairs / "good"
    admission = free_port()

    def run(address: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "trainadmit.cli", "serve", "-p", str(POLICIES), "--host",
                               "127.0.0.1", "--port", str(admission), "--metrics-bind-address", address,
                               "--tls-cert", str(good / "tls.crt"), "--tls-key", str(good / "tls.key")],
                              capture_output=True, text=True, cwd=ROOT, timeout=60)

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        refused(run(f"127.0.0.1:{port}"), f"cannot listen on 127.0.0.1:{port}", "the port is in use",
                "--metrics-bind-address")
    refused(run(f":{admission}"), "--metrics-bind-address or $TRAINADMIT_METRICS_BIND_ADDRESS names the admission port")
    refused(run("metrics"), "--metrics-bind-address takes host:port, :port or 0 (off), got 'metrics'")


def test_an_unknown_host_is_one_line(pairs):
    good = pairs / "good"
    result = subprocess.run([sys.executable, "-m", "trainadmit.cli", "serve", "-p", str(POLICIES), "--host",
                             "no-such-host.invalid", "--port", str(free_port()), "--tls-cert", str(good / "tls.crt"),
                             "--tls-key", str(good / "tls.key")], capture_output=True, text=True, cwd=ROOT, timeout=60)
    refused(result, "cannot listen on no-such-host.invalid:", "not an address or a known host name")
