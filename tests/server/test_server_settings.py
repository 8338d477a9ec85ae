"""`trainadmit serve`'s settings: every flag and environment variable the deploy/ manifests, the docs and
earlier releases use still sets what it set, each value is checked with one line naming where it came from,
and gunicorn is configured from the same tree.

The tables below are written by hand from the flags and variables as they were before the settings became
one tree (cli/main.py, ServerConfig.from_env, ReadLimits.from_env) and from deploy/base/deployment.yaml.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

import pytest
import yaml
from support.paths import ROOT

from trainadmit.server.gunicorn_app import gunicorn_options
from trainadmit.server.options import declared
from trainadmit.server.settings import ServerSettings, SettingError, add_arguments, load

MiB = 1024 * 1024


def parse(*argv: str, environ: dict[str, str] | None = None) -> ServerSettings:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return load(parser.parse_args(list(argv)), environ or {})


def value(settings: ServerSettings, path: str):
    section, name = path.split(".")
    return getattr(getattr(settings, section), name)


FLAGS = [  # flag and its value -> setting and what it holds
    (["-p", "pol"], "app.policy_dir", os.path.abspath("pol")),
    (["--policy", "pol"], "app.policy_dir", os.path.abspath("pol")),
    (["--tls-cert", "c.pem"], "tls.cert_file", os.path.abspath("c.pem")),
    (["--tls-key", "k.pem"], "tls.key_file", os.path.abspath("k.pem")),
    (["--host", "127.0.0.1"], "listen.host", "127.0.0.1"),
    (["--port", "9443"], "listen.port", 9443),
    (["--workers", "3"], "processes.workers", 3),
    (["--threads", "4"], "processes.threads", 4),
    (["--timeout", "60"], "processes.timeout", 60),
    (["--graceful-timeout", "5"], "processes.graceful_timeout", 5),
    (["--read-timeout", "2.5"], "limits.read_timeout", 2.5),
    (["--max-requests", "0"], "processes.max_requests", 0),
    (["--max-requests-jitter", "10"], "processes.max_requests_jitter", 10),
    (["--worker-class", "gthread"], "processes.worker_class", "gthread"),
    (["--reload-interval", "0.5"], "app.reload_interval", 0.5),
    (["--cluster", "a.yaml", "--cluster", "b.yaml"], "app.cluster_files",
     (os.path.abspath("a.yaml"), os.path.abspath("b.yaml"))),
    (["--enable-noop"], "app.enable_noop", True),
    (["--cluster-live"], "app.cluster_live", True),
    (["--cluster-max-age", "60"], "app.cluster_max_age", 60.0),
    (["--manage-certs"], "controllers.manage_certs", True),
    (["--reconcile"], "controllers.reconcile", True),
    (["--namespace", "ops"], "controllers.namespace", "ops"),
    (["--service", "hook"], "controllers.service", "hook"),
]

VARIABLES = [  # variable and its value -> setting and what it holds
    ("TRAINADMIT_POLICY_DIR", "/policies", "app.policy_dir", "/policies"),
    ("TRAINADMIT_TLS_CERT", "/tls/tls.crt", "tls.cert_file", "/tls/tls.crt"),
    ("TRAINADMIT_TLS_KEY", "/tls/tls.key", "tls.key_file", "/tls/tls.key"),
    ("TRAINADMIT_CLUSTER_SNAPSHOT", "/s/nodes.yaml,/s/quotas.yaml", "app.cluster_files",
     ("/s/nodes.yaml", "/s/quotas.yaml")),
    ("TRAINADMIT_RELOAD_INTERVAL", "7", "app.reload_interval", 7.0),
    ("TRAINADMIT_ENABLE_NOOP", "1", "app.enable_noop", True),
    ("TRAINADMIT_ENABLE_NOOP", "0", "app.enable_noop", False),
    ("TRAINADMIT_CLUSTER_LIVE", "1", "app.cluster_live", True),
    ("TRAINADMIT_CLUSTER_MAX_AGE", "30", "app.cluster_max_age", 30.0),
    ("POD_NAMESPACE", "ops", "controllers.namespace", "ops"),
    ("TRAINADMIT_READ_TIMEOUT", "3", "limits.read_timeout", 3.0),
    ("TRAINADMIT_MAX_HEAD_BYTES", "1024", "limits.max_head_bytes", 1024),
    ("TRAINADMIT_MAX_BODY_BYTES", "2048", "limits.max_body_bytes", 2048),
    ("TRAINADMIT_MAX_BODY_BYTES_MUTATE", "1000", "limits.mutate_body_bytes", 1000),
    ("TRAINADMIT_MAX_BODY_BYTES_VALIDATE", "2000", "limits.validate_body_bytes", 2000),
    ("TRAINADMIT_MAX_BODY_BYTES_NOOP", "3000", "limits.noop_body_bytes", 3000),
    ("TRAINADMIT_SMALL_BODY_BYTES", "4000", "limits.small_body_bytes", 4000),
    ("TRAINADMIT_MAX_INFLIGHT_BODY_BYTES", str(MiB), "limits.max_inflight_body_bytes", MiB),
    ("TRAINADMIT_DECIDE_MEMORY_BYTES", str(50 * MiB), "limits.decide_memory_bytes", 50 * MiB),
    ("TRAINADMIT_CEL_KEPT_BYTES", str(MiB), "limits.cel_kept_bytes", MiB),
    ("TRAINADMIT_WAIT_TIMEOUT", "0.5", "limits.wait_timeout", 0.5),
    ("TRAINADMIT_SEND_TIMEOUT", "4", "limits.send_timeout", 4.0),
    ("TRAINADMIT_LINGER_TIMEOUT", "1", "limits.linger_timeout", 1.0),
    ("TRAINADMIT_SHUTDOWN_IDLE", "10", "limits.shutdown_idle", 10.0),
]


@pytest.mark.parametrize("argv,path,expected", FLAGS, ids=[" ".join(f[0][:1]) for f in FLAGS])
def test_every_flag_sets_its_setting(argv, path, expected):
    assert value(parse(*argv), path) == expected


@pytest.mark.parametrize("name,text,path,expected", VARIABLES, ids=[f"{v[0]}={v[1]}" for v in VARIABLES])
def test_every_variable_sets_its_setting(name, text, path, expected):
    assert value(parse(environ={name: text}), path) == expected


def test_a_flag_wins_over_its_variable_and_defaults_are_the_documented_ones():
    both = parse("--read-timeout", "4", "--namespace", "a", environ={"TRAINADMIT_READ_TIMEOUT": "9",
                                                                     "POD_NAMESPACE": "b"})
    assert (both.limits.read_timeout, both.controllers.namespace) == (4.0, "a")
    default = parse()
    assert (default.listen.host, default.listen.port, default.processes.workers, default.processes.threads) == \
        ("0.0.0.0", 8443, 2, 8)
    assert (default.limits.read_timeout, default.limits.mutate_body_bytes, default.limits.validate_body_bytes) == \
        (10.0, 4 * MiB, 8 * MiB)
    assert default.app.policy_dir == os.path.abspath("policies")
    assert default.controllers.namespace == "trainadmit-system" and default.app.enable_noop is False


def test_the_deployments_arguments_are_read_as_written():
    deployment = yaml.safe_load((ROOT / "deploy" / "base" / "deployment.yaml").read_text())
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "serve"
    settings = parse(*args[1:])
    assert (settings.app.policy_dir, settings.tls.cert_file, settings.listen.port) == \
        ("/policies", "/tls/tls.crt", 8443)
    assert settings.app.cluster_live and settings.controllers.reconcile
    assert (settings.listen.metrics_host, settings.listen.metrics_port, settings.listen.metrics_auth) == \
        ("0.0.0.0", 8444, True)
    assert parse().listen.metrics_port is None  # off unless asked for, as controller-runtime's "0"
    assert parse("--metrics-bind-address", "[::1]:9443").listen.metrics_address == "[::1]:9443"


@pytest.mark.parametrize("argv,environ,message", [
    (["--workers", "0"], {}, "--workers takes a whole number of at least 1, got '0'"),
    (["--threads", "-1"], {}, "--threads takes a whole number of at least 1, got '-1'"),
    (["--port", "0"], {}, "--port takes a whole number from 1 to 65535, got '0'"),
    (["--port", "70000"], {}, "--port takes a whole number from 1 to 65535, got '70000'"),
    (["--port", "https"], {}, "--port takes a whole number from 1 to 65535, got 'https'"),
    (["--worker-class", "sync"], {}, "--worker-class takes one of deadline, gthread, got 'sync'"),
    (["--read-timeout", "0"], {}, "--read-timeout takes a number of seconds above 0, got '0'"),
    ([], {"TRAINADMIT_READ_TIMEOUT": "soon"}, "$TRAINADMIT_READ_TIMEOUT takes a number of seconds above 0, got 'soon'"),
    ([], {"TRAINADMIT_ENABLE_NOOP": "maybe"}, "$TRAINADMIT_ENABLE_NOOP takes 1 or 0 (true or false), got 'maybe'"),
    ([], {"TRAINADMIT_MAX_BODY_BYTES_MUTATE": "4MiB"},
     "$TRAINADMIT_MAX_BODY_BYTES_MUTATE takes a whole number of at least 1, got '4MiB'"),
])
def test_a_bad_value_is_one_line_naming_its_flag_or_variable(argv, environ, message):
    with pytest.raises(SettingError) as caught:
        parse(*argv, environ=environ)
    assert str(caught.value) == message


def test_no_setting_reads_a_variable_the_kubelet_sets_for_the_service():
    """The kubelet gives each container ``<SERVICE>_SERVICE_HOST``, ``<SERVICE>_SERVICE_PORT[_<NAME>]`` and
    ``<SERVICE>_PORT[_<PORT>_<PROTO>[_PROTO|_PORT|_ADDR]]`` for the Services of its namespace (Kubernetes'
    "Discovering services" documentation): for deploy/'s Service ``trainadmit`` that includes
    ``TRAINADMIT_PORT=tcp://10.96.0.10:443``, which no setting may take for its own."""
    service = yaml.safe_load((ROOT / "deploy" / "base" / "service.yaml").read_text())["metadata"]["name"]
    prefix = service.upper().replace("-", "_")
    taken = [env for _, env, _, _ in declared(ServerSettings) if env and
             (env.startswith(f"{prefix}_SERVICE_") or env == f"{prefix}_PORT" or env.startswith(f"{prefix}_PORT_"))]
    assert taken == []
    assert parse(environ={"TRAINADMIT_PORT": "tcp://10.96.0.10:443", "TRAINADMIT_SERVICE_HOST": "10.96.0.10",
                          "TRAINADMIT_SERVICE_PORT": "443"}).listen.port == 8443


def test_every_serve_option_says_its_default_in_its_help():
    out = subprocess.run([sys.executable, "-m", "trainadmit.cli", "serve", "--help"], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "COLUMNS": "400"}, timeout=60)
    assert out.returncode == 0
    blocks: list[str] = []  # one per option: its names, then its help (on the same line or the next ones)
    for line in out.stdout.splitlines():
        if line.startswith("  -"):
            blocks.append(line)
        elif blocks and line.startswith("    "):
            blocks[-1] += "  " + line.strip()
    for flag, env, default, _ in declared(ServerSettings):
        if flag is None:
            continue
        block = next(b for b in blocks if flag in re.split(r"\s{2,}", b.strip())[0].replace(",", " ").split())
        if default is not None:
            assert "(default: " in block, block
        if env:
            assert f"${env}" in block, block


def test_gunicorn_is_configured_from_the_processes_section():
    settings = parse("--workers", "3", "--threads", "5", "--timeout", "40", "--graceful-timeout", "7",
                     "--max-requests", "0", "--max-requests-jitter", "9", "--worker-class", "gthread",
                     "--tls-cert", "c.pem", "--tls-key", "k.pem")
    options = gunicorn_options(settings, 5)
    assert options["bind"] == ["fd://5"]
    assert (options["workers"], options["threads"], options["timeout"], options["graceful_timeout"]) == (3, 5, 40, 7)
    assert options["worker_class"] == "gthread" and options["keepalive"] == 75
    assert options["max_requests"] == 0 and options["max_requests_jitter"] == 0  # no jitter without recycling
    assert (options["certfile"], options["keyfile"]) == (os.path.abspath("c.pem"), os.path.abspath("k.pem"))
