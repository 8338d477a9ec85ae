"""The cluster-facing parts of trainadmit against a real kube-apiserver: the live view (paginated
list, watch, bookmarks, 410 after compaction, staleness and read timeouts), the PodGroup reconciler
with two Lease-elected replicas, and deploy/'s RBAC evaluated by the real authorizer."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from support.builders import job
from support.controlplane import ControlPlane, KubeError, wait_until
from support.kube_fixtures import APISERVER, SYSTEM_NS, delete_budget_quotas, gpu_node
from support.tcp_proxy import TcpProxy

from trainadmit.cluster.live import LiveCluster
from trainadmit.engine import Request, decide, load_policy

pytestmark = APISERVER
SA = f"system:serviceaccount:{SYSTEM_NS}:trainadmit"


def _core(api_client):
    from kubernetes import client

    return client.CoreV1Api(api_client)


def _policy():
    from support.paths import POLICIES

    return load_policy(POLICIES)


def _sa_client(cp: ControlPlane, tmp_path):
    from kubernetes import config

    return config.new_client_from_config(
        config_file=str(cp.service_account_kubeconfig(tmp_path / "sa-kubeconfig", SYSTEM_NS, "trainadmit")))


# ---- the live view ------------------------------------------------------------------------------

def test_live_view_pages_watches_and_bookmarks_as_the_service_account(control_plane, cluster, tmp_path):
    policy = _policy()
    view = LiveCluster(_core(_sa_client(control_plane, tmp_path)), page_size=7, log=lambda m: None, watch_timeout=3)
    stop = threading.Event()
    view.start(stop)
    http = cluster.http
    try:
        assert view.synced.wait(30), "every kind listed and discovered with deploy/'s RBAC"
        h100 = policy.pools["h100-ib"]
        assert view.pool_nodes(h100) == 64 and view.largest_domain(h100, h100.topology.level("rack")) == 16
        assert view.serves("scheduling.x-k8s.io/v1alpha1") and not view.serves("scheduling.k8s.io/v1beta1")
        tolerations = tuple(h100.toleration_dicts)
        before = view.capacity(h100, h100.topology.level("rack"), tolerations)
        assert (before.usable, before.eventually, before.total) == (16, 16, 16)
        # a kubelet reports a rack-5 node; an administrator cordons a rack-1 node; a node is removed
        new = http.create(gpu_node("h100-r5-n01", "h100-ib", "NVIDIA-H100-80GB-HBM3", 8, "rack-5", "zone-a"))
        http.patch({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "h100-r1-n01"}},
                   {"spec": {"unschedulable": True}})
        wait_until(lambda: view.pool_nodes(h100) == 65, timeout=20, what="the ADDED node")
        wait_until(lambda: view.capacity(h100, None, tolerations).eventually == 65
                   and view.capacity(h100, None, tolerations).usable == 64, timeout=20, what="the cordon")
        http.delete(new)
        wait_until(lambda: view.pool_nodes(h100) == 64, timeout=20, what="the DELETED node")
        probe = http.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                             "metadata": {"name": "bookmark-probe", "namespace": "kube-public"},
                             "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
        # the watch cache bookmarks a watcher of a kind that changed, shortly before the watch's timeout
        wait_until(lambda: view.bookmarks >= 1, timeout=30, what="a BOOKMARK before a watch's timeout")
        http.delete(probe)
        assert view.relists == 0 and view.stale() is None
    finally:
        stop.set()
        http.patch({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "h100-r1-n01"}},
                   {"spec": {"unschedulable": None}})


def test_a_watch_from_a_compacted_resource_version_relists(control_plane, cluster):
    """The suite's apiserver serves node watches from etcd; once etcd is compacted past the resourceVersion a
    node watch resumes from, that watch gets 410 Gone, and the view's loop relists."""
    http = cluster.http
    view = LiveCluster(_core(control_plane.api_client()), log=lambda m: None, watch_timeout=1)
    stop = threading.Event()
    threading.Thread(target=view.run, args=("nodes", stop), daemon=True).start()
    try:
        wait_until(lambda: "nodes" in view._fresh, timeout=20, what="the first list")
        for i in range(3):  # revisions elsewhere: no node changes, so the watch's resourceVersion falls behind
            http.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "churn", "namespace": "default"},
                        "data": {"i": str(i)}})
        control_plane.compact_etcd()
        wait_until(lambda: view.relists >= 1, timeout=30, what="a relist after 410 Gone")
        # the loop counts the relist before it lists (which refills the nodes one by one): wait for the whole list
        wait_until(lambda: len(view._nodes) == len(cluster.nodes), timeout=30,
                   what="the relist bringing every node back")
    finally:
        stop.set()


def _client_via(cp: ControlPlane, port: int):
    api = cp.api_client()
    api.configuration.host = f"https://127.0.0.1:{port}"
    api.rest_client.pool_manager.clear()
    return api


def test_a_view_whose_apiserver_goes_away_turns_stale_and_decisions_ignore_it(control_plane, cluster):
    proxy = TcpProxy(control_plane.port)
    view = LiveCluster(_core(_client_via(control_plane, proxy.port)), log=lambda m: None, watch_timeout=1,
                       max_age=2.0)
    stop = threading.Event()
    view.start(stop)
    policy = _policy()
    try:
        assert view.synced.wait(30)
        assert view.stale() is None
        proxy.cut()
        reason = wait_until(view.stale, timeout=30, what="the view to turn stale")
        assert "over the limit of 2s" in reason
        d = decide(policy, Request(job(workers=2)), view)
        stale = [v for v in d.violations if v.rule == "cluster.view-stale"]
        assert stale and not d.allowed and "decided without the cluster view" in stale[0].message
        assert d.unverified, "ignored: what the view would have checked is unverified"
    finally:
        stop.set()


def test_a_stalled_watch_hits_its_read_timeout(control_plane, cluster):
    proxy = TcpProxy(control_plane.port)
    view = LiveCluster(_core(_client_via(control_plane, proxy.port)), log=lambda m: None, watch_timeout=60,
                       read_timeout=0.5)
    rv = view.list_all("nodes")
    failure: list[BaseException] = []

    def watch() -> None:
        try:
            view.watch("nodes", rv, threading.Event())
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=watch, daemon=True)
    view._fresh.clear()
    thread.start()
    wait_until(lambda: "nodes" in view._fresh, timeout=10, what="the watch to open")
    proxy.stalled.set()  # the connection stays open and nothing arrives: no event, no bookmark, no close
    thread.join(10)
    assert not thread.is_alive() and failure and "timed out" in repr(failure[0]).lower(), failure
    proxy.cut()


# ---- the reconciler, and two replicas' Lease ----------------------------------------------------

def test_only_the_lease_holder_reconciles_and_a_stale_lease_is_taken_over(webhook, cluster, tmp_path):
    from kubernetes import client

    from trainadmit.cluster.lease import RECONCILER_LEASE, LeaderLease
    from trainadmit.cluster.reconciler import PodGroupReconciler

    http = cluster.http
    policy = webhook.use("coscheduling")
    stored = http.create(job(name="elected", namespace="team-nlp", workers=2))
    api = _sa_client(cluster.cp, tmp_path)
    now = [dt.datetime.now(dt.UTC)]

    def replica(name: str) -> PodGroupReconciler:
        lease = LeaderLease(client.CoordinationV1Api(api), SYSTEM_NS, RECONCILER_LEASE, name, duration_seconds=15,
                            clock=lambda: now[0], log=lambda m: None)
        return PodGroupReconciler(client.CustomObjectsApi(api), lease, key=policy.keys.podgroup, log=lambda m: None,
                                  kinds=[("batch", "v1", "jobs")])

    a, b = replica("pod-a"), replica("pod-b")
    try:
        assert "team-nlp/elected: created" in a.step()
        assert b.step() == []  # not the holder
        pg = http.get("scheduling.x-k8s.io/v1alpha1", "PodGroup", "elected", "team-nlp")
        assert pg["metadata"]["ownerReferences"][0]["uid"] == stored["metadata"]["uid"]
        now[0] += dt.timedelta(seconds=16)  # pod-a stopped renewing: pod-b takes over
        assert b.step() == []  # holder now, and the PodGroup already exists
        lease = http.get("coordination.k8s.io/v1", "Lease", RECONCILER_LEASE, SYSTEM_NS)
        assert lease["spec"]["holderIdentity"] == "pod-b" and lease["spec"]["leaseTransitions"] == 1
        assert a.step() == []
    finally:
        http.delete(stored, propagation="Background")
        http.delete({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                     "metadata": {"name": "elected", "namespace": "team-nlp"}})
        http.delete({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                     "metadata": {"name": RECONCILER_LEASE, "namespace": SYSTEM_NS}})


def test_serve_reconcile_runs_both_elected_loops_as_the_service_account(webhook, cluster, tmp_path):
    """`serve --reconcile` as deploy/ runs it: the PodGroup reconciler and the preflight status loop each
    take their Lease, as deploy/'s ServiceAccount, under the Pod's name."""
    from support.server import Server, issue_certs

    from trainadmit.cluster.lease import PREFLIGHT_STATUS_LEASE, RECONCILER_LEASE

    http = cluster.http
    names = (RECONCILER_LEASE, PREFLIGHT_STATUS_LEASE)
    for name in names:  # the reconciler test above may have left its Lease to another holder
        http.delete({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                     "metadata": {"name": name, "namespace": SYSTEM_NS}})
    server = Server(webhook.policy_dir, issue_certs(tmp_path / "certs"), workers=1,
                    extra=["--reconcile", "--namespace", SYSTEM_NS],
                    env_extra={"KUBECONFIG": str(webhook.kubeconfig), "POD_NAME": "trainadmit-under-test"})
    try:
        server.wait_ready()

        def held() -> bool:
            leases = [http.get_or_none("coordination.k8s.io/v1", "Lease", name, SYSTEM_NS) for name in names]
            return all(lease and lease["spec"].get("holderIdentity") == "trainadmit-under-test" for lease in leases)

        wait_until(held, timeout=30, what="both Leases held by the serving replica")
    finally:
        assert server.stop() == 0
        delete_budget_quotas(http)  # the reconciler wrote the budgets' ResourceQuotas
        for name in names:
            http.delete({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                         "metadata": {"name": name, "namespace": SYSTEM_NS}})


PODGROUPS = {  # what the engine writes in the workload's annotation, per backend
    "native": {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
               "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}},
    "coscheduling": {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                     "spec": {"minMember": 2, "minResources": {"nvidia.com/gpu": "16"}}},
    "volcano": {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                "spec": {"minMember": 2, "queue": "training", "priorityClassName": "training-normal"}},
}


def test_the_reconciler_creates_each_backends_podgroup_or_says_its_api_is_not_served(cluster, tmp_path):
    """With the scheduler-plugins and Volcano CRDs installed their PodGroups are created, owned by the Job;
    1.36 serves native PodGroups at v1alpha2 only, and the engine asks for v1beta1 (1.37): reported."""
    import json

    from kubernetes import client

    from trainadmit.cluster.reconciler import PodGroupReconciler

    http = cluster.http
    jobs = []
    for backend, pg in PODGROUPS.items():  # kube-public: the webhooks skip it, as if stored before trainadmit
        annotation = json.dumps({**pg, "metadata": {"name": f"{backend}-gang"}})
        jobs.append(http.create(job(name=f"pg-{backend}", namespace="kube-public", workers=2,
                                    labels={"trainadmit.io/podgroup": "true"},
                                    annotations={"trainadmit.io/podgroup": annotation})))
    try:
        reconciler = PodGroupReconciler(client.CustomObjectsApi(_sa_client(cluster.cp, tmp_path)), log=lambda m: None,
                                        kinds=[("batch", "v1", "jobs")])
        assert sorted(reconciler.step()) == [
            "kube-public/coscheduling-gang: created",
            "kube-public/native-gang: scheduling.k8s.io/v1beta1 PodGroup is not served by this cluster (CRD or "
            "feature gate missing)",
            "kube-public/volcano-gang: created"]
        for backend in ("coscheduling", "volcano"):
            pg = http.get(PODGROUPS[backend]["apiVersion"], "PodGroup", f"{backend}-gang", "kube-public")
            stored_job = next(j for j in jobs if j["metadata"]["name"] == f"pg-{backend}")
            assert pg["metadata"]["ownerReferences"] == [{"apiVersion": "batch/v1", "kind": "Job",
                                                          "name": f"pg-{backend}", "uid": stored_job["metadata"]["uid"],
                                                          "controller": True, "blockOwnerDeletion": True}]
            assert {k: pg["spec"][k] for k in PODGROUPS[backend]["spec"]} == PODGROUPS[backend]["spec"]
            http.delete(pg)
    finally:
        for stored in jobs:
            http.delete(stored, propagation="Background")


# ---- deploy/'s RBAC through the real authorizer --------------------------------------------------

def test_deploy_rbac_allows_every_call_the_server_makes_and_nothing_more(cluster):
    from support.permissions import declared_permissions

    from trainadmit.certs.incluster import PERMISSIONS as CERTS

    cp = cluster.cp
    for p in declared_permissions():
        if p in CERTS:  # the in-cluster-certs overlay's (deploy/base grants nothing on Secrets or webhook configurations)
            continue
        for verb in p.verbs:
            for name in p.names or (None,):
                assert cp.can_i(SA, verb, p.resource, group=p.group, namespace=SYSTEM_NS if p.namespaced else None,
                                name=name), (verb, p)
    denied = [("list", "secrets", "", None, None), ("get", "secrets", "", SYSTEM_NS, "someone-elses"),
              ("create", "jobs", "batch", "team-nlp", None), ("update", "nodes", "", None, "h100-r1-n01"),
              ("delete", "podgroups", "scheduling.x-k8s.io", "team-nlp", "x"), ("get", "pods", "", "team-nlp", "x"),
              ("delete", "jobs", "batch", "team-nlp", "x"), ("patch", "jobsets", "jobset.x-k8s.io", "team-nlp", "x"),
              ("update", "events", "", "team-nlp", "x"), ("get", "secrets", "", SYSTEM_NS, "trainadmit-tls"),
              ("create", "secrets", "", SYSTEM_NS, None),
              ("update", "validatingwebhookconfigurations", "admissionregistration.k8s.io", None, "trainadmit"),
              ("patch", "mutatingwebhookconfigurations", "admissionregistration.k8s.io", None, "trainadmit"),
              ("update", "validatingwebhookconfigurations", "admissionregistration.k8s.io", None, "another"),
              ("update", "leases", "coordination.k8s.io", SYSTEM_NS, "kube-scheduler"),
              ("watch", "secrets", "", None, None), ("create", "jobs", "batch", "team-nlp", None),
              # the reconciler changes and deletes only the ResourceQuota and the reports it writes
              ("update", "resourcequotas", "", "team-nlp", "someone-elses"),
              ("delete", "resourcequotas", "", "team-nlp", "compute-resources"),
              ("update", "reports", "openreports.io", "team-nlp", "kyverno-report"),
              ("delete", "policyreports", "wgpolicyk8s.io", "team-nlp", "polr-ns-team-nlp")]
    for verb, resource, group, namespace, name in denied:
        assert not cp.can_i(SA, verb, resource, group=group, namespace=namespace, name=name), (verb, resource, name)
    with pytest.raises(KubeError) as err:  # and through a real request, impersonating the account
        cp.http_as(SA).list("v1", "Secret", SYSTEM_NS)
    assert err.value.status == 403
