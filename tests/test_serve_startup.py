"""`trainadmit serve` with an unusable input exits before it listens: one line naming the file, exit code 2
(DESIGN §6: unreadable input or an invalid policy; the same for certificates, cluster snapshots and API
access), no traceback (issue 11, rows 6 and 9: tracebacks, exit 1 or 3, or a server whose every handshake
failed). Each case runs the real program."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
import sys

import pytest
from conftest import POLICIES, ROOT
from server_util import free_port

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
