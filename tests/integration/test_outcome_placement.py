"""Outcome tier: the placement gate on a stock Kubernetes 1.36.2 control plane (no feature gates: no gang scheduler,
what managed clusters give), with the bundled policies as shipped and trainadmit run as deploy/ runs it
(``serve --cluster-live --reconcile`` as its ServiceAccount).

The documentation's Indexed Job asks for 4 whole 8-GPU nodes in one rack; the racks have 4 and 3 free nodes and the
3-node rack holds the workers' image, so the scheduler prefers it for a first Pod (on main every such Job bound across
both racks, and two at once left one of them 3 of 4 bound holding 24 GPUs). The mutating webhook gates the Pods
(``trainadmit.io/placement``); the ungater writes one rack with room for the whole gang into all of them and lifts
the gate together. The same outcomes on a cluster with the native gang but no TopologyAwareWorkloadScheduling are
in test_outcome_gangs.py (phase ``no-topology-gate``).
"""

from __future__ import annotations

import contextlib
import json
import time

import pytest
from support.controlplane import ClusterFeatures, wait_until
from support.kube_fixtures import (
    DEPLOY,
    trainadmit_on,
)
from support.outcome import (
    BLOCKER_NS,
    FITS,
    JOB_NAME_LABEL,
    LEVEL,
    RACK_BUSY,
    Scene,
    all_bound,
    decided,
    gpu_job,
    node_labels,
    read_verdict,
    scene,
    submit,
)

pytestmark = pytest.mark.xdist_group("outcome-placement")

WORKERS = 4
RACK_LABEL = "topology.kubernetes.io/rack"
GATE = "trainadmit.io/placement"
STOCK = ClusterFeatures("stock")  # no feature gates, no extra APIs: Kubernetes 1.36.2 as it ships
PHASES: dict[str, dict] = {"bundled": {}}  # policies/ as shipped
# the ValidatingAdmissionPolicy that limits what the server's account may change in a Pod, installed as deploy/
# installs it, so that every release here passes through it
FENCE = DEPLOY / "fence-pods.yaml"


@pytest.fixture(scope="module")
def stock(tmp_path_factory):
    with trainadmit_on(STOCK, PHASES, "bundled", tmp_path_factory.mktemp("trainadmit-placement"),
                       manifests=(FENCE,)) as found:
        yield found


def _job(s: Scene, name: str) -> dict:
    return gpu_job(name, s.namespace, WORKERS, annotations={"trainadmit.io/topology": LEVEL})


def _racks(s: Scene, nodes) -> set[str]:
    return set(node_labels(s.http, set(nodes), RACK_LABEL).values())


def _gated(s: Scene, name: str) -> list[dict]:
    pods = s.http.list("v1", "Pod", s.namespace, labelSelector=f"{JOB_NAME_LABEL}={name}")["items"]
    return [p for p in pods if any(g.get("name") == GATE for g in p["spec"].get("schedulingGates") or [])
            and not p["metadata"].get("deletionTimestamp")]


def _waiting_events(s: Scene) -> list[dict]:
    return [e for e in s.http.list("v1", "Event", s.namespace)["items"] if e.get("reason") == "WaitingForDomain"]


def _all_gated_and_said(s: Scene, name: str) -> None:
    """All 4 Pods exist, gated, and the ungater said why they wait (it decided: no rack has room)."""
    wait_until(lambda: len(_gated(s, name)) == WORKERS and any(
        e["involvedObject"]["name"] in {p["metadata"]["name"] for p in _gated(s, name)} for e in _waiting_events(s)),
        timeout=60, what=f"4 gated Pods of {name} and a WaitingForDomain Event")


def test_a_gang_starts_whole_in_the_rack_that_fits_although_the_scheduler_prefers_the_other(stock):
    cp, hook = stock
    with scene(cp, hook, "bundled", FITS, "pfit") as s:
        sub = submit(cp, _job(s, "train"))
        assert sub.admitted, sub.error
        assert not [w for w in sub.warnings if "colocation-risk" in w], sub.warnings
        job = s.http.get("batch/v1", "Job", "train", s.namespace)
        template = job["spec"]["template"]
        assert template["spec"]["schedulingGates"] == [{"name": GATE}]
        assert json.loads(template["metadata"]["annotations"][GATE])["gang"] == f"{s.namespace}/train"
        v = all_bound(s.http, s.namespace, f"{JOB_NAME_LABEL}=train", WORKERS)
        assert _racks(s, v.bound.values()) == {s.node("a")}
        for pod in s.http.list("v1", "Pod", s.namespace, labelSelector=f"{JOB_NAME_LABEL}=train")["items"]:
            assert pod["spec"]["nodeSelector"][RACK_LABEL] == s.node("a")
            assert pod["metadata"]["annotations"][f"{GATE}-domain"] == s.node("a")
            assert not pod["spec"].get("schedulingGates")


def test_the_release_passes_the_fence_of_the_servers_pod_writes(stock):
    """With deploy/'s fence installed (the server's account may only lift its gate, add node selector keys and set
    its domain annotation), the ungater still releases a gang whole into one rack."""
    cp, hook = stock
    assert cp.http.get_or_none("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy",
                               "trainadmit-fence-pods") is not None
    with scene(cp, hook, "bundled", FITS, "pfence") as s:
        assert submit(cp, _job(s, "train")).admitted
        v = all_bound(s.http, s.namespace, f"{JOB_NAME_LABEL}=train", WORKERS)
        assert _racks(s, v.bound.values()) == {s.node("a")}


def test_no_pod_starts_while_no_rack_has_room_and_all_in_one_rack_once_one_has(stock):
    cp, hook = stock
    with scene(cp, hook, "bundled", RACK_BUSY, "pbusy") as s:
        assert submit(cp, _job(s, "train")).admitted
        _all_gated_and_said(s, "train")
        assert read_verdict(s.http, s.namespace, f"{JOB_NAME_LABEL}=train").bound == {}
        s.release("a0")  # the other tenant's Pod ends: rack a has 4 free nodes
        v = all_bound(s.http, s.namespace, f"{JOB_NAME_LABEL}=train", WORKERS)
        assert _racks(s, v.bound.values()) == {s.node("a")}


def test_two_gangs_at_once_one_starts_whole_the_other_none_then_whole_once_the_first_is_deleted(stock):
    cp, hook = stock
    with scene(cp, hook, "bundled", FITS, "ptwo") as s:
        assert submit(cp, _job(s, "first")).admitted and submit(cp, _job(s, "second")).admitted

        def one_whole() -> tuple[str, str] | None:
            bound = {n: read_verdict(s.http, s.namespace, f"{JOB_NAME_LABEL}={n}").bound for n in ("first", "second")}
            whole = [n for n, b in bound.items() if len(b) == WORKERS]
            return (whole[0], "second" if whole[0] == "first" else "first") if whole else None

        started, other = wait_until(one_whole, timeout=60, what="one gang bound whole")
        _all_gated_and_said(s, other)
        assert read_verdict(s.http, s.namespace, f"{JOB_NAME_LABEL}={other}").bound == {}
        v = read_verdict(s.http, s.namespace, f"{JOB_NAME_LABEL}={started}")
        assert _racks(s, v.bound.values()) == {s.node("a")}
        s.http.delete({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": started, "namespace": s.namespace}},
                      propagation="Background")
        cp.force_delete_pods(s.namespace, f"{JOB_NAME_LABEL}={started}")
        v = all_bound(s.http, s.namespace, f"{JOB_NAME_LABEL}={other}", WORKERS)
        assert _racks(s, v.bound.values()) == {s.node("a")}


def test_a_failed_workers_replacement_lands_in_its_gangs_rack(stock):
    cp, hook = stock
    with scene(cp, hook, "bundled", FITS, "prepl") as s:
        assert submit(cp, _job(s, "train")).admitted
        v = all_bound(s.http, s.namespace, f"{JOB_NAME_LABEL}=train", WORKERS)
        failed = sorted(v.bound)[0]
        s.http.patch({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": failed, "namespace": s.namespace}},
                     {"status": {"phase": "Failed", "containerStatuses": [
                         {"name": "worker", "image": "x", "imageID": "", "ready": False, "restartCount": 0,
                          "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}},
                     kind="strategic", subresource="status")

        def replaced() -> dict | None:
            pods = s.http.list("v1", "Pod", s.namespace, labelSelector=f"{JOB_NAME_LABEL}=train")["items"]
            new = [p for p in pods if p["metadata"]["name"] not in v.bound and p["spec"].get("nodeName")]
            return new[0] if new else None

        pod = wait_until(replaced, timeout=60, what="the replacement Pod bound")  # the Job's backoff: about 10 s
        assert _racks(s, [pod["spec"]["nodeName"]]) == {s.node("a")}
        assert pod["spec"]["nodeSelector"][RACK_LABEL] == s.node("a")


def _hand_placed(s: Scene, name: str, rack: str) -> dict:
    """The Job as trainadmit stores it, with the rack written by hand and no gate: what a user who knew the free
    rack would submit (created in a namespace trainadmit exempts, so no webhook changes it)."""
    job = s.http.get("batch/v1", "Job", "train", s.namespace)
    template = job["spec"]["template"]
    template["spec"].pop("schedulingGates", None)
    template["spec"]["nodeSelector"][RACK_LABEL] = rack
    template["metadata"].get("annotations", {}).pop(GATE, None)
    for key in ("controller-uid", "batch.kubernetes.io/controller-uid", "job-name", JOB_NAME_LABEL):
        template["metadata"].get("labels", {}).pop(key, None)
    template["spec"].pop("priorityClassName", None)
    spec = {k: job["spec"][k] for k in ("parallelism", "completions", "completionMode")}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": BLOCKER_NS},
            "spec": {**spec, "template": template}}


def test_time_to_all_bound_is_close_to_a_hand_placed_job(stock):
    """Created with ``kubectl create`` until all 4 bound, with trainadmit (webhooks, the gate, the ungater) and for
    the same Job placed by hand, in the same run; the figure is printed (``-s``) and held within 1.5x or +2 s."""
    cp, hook = stock
    with scene(cp, hook, "bundled", FITS, "ptime") as s:
        t0 = time.monotonic()
        assert submit(cp, _job(s, "train")).admitted
        all_bound(s.http, s.namespace, f"{JOB_NAME_LABEL}=train", WORKERS, timeout=60)
        gated = time.monotonic() - t0
        hand = _hand_placed(s, "hand", s.node("a"))
        s.http.delete({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": s.namespace}},
                      propagation="Background")
        cp.force_delete_pods(s.namespace)
        wait_until(lambda: not s.http.list("v1", "Pod", s.namespace)["items"], timeout=30, what="the Pods gone")
        try:
            t0 = time.monotonic()
            assert submit(cp, hand).admitted
            all_bound(s.http, BLOCKER_NS, f"{JOB_NAME_LABEL}=hand", WORKERS, timeout=60)
            by_hand = time.monotonic() - t0
        finally:
            s.http.delete({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "hand", "namespace": BLOCKER_NS}},
                          propagation="Background")
            with contextlib.suppress(Exception):
                cp.force_delete_pods(BLOCKER_NS, f"{JOB_NAME_LABEL}=hand")
        print(f"time to all 4 bound: trainadmit (gate) {gated:.2f} s, by hand {by_hand:.2f} s")
        assert gated <= max(1.5 * by_hand, by_hand + 2.0), (gated, by_hand)


def test_the_decision_check_predicts_is_what_is_stored(stock):
    """The gate and its annotation as ``check`` predicts them for the user's Job are the stored template's."""
    cp, hook = stock
    with scene(cp, hook, "bundled", FITS, "ppred") as s:
        from trainadmit.engine import Request, decide

        job = _job(s, "train")
        assert submit(cp, job).admitted
        stored = s.http.get("batch/v1", "Job", "train", s.namespace)["spec"]["template"]
        predicted = decide(s.policy, Request(job)).mutated["spec"]["template"]
        assert predicted["spec"]["schedulingGates"] == stored["spec"]["schedulingGates"]
        assert predicted["metadata"]["annotations"][GATE] == stored["metadata"]["annotations"][GATE]
        decided(s.http, s.namespace, f"{JOB_NAME_LABEL}=train", WORKERS)
