"""Certificate rotation (serving and CA) and a policy swap while a client keeps sending requests.

The policy directory is laid out like a ConfigMap mount (files are symlinks through ``..data``,
which is swapped atomically); certificates are rotated in place by ``certs.pki.rotate`` with an
injected clock. Expected: zero failed requests, every response from exactly one generation, and
the generation switching once and for good.

The rotation's waits stand for what the product's schedule guarantees: the serving certificate moves to a
new CA only after every client has re-read a bundle that trusts it (``rotate``'s overlap, 7 days in
production; here, until each client has opened a connection with the new bundle), and the old CA leaves
the bundle only after the server serves the new certificate (``rotate``'s settle time; here, until the
served certificate is the new one).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import shutil
import threading
import time
from pathlib import Path

import yaml
from support.manifests import load_yaml
from support.paths import EXAMPLES, POLICIES
from support.server import Server, head, read_response_with_head, tls, wait_until

from trainadmit.certs import pki


def configmap_dir(root: Path, source: Path, version: str) -> None:
    """Write ``source`` as a new ConfigMap version under ``root`` and swap ..data to it."""
    target = root / f"..{version}"
    shutil.copytree(source, target)
    tmp = root / "..data_tmp"
    if tmp.is_symlink():
        tmp.unlink()
    tmp.symlink_to(target.name)
    os.replace(tmp, root / "..data")
    for f in source.iterdir():
        link = root / f.name
        if not link.is_symlink():
            link.symlink_to(Path("..data") / f.name)


def generations_in(resp: dict) -> set[str]:
    ops = json.loads(base64.b64decode(resp["patch"])) if "patch" in resp else []
    return {json.loads(op["value"])["generation"] for op in ops if op["path"].endswith("trainadmit.io~1applied")}


def test_rotation_and_policy_swap_under_load(tmp_path):
    gen2_src = tmp_path / "gen2"
    shutil.copytree(POLICIES, gen2_src)
    platform = load_yaml(gen2_src / "platform.yaml")[0]
    platform["spec"]["shm"]["sizeLimit"] = "32Gi"
    (gen2_src / "platform.yaml").write_text(yaml.safe_dump(platform))
    policy_dir = tmp_path / "policy-mount"
    policy_dir.mkdir()
    configmap_dir(policy_dir, POLICIES, "v1")

    certs = tmp_path / "tls"
    now = pki.utcnow()
    # issued long ago: the CA is now within a year of expiry, the serving certificate within 60 days
    pki.issue(certs, "trainadmit", "trainadmit-system", now=now - dt.timedelta(days=3300), serving_days=3360)
    server = Server(policy_dir, certs, workers=1)
    server.wait_ready()

    job = load_yaml(EXAMPLES / "llama-pretrain.yaml")[0]
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "operation": "CREATE", "namespace": "team-nlp", "object": job,
                        "kind": {"group": "batch", "version": "v1", "kind": "Job"}}}
    results: list[tuple[float, str, object]] = []
    stop = threading.Event()
    reconnecting: list = []  # the clients that open a connection per request, each verifying the bundle anew

    def send(keep_alive: bool) -> None:
        client = server.client(keep_alive=keep_alive)
        if not keep_alive:
            reconnecting.append(client)
        i = 0
        while not stop.is_set():
            i += 1
            body_i = json.loads(json.dumps(body))
            body_i["request"]["uid"] = f"{keep_alive}-{i}"
            try:
                status, reply = client.post_review("/mutate", body_i)
                gens = generations_in(reply["response"]) if status == 200 else set()
                ok = status == 200 and reply["response"]["uid"] == body_i["request"]["uid"] and len(gens) == 1
                results.append((time.monotonic(), "ok" if ok else f"bad {status} {gens}", gens))
            except Exception as exc:
                results.append((time.monotonic(), f"error {exc!r}", set()))
                client.close()

    threads = [threading.Thread(target=send, args=(ka,)) for ka in (True, False, False)]
    for t in threads:
        t.start()

    def load_for(requests: int) -> None:
        """Let the clients send ``requests`` more requests in the current state."""
        target = len(results) + requests
        wait_until(lambda: len(results) >= target, 20, "the clients stopped getting answers")

    def serving(serial: int) -> None:
        """Wait until new connections are served the certificate with this serial."""
        wait_until(lambda: server.served_certificate().serial_number == serial, 20,
                   "the server did not pick up the rotated certificate")

    def clients_trust(cas: int) -> None:
        """Wait until every reconnecting client's newest connection trusts a bundle of ``cas`` CAs: a request
        begun with the bundle read before (a client slowed down between reading its trust and its handshake)
        has finished. The kept-alive connection was verified once, at its handshake, and is not again."""
        wait_until(lambda: len(reconnecting) == 2 and all(c.trusted == cas for c in reconnecting), 20,
                   f"the clients did not re-read the bundle of {cas} CAs")

    try:
        load_for(20)
        first_serial = pki.CertDir(certs).serving().serial_number
        # 1. CA rotation, in three steps: the new CA joins the bundle (clients re-read it); the serving
        #    certificate moves to the new CA after the overlap; the old CA leaves the bundle
        assert pki.rotate(certs, now=now).rotated_ca
        assert len(pki.CertDir(certs).bundle()) == 2
        clients_trust(2)  # the overlap: the serving certificate moves only once every client trusts both CAs
        load_for(20)
        assert pki.rotate(certs, now=now, overlap=dt.timedelta(0)).rotated_serving
        serving(pki.CertDir(certs).serving().serial_number)
        load_for(20)
        # 2. policy swap through the ..data symlink
        configmap_dir(policy_dir, gen2_src, "v2")
        wait_until(lambda: results[-1][2] and next(iter(results[-1][2])) != next(iter(results[0][2])), 20,
                   "the new policy generation was not served")
        load_for(20)
        # the settle time: the old CA leaves once the server serves the new certificate (seen above)
        assert pki.rotate(certs, now=now, overlap=dt.timedelta(0), settle=dt.timedelta(0)).dropped_old_ca
        assert len(pki.CertDir(certs).bundle()) == 1
        load_for(20)
        # 3. the serving certificate enters its renewal window -> re-issued by the current CA
        assert pki.rotate(certs, now=now, serving_renew_before=dt.timedelta(days=400)).rotated_serving
        serving(pki.CertDir(certs).serving().serial_number)
        load_for(20)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    final_serial = pki.CertDir(certs).serving().serial_number
    assert final_serial != first_serial
    failures = [r for r in results if r[1] != "ok"]
    assert failures == [], failures[:5]
    assert len(results) > 50
    gens = [next(iter(g)) for _, _, g in sorted(results, key=lambda r: r[0])]
    first, last = gens[0], gens[-1]
    assert first != last
    switch = gens.index(last)
    assert set(gens[:switch]) == {first} and set(gens[switch:]) == {last}, "generation must switch once"
    # served certificate really changed: a client that trusts only the final bundle connects
    status, _ = server.client(keep_alive=False).request("GET", "/readyz")
    assert status == 200
    events = [x["event"] for x in server.log_lines()]
    assert events.count("policy_loaded") == 2
    # one generation series, the one served (a replaced generation used to stay, at 0, for good)
    text = server.metrics_client(keep_alive=False).request("GET", "/metrics")[1].decode()
    series = [line for line in text.splitlines() if line.startswith("trainadmit_policy_generation_info{")]
    assert series and all(f'generation="{last}"' in line and line.endswith(" 1.0") for line in series), series
    assert events.count("certificate_loaded") >= 3
    assert server.stop() == 0


def test_broken_policy_update_keeps_serving_the_old_one(tmp_path):
    policy_dir = tmp_path / "policy-mount"
    policy_dir.mkdir()
    configmap_dir(policy_dir, POLICIES, "v1")
    broken = tmp_path / "broken"
    shutil.copytree(POLICIES, broken)
    (broken / "pools.yaml").write_text((broken / "pools.yaml").read_text().replace("perNode: 8", "perNode: eight"))
    certs = tmp_path / "tls"
    pki.issue(certs, "trainadmit", "trainadmit-system")
    server = Server(policy_dir, certs, workers=1)
    server.wait_ready()
    c = server.metrics_client()
    before = json.loads(c.request("GET", "/readyz")[1])["generation"]
    configmap_dir(policy_dir, broken, "v2")
    ready = wait_until(lambda: (r := json.loads(c.request("GET", "/readyz")[1])).get("lastReloadError") and r, 20,
                       "the broken update was never reported")
    assert c.request("GET", "/readyz")[0] == 200
    assert ready["generation"] == before and "perNode" in ready["lastReloadError"]
    metrics = c.request("GET", "/metrics")[1].decode()
    assert "trainadmit_policy_reload_failures_total 1.0" in metrics
    failed = [x for x in server.log_lines() if x["event"] == "policy_reload_failed"]
    assert failed and failed[0]["keeping"] == before
    # the directory goes back to what is served: the error is no longer pending, /readyz stops reporting it
    configmap_dir(policy_dir, POLICIES, "v3")
    ready = wait_until(lambda: "lastReloadError" not in (r := json.loads(c.request("GET", "/readyz")[1])) and r, 20,
                       "/readyz kept reporting an update that is no longer pending")
    assert ready["generation"] == before
    assert server.stop() == 0


def test_not_ready_without_policy(tmp_path):
    certs = tmp_path / "tls"
    pki.issue(certs, "trainadmit", "trainadmit-system")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "platform.yaml").write_text("apiVersion: trainadmit.io/v1alpha1\nkind: Platform\nmetadata: {name: p}\n")
    server = Server(empty, certs, workers=1)
    server.wait_ready()  # a Platform alone is a valid (if empty) policy
    (empty / "platform.yaml").write_text("kind: [")
    server.wait_log(lambda x: x.get("event") == "policy_reload_failed")
    assert server.client().request("GET", "/readyz")[0] == 200  # still the last good policy
    assert server.stop() == 0


def test_graceful_shutdown_finishes_the_request_in_flight(tmp_path):
    """SIGTERM: the request in flight is answered, new connections are refused at once (the worker closes
    its listening socket; gthread kept it open, so the kernel queued connections nobody would accept and
    clients hung until they timed out), and the metrics folder goes with the server."""
    import signal
    import socket

    from support.manifests import review

    certs = tmp_path / "tls"
    pki.issue(certs, "trainadmit", "trainadmit-system")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    # a connection accepted just before shutdown (TLS done, request not sent yet) is served, not dropped: a client
    # reconnecting after a recycled worker's "Connection: close" lands there (10 s here; 1 s by default)
    server = Server(POLICIES, certs, workers=1, env_extra={"TMPDIR": str(scratch), "TRAINADMIT_SHUTDOWN_IDLE": "10"})
    server.wait_ready()
    assert len(list(scratch.glob("trainadmit-metrics-*"))) == 1
    body = json.dumps(review("job-03-mutate-Job-CREATE.json")).encode()
    request_head = head("/mutate", len(body))

    def refused() -> bool:
        try:
            socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
        except ConnectionRefusedError:
            return True
        except OSError:
            return False
        return False

    with tls(server, timeout=20) as sock, tls(server, timeout=20) as fresh:
        sock.sendall(request_head + body)  # a first request: the connection is now the worker's, kept alive
        assert read_response_with_head(sock)[1].startswith(b"HTTP/1.1 200 ")
        sock.sendall(request_head + body[:100])
        server.proc.send_signal(signal.SIGTERM)  # the request is half-received: it must still be answered
        wait_until(refused, 10, "new connections were not refused after SIGTERM")
        sock.sendall(body[100:])
        reply = read_response_with_head(sock)
        fresh.sendall(request_head + body)
        fresh_reply = read_response_with_head(fresh)
    for _, answer_head, answer_body in (reply, fresh_reply):
        assert answer_head.startswith(b"HTTP/1.1 200 "), answer_head[:200]
        assert b"Connection: close" in answer_head and b'"allowed":true' in answer_body
    assert server.proc.wait(30) == 0
    assert list(scratch.glob("trainadmit-metrics-*")) == []


def secret_dir(root: Path, source: Path, version: str) -> None:
    """``source`` as the next version of a Secret mount: ``..data`` swapped to it, then the older versions
    deleted, as the kubelet does."""
    configmap_dir(root, source, version)
    for old in root.glob("..v*"):
        if old.name != f"..{version}":
            shutil.rmtree(old)


def test_secret_mount_swap_is_served_by_running_and_new_workers(tmp_path):
    """cert-manager or the in-cluster controller renews the Secret; the kubelet swaps ``..data`` and deletes
    the old files. The running worker serves the new certificate within seconds, and so does a worker
    started after the swap (the server used to resolve the symlinks at start and keep the old files' names).
    A pair that does not load is counted and the previous certificate keeps serving; the expiry gauge
    reports what live workers serve, not a maximum over workers that have exited."""
    import signal

    versions = {}
    for name, days in (("v1", 365), ("v2", 30)):
        versions[name] = pki.issue(tmp_path / name, "trainadmit", "trainadmit-system", serving_days=days).serving()
    broken = tmp_path / "broken"
    shutil.copytree(tmp_path / "v1", broken)
    (broken / "tls.crt").write_text("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n")
    mount = tmp_path / "mount"
    mount.mkdir()
    secret_dir(mount, tmp_path / "v1", "v1")
    server = Server(POLICIES, mount, workers=1)
    server.wait_ready()

    def serving(version: str) -> bool:
        try:
            return server.served_certificate().serial_number == versions[version].serial_number
        except OSError:
            return False

    def new_worker() -> None:
        before = wait_until(server.worker_pids, message="no worker")
        server.proc.send_signal(signal.SIGHUP)  # gunicorn replaces every worker
        wait_until(lambda: (now := server.worker_pids()) and not now & before, 20, "no new worker after SIGHUP")

    try:
        assert serving("v1")
        new_worker()  # the first worker exits having served v1 (a year of validity)
        wait_until(lambda: serving("v1"), 20, "the new worker does not serve v1")
        secret_dir(mount, broken, "v2-broken")
        wait_until(lambda: (server.metric("trainadmit_certificate_reload_failures_total") or 0) >= 1 and serving("v1"),
                   20, "a broken pair was not counted, or the previous certificate stopped serving")
        secret_dir(mount, tmp_path / "v2", "v3")
        wait_until(lambda: serving("v2"), 20, "the running worker did not pick up the renewed Secret")
        expiry = server.metric("trainadmit_certificate_expiry_timestamp_seconds")
        assert expiry == versions["v2"].not_valid_after_utc.timestamp(), "expiry of v1 from the exited worker?"
        new_worker()  # started after the swap: its paths must be the mount's, not the deleted version's
        wait_until(lambda: serving("v2"), 20, "a worker started after the swap does not serve the new certificate")
        assert server.client(keep_alive=False).request("GET", "/readyz")[0] == 200
    finally:
        assert server.stop() == 0
