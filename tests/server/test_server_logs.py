"""The real server's log is JSON from its first line to its last: a "listening" line when it accepts
connections, a "shutdown" line when it stops, gunicorn's own lines and a library's warnings as JSON records
too. Log collectors parse each line as one JSON object; a line of text among them is lost or breaks them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import warnings

from support.manifests import load_yaml, review
from support.paths import POLICIES
from support.server import Server, issue_certs, wait_until

from trainadmit.server import logs


def every_line(server: Server) -> list[dict]:
    """Each line of the server's log as JSON (AssertionError naming the first that is not)."""
    records = []
    for line in server.log.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"not a JSON line: {line!r}") from None
    return records


def test_the_log_is_json_from_listening_to_shutdown(tmp_path):
    policy = tmp_path / "policy"
    shutil.copytree(POLICIES, policy)
    server = Server(policy, issue_certs(tmp_path / "certs"), workers=1)
    with server:
        server.wait_ready()
        [listening] = server.wait_log(lambda r: r.get("event") == "listening")
        assert listening["address"] == f"https://127.0.0.1:{server.port}" and listening["workers"] == 1
        assert listening["pid"] == server.proc.pid
        client = server.client()
        assert client.post_review("/mutate", review("job-03-mutate-Job-CREATE.json"))[0] == 200
        # a policy reload: prometheus_client warned (UserWarning, two lines of text) on each one
        platform = load_yaml(policy / "platform.yaml")[0]
        platform["spec"]["shm"]["sizeLimit"] = "32Gi"
        (policy / "platform.yaml").write_text(json.dumps(platform))
        server.wait_log(lambda r: r.get("event") == "policy_loaded" and r.get("previous"))
        # gunicorn's own line when a worker dies: "Worker (pid:N) was sent SIGKILL! Perhaps out of memory?"
        [worker] = wait_until(server.worker_pids, message="no worker")
        os.kill(worker, signal.SIGKILL)
        died = server.wait_log(lambda r: r.get("event") == "gunicorn" and str(worker) in r.get("message", ""))
        assert died[0]["level"] == "error"
        wait_until(lambda: server.worker_pids() - {worker}, 20, "no new worker")
        server.wait_ready()
        client.close()
    assert server.proc.returncode == 0
    records = every_line(server)
    assert records[-1]["event"] == "shutdown" and records[-1]["signal"] == "SIGTERM"
    assert records[-1]["exit_status"] == 0
    assert [r["event"] for r in records].count("listening") == 1
    assert "warning" not in {r["event"] for r in records}, [r for r in records if r["event"] == "warning"]


def test_a_warning_of_any_library_becomes_one_json_line(capsys):
    previous = warnings.showwarning
    try:
        logs.capture_warnings()
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("Removal of labels has not been implemented in multi-process mode yet.", UserWarning,
                          stacklevel=1)
    finally:
        warnings.showwarning = previous
    [line] = capsys.readouterr().err.splitlines()
    record = json.loads(line)
    assert record["event"] == "warning" and record["category"] == "UserWarning"
    assert record["message"].startswith("Removal of labels") and record["at"].endswith(".py:" + record["at"].split(":")[-1])
