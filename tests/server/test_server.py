"""The real server process over HTTPS, with certificates from certs/, answering as the apiserver expects."""

from __future__ import annotations

import base64
import json
import socket
import ssl
import subprocess
import sys
import uuid

import pytest
from support.manifests import load_yaml, review
from support.patches import apply_patch
from support.paths import EXAMPLES, FIXTURES, POLICIES, ROOT
from support.server import SERVICE, issue_certs


def wrap(obj: dict, operation: str = "CREATE", namespace: str | None = None, **extra) -> dict:
    meta = obj.get("metadata") or {}
    req = {"uid": str(uuid.uuid4()), "kind": {"group": "batch", "version": "v1", "kind": obj.get("kind")},
           "resource": {"group": "batch", "version": "v1", "resource": "jobs"}, "operation": operation,
           "namespace": namespace or meta.get("namespace") or "default", "name": meta.get("name"),
           "userInfo": {"username": "alice"}, "object": obj, "dryRun": False, **extra}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}


def decode_patch(resp: dict) -> list:
    return json.loads(base64.b64decode(resp["patch"])) if "patch" in resp else []


def test_health_ready_metrics(server):
    c, m = server.client(), server.metrics_client()
    assert c.request("GET", "/healthz")[0] == 200
    status, body = m.request("GET", "/readyz")
    # ready, and degraded: the bundled policy's native pod-group gang (auto, assumed without a cluster view)
    # needs the reconciler this serve does not run
    ready = json.loads(body)
    assert status == 200 and ready["status"] == "degraded"
    assert [line.split(":")[0] for line in ready["degraded"]] == ["unhonoured reconciler"]
    c.post_review("/mutate", review("job-03-mutate-Job-CREATE.json"))
    status, body = m.request("GET", "/metrics")
    text = body.decode()
    assert status == 200
    assert 'trainadmit_admission_requests_total{kind="Job",operation="CREATE",result="patched",webhook="mutate"}' in text
    assert "trainadmit_admission_duration_seconds_bucket" in text
    assert "trainadmit_policy_generation_info" in text


def test_the_admission_port_tells_nothing_but_whether_it_is_ready(server):
    """Issue 33: anything that reaches the webhook port (the node network: every hostNetwork Pod) read /metrics
    (namespace names, rule counts) and /readyz's detail (the cluster, degraded settings, the last reload error).
    Now it answers the webhooks and a bare status for the kubelet's probes; the detail is the metrics listener's.
    On main /metrics answered 200 here and /readyz named its degraded setting."""
    c = server.client(keep_alive=False)
    status, body = c.request("GET", "/readyz")
    assert (status, json.loads(body)) == (200, {"status": "ready"})
    assert json.loads(c.request("GET", "/healthz")[1]) == {"status": "ok"}
    for path in ("/metrics", "/readyz/", "/debug/pprof", "/metrics/"):
        status, body = c.request("GET", path)
        assert status == 404 and b"trainadmit_" not in body and b"reconciler" not in body, (path, body[:200])
    detail = server.metrics_client(keep_alive=False)
    status, body = detail.request("GET", "/readyz")
    assert status == 200 and json.loads(body)["status"] == "degraded" and "cluster" in json.loads(body)
    assert b"trainadmit_policy_generation_info" in detail.request("GET", "/metrics")[1]
    # the metrics listener serves no webhook
    assert detail.post_review("/validate", review("job-03-mutate-Job-CREATE.json"))[0] == 404


@pytest.mark.parametrize("name", sorted(p.name for p in (FIXTURES / "admission-reviews").glob("*.json")))
def test_captured_apiserver_requests(server, name):
    captured = json.loads((FIXTURES / "admission-reviews" / name).read_text())
    path, body = captured["path"], captured["review"]
    req = body["request"]
    status, reply = server.client().post_review(path, body)
    assert status == 200
    assert reply["apiVersion"] == "admission.k8s.io/v1" and reply["kind"] == "AdmissionReview"
    resp = reply["response"]
    assert resp["uid"] == req["uid"]
    patch = decode_patch(resp)
    if req["operation"] != "CREATE" or req.get("subResource") or "/validate" in path:
        assert patch == [], "only CREATE on /mutate may patch"
    if req["operation"] in ("DELETE",) or req.get("subResource"):
        assert resp["allowed"] is True
    if name == "job-03-mutate-Job-CREATE.json":
        assert resp["allowed"] and resp["patchType"] == "JSONPatch"
        final = apply_patch(req["object"], patch)
        # the bundled policy's auto without a cluster view: a native gang in pod-group mode
        assert final["spec"]["template"]["spec"]["schedulingGroup"] == {"podGroupName": "llama-pretrain-gang"}
    if name in ("job-04-validate-Job-CREATE.json", "job-02-validate-Job-CREATE-dryrun.json"):
        # the recording webhook did not mutate, so our validating webhook sees an unmutated object
        assert resp["allowed"] is False and "final.not-mutated" in resp["status"]["message"]


def test_dry_run_gets_the_same_decision(server):
    c = server.client()
    wet = c.post_review("/mutate", review("job-03-mutate-Job-CREATE.json"))[1]["response"]
    dry = c.post_review("/mutate", review("job-01-mutate-Job-CREATE-dryrun.json"))[1]["response"]
    assert decode_patch(wet) == decode_patch(dry)


def _parity_objects():
    objs = [d for p in sorted(EXAMPLES.glob("*.yaml")) for d in load_yaml(p)]
    objs += [d for p in sorted((FIXTURES / "real-world").glob("*.y*ml")) for d in load_yaml(p)
             if d.get("kind") in ("Job", "Pod")]
    objs.append(load_yaml(FIXTURES / "admission-reviews" / "submitted-job.yaml")[0])
    return objs


def test_http_decisions_equal_trainadmit_check(server, tmp_path):
    objs = _parity_objects()
    src = tmp_path / "all.yaml"
    import yaml

    src.write_text(yaml.safe_dump_all(objs, sort_keys=False))
    out = subprocess.run([sys.executable, "-m", "trainadmit.cli", "check", str(src), "-o", "json", "-p", str(POLICIES)],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode in (0, 1), out.stderr
    records = json.loads(out.stdout)
    assert len(records) == len(objs)
    c = server.client()
    for obj, rec in zip(objs, records, strict=True):
        resp = c.post_review("/mutate", wrap(obj))[1]["response"]
        assert resp["allowed"] == rec["allowed"], rec["object"]
        if rec["allowed"]:
            assert decode_patch(resp) == rec["patch"], rec["object"]
            texts = [f"trainadmit{prefix} [{w['rule']}] {w['path']}: {w['message']}"
                     + (f" ({w['hint']})" if w["hint"] else "")
                     for prefix, said in (("", rec["warnings"]), (" note", rec["notes"])) for w in said]
            # whole: the apiserver relays warnings uncut while their total is within 4096 characters; and one
            # more from this server, which runs without --reconcile: every workload whose PodGroup comes from the
            # reconciler is told so (check cannot tell whether one runs)
            served = resp.get("warnings", [])
            ours = [w for w in served if w.startswith("trainadmit [reconciler.missing] ")]
            assert len(ours) == (1 if rec.get("companions") else 0), rec["object"]
            assert sum(map(len, texts)) <= 4096 and [w for w in served if w not in ours] == texts
        else:
            for v in rec["violations"]:
                assert f"[{v['rule']}] {v['path']}: {v['message']}" in resp["status"]["message"]


@pytest.mark.parametrize("body,status", [
    (b"not json", 400),
    (b"[]", 400),
    (json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "x"}}).encode(), 400),
    (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "Pod"}).encode(), 400),
    (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(), 400),
    (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 7}}).encode(), 400),
    (b"{" * 100000, 400),
    (b"[" * 1000, 400),  # Python's json raised RecursionError: a 500 with a traceback
    (b'{"apiVersion": NaN}', 400),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "\xed\xa0\x80"}}', 400),
])
def test_malformed_envelopes_get_a_4xx_with_a_message(server, body, status):
    code, data = server.client().request("POST", "/mutate", body)
    assert code == status
    assert json.loads(data)["error"]


@pytest.mark.parametrize("path", ["/mutate", "/validate"])
def test_deep_nesting_and_lone_surrogates_are_a_400_naming_where(server, path):
    """An object nested deeper than any Kubernetes object, or a string no encoder can write (the engine's error
    came back as a 500 inside the review): a 400 that says where, never a 5xx."""
    c = server.client()
    deep = wrap({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "deep"}, "spec": {"x": "DEEP"}})
    body = json.dumps(deep).replace('"DEEP"', "[" * 995 + "]" * 995)
    status, data = c.request("POST", path, body.encode())
    assert status == 400 and "deeper than 64 levels" in json.loads(data)["error"]
    odd = review("job-03-mutate-Job-CREATE.json")
    odd["request"]["object"]["metadata"]["name"] = "llama\ud800"  # json.dumps writes it as the escape \ud800
    status, data = c.request("POST", path, json.dumps(odd).encode())
    assert status == 400
    assert "lone UTF-16 surrogate in the string at /request/object/metadata/name" in json.loads(data)["error"]


def _series(server) -> set[str]:
    text = server.metrics_client(keep_alive=False).request("GET", "/metrics")[1].decode()
    return {line.rsplit(" ", 1)[0] for line in text.splitlines() if line and not line.startswith("#")}


def test_clients_cannot_create_metric_series(server):
    """Labels come from closed sets: random paths, kinds and operations add a handful of series, not one each
    (3,000 such requests took a server from 37 to 54,039 series and /metrics to 7 MB)."""
    import random

    rng = random.Random(11)
    c = server.client()
    c.post_review("/mutate", review("job-03-mutate-Job-CREATE.json"))
    before = _series(server)
    for i in range(150):
        word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(10))
        assert c.request("GET", f"/{word}")[0] == 404
        assert c.request("POST", f"/metrics/{word}", b"{}")[0] == 404
        obj = {"apiVersion": f"{word}/v1", "kind": word.title(), "metadata": {"name": word}}
        review_ = wrap(obj, operation=word.upper())
        review_["request"]["kind"] = {"group": word, "version": "v1", "kind": word.title()}
        assert c.post_review(["/mutate", "/validate"][i % 2], review_)[0] == 200
    added = _series(server) - before
    assert len(added) < 50, sorted(added)[:20]


def test_requests_we_can_answer_but_not_evaluate_are_denied_by_uid(server):
    c = server.client()
    no_object = wrap({"kind": "Job"})
    no_object["request"]["object"] = None
    resp = c.post_review("/mutate", no_object)[1]["response"]
    assert resp["allowed"] is False and "request.object must be an object" in resp["status"]["message"]
    bad_op = wrap({"apiVersion": "batch/v1", "kind": "Job"}, operation="PATCH")
    resp = c.post_review("/validate", bad_op)[1]["response"]
    assert resp["uid"] == bad_op["request"]["uid"] and resp["allowed"] is False


def test_objects_with_wrong_types_never_crash(server):
    c = server.client()
    weird = [
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": [], "spec": "x"},
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"labels": {"trainadmit.io/pool": 5}},
         "spec": {"parallelism": "4", "template": {"spec": {"containers": [{"resources": {"limits": []}}]}}}},
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"},
         "spec": {"parallelism": 2, "template": {"metadata": [], "spec": {"containers": [
             {"name": "a", "env": {"A": 1}, "volumeMounts": "x", "resources": {"limits": {"nvidia.com/gpu": 8}}}],
             "volumes": {"a": 1}, "tolerations": "x", "nodeSelector": [1]}}}},
        {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [None, 3, {"resources": {"limits": {"nvidia.com/gpu": "8"}},
                                                                              "securityContext": {"capabilities": {"add": "IPC_LOCK"}}}]}},
    ]
    for obj in weird:
        for path in ("/mutate", "/validate"):
            status, reply = c.post_review(path, wrap(obj, namespace="team-nlp"))
            assert status == 200, (obj, reply)
            assert reply["response"]["uid"]
    uid = c.post_review("/mutate", wrap(weird[0], namespace="team-nlp"))[1]["response"]["uid"]
    server.wait_log(lambda x: x.get("uid") == uid)  # every earlier line is written by now
    assert [x for x in server.log_lines() if x.get("event") == "engine_error"] == []
    resp = c.post_review("/mutate", wrap(weird[2], namespace="team-nlp"))[1]["response"]
    assert resp["allowed"] is False
    assert "[object.malformed] spec.template.spec.containers[0].env: must be a list, got a map" in resp["status"]["message"]


def test_wrong_name_and_unknown_ca_are_refused(server, tmp_path):
    with pytest.raises(ssl.SSLCertVerificationError):
        server.client(server_name="other.default.svc").request("GET", "/healthz")
    other = issue_certs(tmp_path / "other")
    from support.server import Client

    with pytest.raises(ssl.SSLCertVerificationError):
        Client(server.port, other / "ca.crt").request("GET", "/healthz")


def test_tls_below_1_2_is_refused(server):
    ctx = ssl.create_default_context(cafile=str(server.cert_dir / "ca.crt"))
    try:
        ctx.minimum_version = ssl.TLSVersion.TLSv1
        ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    except (ValueError, ssl.SSLError):
        pytest.skip("this OpenSSL cannot even offer TLS 1.1")
    with pytest.raises((ssl.SSLError, OSError)), \
            socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
        ctx.wrap_socket(raw, server_hostname=SERVICE)


def test_one_log_line_per_decision_without_object_contents(server):
    c = server.client()
    body = review("job-03-mutate-Job-CREATE.json")
    body["request"]["uid"] = uid = str(uuid.uuid4())
    c.post_review("/mutate", body)
    lines = server.wait_log(lambda x: x.get("event") == "decision" and x.get("uid") == uid)
    assert len(lines) == 1
    line = lines[0]
    assert {"uid", "namespace", "name", "kind", "operation", "allowed", "denied", "warned", "noted", "generation", "latency_ms"} <= set(line)
    assert "registry.local" not in json.dumps(line)  # no object contents beyond names


def test_benchmark_floors_answer_without_deciding(server):
    """/noop allows as is; /noop-patch replays the patch /mutate gave the first Job it saw, to every Job
    after it (bench/e2e.py: what the same mutation costs the apiserver with no engine)."""
    first = review("job-03-mutate-Job-CREATE.json")
    client = server.client()
    status, noop = client.post_review("/noop", first)
    assert status == 200 and noop["response"]["allowed"] and "patch" not in noop["response"]
    _, mutated = client.post_review("/mutate", first)
    _, replayed = client.post_review("/noop-patch", first)
    assert decode_patch(replayed["response"]) == decode_patch(mutated["response"]) != []
    other = json.loads(json.dumps(first))
    other["request"]["object"]["metadata"]["name"] = "another-job"
    _, again = client.post_review("/noop-patch", other)
    assert decode_patch(again["response"]) == decode_patch(mutated["response"])  # the first Job's, as is


def test_kill_pwr_writes_every_threads_stack_and_the_server_goes_on(server):
    """What a server that stops answering is doing, without a debugger: the main process's loop and each
    worker's selector loop, named by their functions, and the server still answers afterwards."""
    stacks = server.stacks()
    dumped = stacks.split("(main process first):", 1)[1]
    assert "in wait_for_signals" in dumped  # gunicorn's master loop
    assert dumped.count("in wait_for_and_dispatch_events") == len(server.worker_pids()) == 2  # each worker's loop
    assert server.client(keep_alive=False).request("GET", "/readyz")[0] == 200
