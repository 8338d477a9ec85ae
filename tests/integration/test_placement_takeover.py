"""Outcome tier: a crash or a lost Lease in the middle of ungating, on the real apiserver, Job controller and scheduler
(stock 1.36.2, no feature gates), with the bundled policies as shipped and deploy/'s fence of the server's Pod writes.

Issue 29 asks that such an interruption leave no gang half released: the domain chosen is readable from the Pods
themselves, and the next leader finishes the release into that domain or, when it no longer fits, keeps the rest gated.
No fault hook is added to trainadmit: the first leader is the ungater's own code (``cluster.placement.Ungater``) run in
this process as trainadmit's ServiceAccount (its Lease, its Pod store listed by ``cluster.pod_store.Watcher``, every
patch through the fence), with a client that raises after ``k`` of the gang's patches (the process dies there). The
next leader is trainadmit as deploy/ runs it (``serve --reconcile``), which takes the Lease once the first one's
expires. The admission server of this module runs without ``--reconcile``, so that no other ungater acts first.

The Lease's duration is the stored Lease's (15 s here, the first leader's choice; deploy/'s servers write 60 s), so a
takeover takes seconds, not a minute.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import signal
import threading

import pytest
from kubernetes import client, config
from support import placement_outcome as outcome
from support.controlplane import ClusterFeatures, KubeError, wait_until
from support.kube_fixtures import DEPLOY, SYSTEM_NS, reconciling_server, trainadmit_on
from support.outcome import BLOCKER_NS, FITS, JOB_NAME_LABEL, RACK_BUSY, Scene, read_verdict, scene, submit

from trainadmit.cluster.lease import PLACEMENT_LEASE, LeaderLease
from trainadmit.cluster.placement import Ungater
from trainadmit.cluster.pod_store import PodStore, Watcher

pytestmark = pytest.mark.xdist_group("outcome-placement")

STOCK = ClusterFeatures("stock")
PHASES: dict[str, dict] = {"bundled": {}}
WORKERS, GATE = outcome.WORKERS, outcome.GATE
LEASE_SECONDS = 15
RELEASED_FIRST = 2  # the first leader's patches that reach the apiserver before it dies


@pytest.fixture(scope="module")
def stock(tmp_path_factory):
    with trainadmit_on(STOCK, PHASES, "bundled", tmp_path_factory.mktemp("trainadmit-takeover"),
                       manifests=(DEPLOY / "fence-pods.yaml",), reconcile=False) as found:
        yield found


@pytest.fixture
def lease(stock):
    """No placement Lease before the test, none after it."""
    cp, _ = stock
    ref = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
           "metadata": {"name": PLACEMENT_LEASE, "namespace": SYSTEM_NS}}
    cp.http.delete(ref)
    yield ref
    cp.http.delete(ref)


class Crash(Exception):
    """The first leader's process dies here."""


class CrashAfter:
    """The ServiceAccount's CoreV1Api, whose ``patch_namespaced_pod`` dies after ``k`` calls (counted across the
    ungater's parallel patches, so exactly ``k`` reach the apiserver)."""

    def __init__(self, core: client.CoreV1Api, k: int) -> None:
        self.core, self.k, self.calls, self.lock = core, k, 0, threading.Lock()

    def __getattr__(self, name: str):
        return getattr(self.core, name)

    def patch_namespaced_pod(self, *args, **kwargs):
        with self.lock:
            self.calls += 1
            if self.calls > self.k:
                raise Crash(f"died after {self.k} patches")
        return self.core.patch_namespaced_pod(*args, **kwargs)


def account_clients(hook) -> tuple[client.CoreV1Api, client.CoordinationV1Api]:
    """trainadmit's ServiceAccount (deploy/'s RBAC, a real token): what the server runs as."""
    api = config.new_client_from_config(config_file=str(hook.kubeconfig))
    return client.CoreV1Api(api), client.CoordinationV1Api(api)


def crash_in_the_middle(hook, s: Scene, name: str) -> str:
    """The first leader: holds the Lease, lists Pods and Nodes, plans the gang and dies after ``RELEASED_FIRST`` of its
    patches. Returns the domain the released Pods carry."""
    core, coordination = account_clients(hook)
    assert LeaderLease(coordination, SYSTEM_NS, PLACEMENT_LEASE, "crashed-leader", duration_seconds=LEASE_SECONDS,
                       log=lambda m: None).hold()
    wait_until(lambda: len(outcome.gated(s, name)) == WORKERS, timeout=60, what=f"the 4 gated Pods of {name}")
    store = PodStore(GATE, f"{GATE}-domain")
    watcher = Watcher(core, store, log=lambda m: None)
    watcher.list_all("pods"), watcher.list_all("nodes")
    ungater = Ungater(CrashAfter(core, RELEASED_FIRST), store, GATE, log=lambda m: None)
    with pytest.raises(Crash):
        ungater.step()
    pods = outcome.pods_of(s, name)
    released = [p for p in pods if not p["spec"].get("schedulingGates")]
    assert len(released) == RELEASED_FIRST and len(pods) - len(released) == WORKERS - RELEASED_FIRST, \
        "the gang is half released, as a crash leaves it"
    [domain] = {p["metadata"]["annotations"][outcome.DOMAIN_ANNOTATION] for p in released}
    assert {p["spec"]["nodeSelector"][outcome.RACK_LABEL] for p in released} == {domain}
    wait_until(lambda: len(read_verdict(s.http, s.namespace, f"{JOB_NAME_LABEL}={name}").bound) == RELEASED_FIRST,
               timeout=60, what="the released Pods bound by the scheduler")
    return domain


def took_over(server, holder: str = "crashed-leader") -> bool:
    return f"taking over lease {PLACEMENT_LEASE} from {holder}" in server.log.read_text()


def hold_node(s: Scene, node: str) -> None:
    """Another tenant's Pod takes all 8 GPUs of ``node`` (bound by name; ``Scene.release`` ends it)."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"holder-{node}", "namespace": BLOCKER_NS},
           "spec": {"nodeName": node, "tolerations": [{"operator": "Exists"}], "containers": [
               {"name": "c", "image": "example.invalid/other:1", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}
    s.held[node] = s.http.create(pod)["metadata"]["name"]


def test_a_new_leader_finishes_a_release_a_crash_interrupted_into_the_same_rack(stock, lease, tmp_path):
    cp, hook = stock
    with scene(cp, hook, "bundled", FITS, "tkcrash") as s:
        assert submit(cp, outcome.job(s, "train")).admitted
        domain = crash_in_the_middle(hook, s, "train")
        assert domain == s.node("a")
        with reconciling_server(cp, hook.policy_dir, hook.kubeconfig, tmp_path, "trainadmit-successor") as server:
            v = outcome.all_bound(s.http, s.namespace, f"{JOB_NAME_LABEL}=train", WORKERS, timeout=90)
            assert outcome.racks(s, v.bound.values()) == {domain}
            outcome.assert_in_rack(s, "train", domain)
            assert took_over(server), server.log.read_text()[-2000:]


def test_the_rest_of_an_interrupted_release_stays_gated_while_its_rack_is_full_then_joins_it(stock, lease, tmp_path):
    """The first leader dies after 2 of 4 patches; another tenant then takes rack a's 2 other nodes. The next leader
    keeps the 2 gated Pods gated and says why (WaitingForDomain), although rack b has 3 free nodes; once rack a has
    room again they join it. (On main the next leader released them into rack a regardless: Pending, unschedulable,
    no word of why.)"""
    cp, hook = stock
    with scene(cp, hook, "bundled", FITS, "tkfull") as s:
        assert submit(cp, outcome.job(s, "train")).admitted
        domain = crash_in_the_middle(hook, s, "train")
        used = set(read_verdict(s.http, s.namespace, f"{JOB_NAME_LABEL}=train").bound.values())
        free = [n.name for n in s.nodes if n.domains["rack"] == domain and n.name not in used]
        assert len(free) == WORKERS - RELEASED_FIRST
        for node in free:
            hold_node(s, node)
        with reconciling_server(cp, hook.policy_dir, hook.kubeconfig, tmp_path, "trainadmit-successor") as server:
            wait_until(lambda: took_over(server), timeout=60, what="the successor to take the Lease")
            rest = {p["metadata"]["name"] for p in outcome.gated(s, "train")}

            def said() -> dict | None:
                return next((e for e in outcome.waiting_events(s) if e["involvedObject"]["name"] in rest), None)

            event = wait_until(said, timeout=60, what="a WaitingForDomain Event on the gated rest of the gang")
            assert f"{outcome.RACK_LABEL}={domain}" in event["message"], event["message"]
            assert {p["metadata"]["name"] for p in outcome.gated(s, "train")} == rest
            assert len(read_verdict(s.http, s.namespace, f"{JOB_NAME_LABEL}=train").bound) == RELEASED_FIRST
            for p in outcome.pods_of(s, "train"):  # none of the gang went, or was sent, elsewhere
                assert p["spec"].get("nodeSelector", {}).get(outcome.RACK_LABEL, domain) == domain
            for node in free:
                s.release(node.removeprefix(f"{s.prefix}-"))
            v = outcome.all_bound(s.http, s.namespace, f"{JOB_NAME_LABEL}=train", WORKERS)
            assert outcome.racks(s, v.bound.values()) == {domain}
            outcome.assert_in_rack(s, "train", domain)


def _expired_lease(cp, ref: dict) -> None:
    """A Lease no one holds any more, of ``LEASE_SECONDS``: the first server takes it at once and keeps its duration."""
    long_ago = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    cp.http.create({**ref, "spec": {"holderIdentity": "nobody", "leaseDurationSeconds": LEASE_SECONDS,
                                    "acquireTime": long_ago, "renewTime": long_ago}})


def _holder(cp, ref: dict) -> str | None:
    with contextlib.suppress(KubeError):
        return cp.http.get(ref["apiVersion"], "Lease", PLACEMENT_LEASE, SYSTEM_NS)["spec"].get("holderIdentity")
    return None


def test_a_lost_lease_a_second_server_takes_over_and_places_the_waiting_gang(stock, lease, tmp_path):
    """Two servers as deploy/ runs them; the leader stalls (SIGSTOP: it renews nothing, as under a long pause or a cut
    network) while a gang waits for room. The other takes the Lease once it expires, and places the gang whole in
    rack a when the room comes; the stalled one, resumed, finds nothing to do."""
    cp, hook = stock
    _expired_lease(cp, lease)
    with scene(cp, hook, "bundled", RACK_BUSY, "tklost") as s, \
            reconciling_server(cp, hook.policy_dir, hook.kubeconfig, tmp_path / "a", "trainadmit-a") as first:
        wait_until(lambda: _holder(cp, lease) == "trainadmit-a", timeout=60, what="trainadmit-a to hold the Lease")
        with reconciling_server(cp, hook.policy_dir, hook.kubeconfig, tmp_path / "b", "trainadmit-b") as second:
            assert submit(cp, outcome.job(s, "train")).admitted
            outcome.all_gated_and_said(s, "train")  # the leader decided: no rack has room
            os.killpg(first.proc.pid, signal.SIGSTOP)  # the whole server: its main, workers' and controllers' processes
            try:
                wait_until(lambda: _holder(cp, lease) == "trainadmit-b", timeout=60,
                           what="trainadmit-b to take the Lease of the stalled leader")
                assert took_over(second, "trainadmit-a")
                s.release("a0")
                v = outcome.all_bound(s.http, s.namespace, f"{JOB_NAME_LABEL}=train", WORKERS)
                assert outcome.racks(s, v.bound.values()) == {s.node("a")}
                outcome.assert_in_rack(s, "train", s.node("a"))
            finally:
                os.killpg(first.proc.pid, signal.SIGCONT)
            assert "released into" not in first.log.read_text()


def test_the_leaders_controllers_process_killed_is_started_again_and_places_the_waiting_gang(stock, lease, tmp_path):
    """The server as deploy/ runs it keeps every controller thread out of its main process (which forks the workers);
    its controllers' process killed outright while a gang waits for room, the main process starts it again, the new
    one holds the Lease under the same identity and places the gang whole in rack a when the room comes."""
    cp, hook = stock
    _expired_lease(cp, lease)
    with scene(cp, hook, "bundled", RACK_BUSY, "tkctl") as s, \
            reconciling_server(cp, hook.policy_dir, hook.kubeconfig, tmp_path, "trainadmit-a") as server:
        wait_until(lambda: _holder(cp, lease) == "trainadmit-a", timeout=60, what="trainadmit-a to hold the Lease")
        assert len(os.listdir(f"/proc/{server.proc.pid}/task")) == 1  # the main process: no thread but its own
        assert submit(cp, outcome.job(s, "train")).admitted
        outcome.all_gated_and_said(s, "train")
        first = server.controllers_pid()
        assert first is not None
        os.kill(first, signal.SIGKILL)
        wait_until(lambda: server.controllers_pid() not in (None, first), timeout=10,
                   what="the controllers' process to be started again")
        s.release("a0")
        v = outcome.all_bound(s.http, s.namespace, f"{JOB_NAME_LABEL}=train", WORKERS)
        assert outcome.racks(s, v.bound.values()) == {s.node("a")}
        assert _holder(cp, lease) == "trainadmit-a"
        assert len(os.listdir(f"/proc/{server.proc.pid}/task")) == 1
