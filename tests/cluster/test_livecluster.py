"""The live cluster view on the captured apiserver responses: pagination, watch events, 410 relist,
and answers that stay constant-cost as the node count grows."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.builders import job, rules_of
from support.fake_apiserver_lists import ListWatchServer
from support.paths import FIXTURES, POLICIES

from trainadmit.cluster.live import WATCHED, ApiError, LiveCluster
from trainadmit.engine import Request, decide

API = FIXTURES / "apiserver"


def _fixture_server(oldest_rv=0):
    nodes = json.loads((API / "nodes-list.json").read_text())
    quotas = json.loads((API / "resourcequotas-list-with-usage.json").read_text())
    events = [json.loads(line) for line in (API / "nodes-watch-stream.jsonl").read_text().splitlines() if line]
    return ListWatchServer({"nodes": nodes["items"], "resourcequotas": quotas["items"]}, {"nodes": events},
                           nodes["metadata"]["resourceVersion"], oldest_rv)


def test_paginated_list_then_watch_events(policy):
    server = _fixture_server()
    try:
        view = LiveCluster(server.core(), page_size=2, log=lambda m: None)
        rv = view.list_all("nodes")
        assert [c.split(":")[1] for c in server.calls[:3]] == ["list", "list", "list"]  # 5 nodes, pages of 2
        for w in WATCHED:
            if w.required and w.name != "nodes":
                view.list_all(w.name)
        assert not view.synced.is_set()  # served API groups not discovered yet
        view.discover()
        assert rv == "220" and view.synced.is_set()
        pool = policy.pools["h100-ib"]
        rack = pool.topology.level("rack")
        assert view.pool_nodes(pool) == 4 and view.largest_domain(pool, rack) == 2
        assert view.gpu_quota("team-nlp", "nvidia.com/gpu") == (64, 48)
        last = view.watch("nodes", rv, threading.Event())
        # MODIFIED h100-r2-n2 (relabelled), DELETED cpu-n1, ADDED h100-r3-n1, then a BOOKMARK
        assert last == "224"
        assert "cpu-n1" not in view._nodes and "h100-r3-n1" in view._nodes
        # the pool now: h100-r1-n1, h100-r1-n2, h100-r2-n1, h100-r2-n2 (relabelled, still the pool's labels)
        # and h100-r3-n1; racks of 2, 2 and 1
        assert view.pool_nodes(pool) == 5 and view.largest_domain(pool, rack) == 2
        # the engine uses it: 3 workers do not fit the largest rack
        d = decide(policy, Request(job(workers=3)), view)
        assert "topology.domain-fit" in rules_of(d)
        assert "has 16 of 64 free (ResourceQuota)" in " ".join(v.message for v in d.violations)
    finally:
        server.close()


def test_expired_watch_relists(policy):
    server = _fixture_server(oldest_rv=10_000)  # every watch is too old: 410 -> relist
    stop = threading.Event()
    try:
        view = LiveCluster(server.core(), page_size=100, log=lambda m: None)
        threading.Thread(target=view.run, args=("nodes", stop), daemon=True).start()
        lists = lambda: sum(1 for c in server.calls if c.startswith("nodes:list"))  # noqa: E731
        deadline = time.monotonic() + 10
        # the loop counts a relist before it lists again: wait for both, or a loaded machine sees the count first
        while (view.relists < 2 or lists() < 3) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert view.relists >= 2
        assert lists() >= 3
    finally:
        stop.set()
        server.close()


def test_an_error_answer_carries_the_apiservers_message():
    """The real client raises on a non-2xx answer; the error (and the log line) has the Status message."""
    server = _fixture_server(oldest_rv=10_000)
    try:
        view = LiveCluster(server.core(), log=lambda m: None)
        with pytest.raises(ApiError) as caught:
            view.watch("nodes", "1", threading.Event())
        assert caught.value.status == 410
        assert caught.value.reason == "The resourceVersion for the provided watch is too old."
    finally:
        server.close()


def _node(name, pool, rack):
    return {"metadata": {"name": name, "labels": {"trainadmit.io/pool": pool,
                                                  "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                                                  "topology.kubernetes.io/rack": rack}}}


@settings(max_examples=60, deadline=None)
@given(events=st.lists(st.tuples(st.sampled_from(["put", "delete"]), st.integers(0, 30),
                                 st.sampled_from(["h100-ib", "other"]), st.sampled_from(["r1", "r2", "r3"])),
                       max_size=80))
def test_incremental_indices_equal_a_fresh_count(events):
    """Whatever the event order, the counters kept in place equal a count from scratch."""
    from trainadmit.engine import load_policy

    policy = load_policy(POLICIES)
    pool, rack = policy.pools["h100-ib"], policy.pools["h100-ib"].topology.level("rack")
    view = LiveCluster(core=None, log=lambda m: None)
    view.synced.set()
    view.pool_nodes(pool), view.largest_domain(pool, rack)  # indices exist before the events
    current: dict[str, dict] = {}
    for op, i, pool_name, rack_name in events:
        node = _node(f"n{i}", pool_name, rack_name)
        if op == "put":
            view.put_node(node)
            current[f"n{i}"] = node
        else:
            view.delete_node(node)
            current.pop(f"n{i}", None)
        # the oracle: count from scratch, independently of the index code
        members = [n["metadata"]["labels"] for n in current.values()
                   if all(n["metadata"]["labels"].get(k) == v for k, v in pool.nodeSelector.items())]
        racks = Counter(labels["topology.kubernetes.io/rack"] for labels in members)
        assert view.pool_nodes(pool) == len(members)
        assert view.largest_domain(pool, rack) == max(racks.values(), default=0)


def test_server_with_the_live_view(tmp_path):
    """`serve --cluster-live` against the fake apiserver: ready once synced; decisions use the view; once the
    apiserver is gone the view turns stale past --cluster-max-age: /readyz fails, the age metric shows it,
    and decisions ignore the view (rule cluster.view-stale)."""
    import yaml
    from support.server import Server, issue_certs, wait_until

    api = _fixture_server()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{api.port}"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}))
    server = Server(POLICIES, issue_certs(tmp_path / "certs"), workers=1, extra=["--cluster-live", "--cluster-max-age", "2"],
                    env_extra={"KUBECONFIG": str(kubeconfig)})
    try:
        server.wait_ready()
        client, detail = server.client(), server.metrics_client()
        body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": {"uid": "u1", "operation": "CREATE", "namespace": "team-nlp", "object": job(workers=3)}}
        status, reply = client.post_review("/mutate", body)
        assert status == 200 and reply["response"]["allowed"] is False
        assert "(in the cluster)" in reply["response"]["status"]["message"]
        assert "has 16 of 64 free (ResourceQuota)" in reply["response"]["status"]["message"]
        assert 0 <= _view_age(detail) < 2
        api.close()
        wait_until(lambda: client.request("GET", "/readyz")[0] == 503, 30, "/readyz must fail once the view is stale")
        problems = json.loads(detail.request("GET", "/readyz")[1])["problems"]
        assert any("over the limit of 2s" in p for p in problems), problems
        assert _view_age(detail) > 2
        status, reply = client.post_review("/mutate", body)
        message = reply["response"]["status"]["message"]
        assert "[cluster.view-stale]" in message and "(in the cluster)" not in message  # policy figures instead
    finally:
        server.stop()
        api.close()


def _view_age(client) -> float:
    text = client.request("GET", "/metrics")[1].decode()
    [line] = [x for x in text.splitlines() if x.startswith("trainadmit_cluster_view_age_seconds ")]
    return float(line.split()[1])
