"""The placement gate's domain choice and ledger (``cluster.placement``), on Pods and Nodes as the apiserver returns
them: racks of 4 and 3 free 8-GPU nodes, gangs of 4 whole-node Pods (the outcome tier's shape, expected decisions
worked out by hand)."""

from __future__ import annotations

import json
import threading
import time

from support.controlplane import wait_until

from trainadmit.cluster.index import NodeFacts
from trainadmit.cluster.placement import Ledger, RenewedLease, fits, plan, release_patch, run
from trainadmit.cluster.pod_store import PodFacts, PodStore, pod_requests

GATE = "trainadmit.io/placement"
DOMAIN = "trainadmit.io/placement-domain"
RACK = "topology.kubernetes.io/rack"
POOL = {"trainadmit.io/pool": "h100-ib"}


def node(name: str, rack: str, *, ready: bool = True, cordoned: bool = False, taint: str = "") -> NodeFacts:
    obj = {"metadata": {"name": name, "labels": {**POOL, RACK: rack}},
           "spec": {"unschedulable": cordoned, "taints": [{"key": taint, "effect": "NoSchedule"}] if taint else []},
           "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "96"},
                      "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}
    return NodeFacts.of(obj)


def racks(a: int = 4, b: int = 3, **kw) -> dict[str, NodeFacts]:
    return {**{f"a{i}": node(f"a{i}", "a", **kw) for i in range(a)}, **{f"b{i}": node(f"b{i}", "b") for i in range(b)}}


def pod(name: str, gang: str = "team/train", size: int = 4, *, gated: bool = True, node_name: str = "",
        domain: str = "", phase: str = "Pending", gpus: int = 8, created: str = "2026-12-02T10:00:00Z",
        placement: bool = True) -> PodFacts:
    annotations = {}
    if placement:
        annotations[GATE] = json.dumps({"gang": gang, "size": size, "key": RACK, "level": "rack", "pool": POOL})
    if domain:
        annotations[DOMAIN] = domain
    obj = {"metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}", "creationTimestamp": created,
                        "annotations": annotations,
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": gang.split("/")[-1],
                                             "uid": f"job-{gang}", "controller": True}]},
           "spec": {"nodeName": node_name or None, "nodeSelector": dict(POOL),
                    "schedulingGates": [{"name": GATE}] if gated else [],
                    "containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": gpus, "cpu": "4"}}}]},
           "status": {"phase": phase}}
    return PodFacts.of(obj, GATE, DOMAIN)


def gang(prefix: str, n: int = 4, **kw) -> list[PodFacts]:
    return [pod(f"{prefix}-{i}", **kw) for i in range(n)]


def test_a_gang_of_four_goes_whole_into_the_only_rack_with_room():
    releases, waits = plan(gang("w"), racks(), Ledger())
    assert [(r.domain, r.how, len(r.pods)) for r in releases] == [("a", "placed", 4)] and waits == []


def test_the_best_fit_rack_wins_so_a_small_gang_leaves_the_large_rack_free():
    releases, _ = plan(gang("w", 3, size=3), racks(), Ledger())
    assert [r.domain for r in releases] == ["b"]


def test_no_room_keeps_the_whole_gang_gated_and_says_why():
    nodes = racks()
    nodes["a0"] = node("a0", "a", cordoned=True)  # 3 + 3 schedulable
    releases, [wait] = plan(gang("w"), nodes, Ledger())
    assert releases == [] and wait.reason == "no-domain" and len(wait.pods) == 4
    assert "no rack (topology.kubernetes.io/rack) has room for all 4 Pods of gang team/train" in wait.message


def test_bound_pods_of_others_and_not_ready_or_tainted_nodes_take_room():
    busy = pod("other", gang="x/other", size=1, gated=False, node_name="a1", placement=False)
    assert plan([busy, *gang("w")], racks(), Ledger())[0] == []
    ended = pod("done", gang="x/other", size=1, gated=False, node_name="a1", phase="Succeeded", placement=False)
    assert [r.domain for r in plan([ended, *gang("w")], racks(), Ledger())[0]] == ["a"]
    nodes = racks()
    nodes["a2"] = node("a2", "a", ready=False)
    assert plan(gang("w"), nodes, Ledger())[0] == []
    nodes["a2"] = node("a2", "a", taint="dedicated")
    assert plan(gang("w"), nodes, Ledger())[0] == []


def test_a_gang_waits_silently_until_all_of_its_pods_exist():
    releases, [wait] = plan(gang("w", 3), racks(), Ledger())
    assert releases == [] and wait.reason == "incomplete" and wait.message == "3 of the gang's 4 Pods exist"


def test_two_gangs_at_once_never_count_the_same_nodes_the_older_goes_first():
    first = gang("w", gang="team/first", created="2026-12-02T10:00:00Z")
    second = gang("v", gang="team/second", created="2026-12-02T10:00:01Z")
    ledger = Ledger()
    releases, [wait] = plan([*second, *first], racks(), ledger)
    assert [(r.gang, r.domain) for r in releases] == [("team/first", "a")]
    assert wait.gang == "team/second" and wait.reason == "no-domain"
    # the next pass, before the scheduler bound the first gang (its Pods ungated, with their domain, unbound): the
    # ledger still holds rack a for it
    released = [pod(p.name, gang="team/first", gated=False, domain="a") for p in first]
    assert plan([*released, *second], racks(), ledger)[0] == []
    assert plan([*released, *second], racks(), Ledger())[0] == []  # a new leader reads the same from the Pods
    # bound: the nodes' room counts them instead; deleted: rack a is free for the second gang
    bound = [pod(p.name, gang="team/first", gated=False, domain="a", node_name=f"a{i}") for i, p in enumerate(first)]
    assert plan([*bound, *second], racks(), ledger)[0] == []
    [release] = plan(second, racks(), ledger)[0]
    assert (release.gang, release.domain, len(release.pods)) == ("team/second", "a", 4)


def test_a_replacement_joins_the_domain_of_its_running_gang_and_a_new_leader_finishes_a_release():
    running = [pod(f"w-{i}", gated=False, domain="a", node_name=f"a{i}") for i in range(3)]
    replacement = pod("w-3-retry", created="2026-12-02T11:00:00Z")
    [release] = plan([*running, replacement], racks(), Ledger())[0]
    assert (release.domain, release.how, [p.name for p in release.pods]) == ("a", "joined", ["w-3-retry"])
    # a crash after 2 of 4 patches: the other 2 go into the same rack, whatever rack b offers
    half = [pod("w-0", gated=False, domain="a"), pod("w-1", gated=False, domain="a"), pod("w-2"), pod("w-3")]
    [release] = plan(half, racks(), Ledger())[0]
    assert (release.domain, [p.name for p in release.pods]) == ("a", ["w-2", "w-3"])


def test_the_rest_of_an_interrupted_release_stays_gated_while_its_domain_is_full_and_never_goes_elsewhere():
    """A crash after 2 of 4 patches, then the other 2 free nodes of rack a taken by another tenant: the 2 gated Pods
    wait gated (WaitingForDomain), although rack b has 3 free nodes; once rack a has room they join it."""
    released = [pod(f"w-{i}", gated=False, domain="a", node_name=f"a{i}") for i in range(2)]
    others = [pod(f"other-{i}", gang="x/other", size=1, gated=False, node_name=f"a{i}", placement=False)
              for i in (2, 3)]
    rest = [pod("w-2"), pod("w-3")]
    releases, [wait] = plan([*released, *others, *rest], racks(), Ledger())
    assert releases == [] and wait.reason == "no-domain" and [p.name for p in wait.pods] == ["w-2", "w-3"]
    assert "topology.kubernetes.io/rack=a" in wait.message and "stay gated" in wait.message
    assert plan([*released, others[0], *rest], racks(), Ledger())[0] == []  # one node free: not enough
    [release] = plan([*released, *rest], racks(), Ledger())[0]
    assert (release.domain, release.how, [p.name for p in release.pods]) == ("a", "joined", ["w-2", "w-3"])


def test_released_pods_are_not_released_twice_before_their_watch_event():
    ledger = Ledger()
    pods = gang("w")
    assert len(plan(pods, racks(), ledger)[0]) == 1
    assert plan(pods, racks(), ledger) == ([], [])  # the store still shows them gated


def test_a_gang_created_without_a_name_is_grouped_by_its_controller():
    pods = gang("w", gang="")
    [release] = plan(pods, racks(), Ledger())[0]
    assert release.gang == "team/uid:job-" and len(release.pods) == 4


def test_the_release_patch_is_the_one_contracts_allow():
    p = pod("w-0")
    assert release_patch(p, GATE, RACK, "a", DOMAIN) == [
        {"op": "test", "path": "/spec/schedulingGates/0", "value": {"name": GATE}},
        {"op": "remove", "path": "/spec/schedulingGates/0"},
        {"op": "add", "path": "/spec/nodeSelector/topology.kubernetes.io~1rack", "value": "a"},
        {"op": "add", "path": "/metadata/annotations/trainadmit.io~1placement-domain", "value": "a"}]


def test_first_fit_and_requests_as_the_scheduler_counts_them():
    assert fits([{"g": 8}, {"g": 4}], [{"g": 4}, {"g": 8}]) == [{"g": 0}, {"g": 0}]
    assert fits([{"g": 8}], [{"g": 4}, {"g": 8}]) is None
    spec = {"containers": [{"resources": {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "4"}}},
                           {"resources": {"limits": {"nvidia.com/gpu": 1, "cpu": "2"}}}],
            "initContainers": [{"resources": {"limits": {"nvidia.com/gpu": 8}}}]}
    assert pod_requests(spec) == {"nvidia.com/gpu": 8}


def test_the_store_keeps_only_what_placement_reads_and_wakes_on_changes():
    store = PodStore(GATE, DOMAIN)
    cpu_only = {"metadata": {"name": "web", "namespace": "n", "uid": "u1"},
                "spec": {"containers": [{"resources": {"limits": {"cpu": "1"}}}]}}
    store.replace("pods", [cpu_only])
    store.replace("nodes", [])
    assert store.synced and store.pods == {}
    store.changed.clear()
    store.apply("nodes", "ADDED", {"metadata": {"name": "a0", "labels": {}}})
    assert store.changed.is_set()
    store.changed.clear()
    store.apply("nodes", "MODIFIED", {"metadata": {"name": "a0", "labels": {}}})  # a heartbeat
    assert not store.changed.is_set()


def test_the_loop_runs_a_pass_on_each_change_and_the_lease_is_asked_once_per_renewal():
    """Event-driven: with a renewal period of 30 s, a change of the store runs the next pass at once."""
    store, stop, calls = PodStore(GATE, DOMAIN), threading.Event(), []

    def step() -> None:
        calls.append(time.monotonic())
        if len(calls) == 2:
            stop.set()

    loop = threading.Thread(target=run, args=(step, store, stop, 30.0, 0.0))
    loop.start()
    wait_until(lambda: len(calls) == 1, timeout=5, what="the first pass")
    store.changed.set()
    loop.join(5)
    assert not loop.is_alive() and len(calls) == 2 and calls[1] - calls[0] < 5

    class Lease:
        asked = 0

        def hold(self) -> bool:
            self.asked += 1
            return True

    now = [0.0]
    lease = RenewedLease(Lease(), renew=5.0, clock=lambda: now[0])
    assert all(lease.hold() for _ in range(10)) and lease.lease.asked == 1
    now[0] = 6.0
    assert lease.hold() and lease.lease.asked == 2
