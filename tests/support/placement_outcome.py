"""The placement gate's outcomes, as the outcome tier checks them on each kind of cluster that needs the gate.

One body per outcome, shared by the tier files of each cluster (``test_outcome_placement.py``: stock 1.36.2, no gang
scheduler; ``test_outcome_placement_workload.py``: the Workload API + GangScheduling, no topology gate). Each takes the
cluster's control plane and trainadmit (``kube_fixtures.trainadmit_on``), the policy phase it serves and a prefix for
the test's own nodes and namespace; ``gang=True`` also checks the native gang the cluster forms (the reconciler's
PodGroup of 4, every Pod in it).

The documentation's Indexed Job asks for 4 whole 8-GPU nodes in one rack; the racks have 4 and 3 free nodes and the
3-node rack holds the workers' image, so the scheduler prefers it for a first Pod. The mutating webhook gates the Pods
(``trainadmit.io/placement``); the ungater writes one rack with room for the whole gang into all of them and lifts
the gate together.
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

import yaml

from support.controlplane import SchedulingControlPlane, wait_until
from support.outcome import (
    BLOCKER_NS,
    FITS,
    JOB_NAME_LABEL,
    LEVEL,
    RACK_BUSY,
    Scene,
    all_bound,
    gpu_job,
    kubectl,
    node_labels,
    read_verdict,
    scene,
    submit,
)

WORKERS = 4
RACK_LABEL = "topology.kubernetes.io/rack"
GATE = "trainadmit.io/placement"
DOMAIN_ANNOTATION = f"{GATE}-domain"
PODGROUPS = "scheduling.k8s.io/v1alpha2"


def job(s: Scene, name: str) -> dict:
    return gpu_job(name, s.namespace, WORKERS, annotations={"trainadmit.io/topology": LEVEL})


def racks(s: Scene, nodes) -> set[str]:
    return set(node_labels(s.http, set(nodes), RACK_LABEL).values())


def pods_of(s: Scene, name: str) -> list[dict]:
    return s.http.list("v1", "Pod", s.namespace, labelSelector=f"{JOB_NAME_LABEL}={name}")["items"]


def gated(s: Scene, name: str) -> list[dict]:
    return [p for p in pods_of(s, name) if any(g.get("name") == GATE for g in p["spec"].get("schedulingGates") or [])
            and not p["metadata"].get("deletionTimestamp")]


def waiting_events(s: Scene) -> list[dict]:
    return [e for e in s.http.list("v1", "Event", s.namespace)["items"] if e.get("reason") == "WaitingForDomain"]


def all_gated_and_said(s: Scene, name: str, count: int = WORKERS) -> None:
    """``count`` Pods of ``name`` exist, gated, and the ungater said why they wait (it decided: no rack has room)."""
    wait_until(lambda: len(gated(s, name)) == count and any(
        e["involvedObject"]["name"] in {p["metadata"]["name"] for p in gated(s, name)} for e in waiting_events(s)),
        timeout=60, what=f"{count} gated Pods of {name} and a WaitingForDomain Event")


def assert_gang(s: Scene, name: str) -> None:
    """The native gang the cluster forms: the PodGroup of the gang's size, every Pod of the Job in it."""
    group = s.http.get(PODGROUPS, "PodGroup", f"{name}-gang", s.namespace)
    assert group["spec"]["schedulingPolicy"]["gang"]["minCount"] == WORKERS, group["spec"]
    for pod in pods_of(s, name):
        assert pod["spec"].get("schedulingGroup") == {"podGroupName": f"{name}-gang"}, pod["spec"].get("schedulingGroup")


def assert_in_rack(s: Scene, name: str, rack: str) -> None:
    """Every Pod of ``name`` carries the rack the ungater chose, in its node selector and annotation, and no gate."""
    for pod in pods_of(s, name):
        assert pod["spec"]["nodeSelector"][RACK_LABEL] == rack
        assert pod["metadata"]["annotations"][DOMAIN_ANNOTATION] == rack
        assert not pod["spec"].get("schedulingGates")


def fits(cp: SchedulingControlPlane, hook: Any, phase: str, prefix: str, gang: bool = False) -> None:
    """All 4 bound in the rack that fits, although the scheduler prefers the other for a first Pod."""
    with scene(cp, hook, phase, FITS, prefix) as s:
        sub = submit(cp, job(s, "train"))
        assert sub.admitted, sub.error
        assert not [w for w in sub.warnings if "colocation-risk" in w], sub.warnings
        template = s.http.get("batch/v1", "Job", "train", s.namespace)["spec"]["template"]
        assert template["spec"]["schedulingGates"] == [{"name": GATE}]
        assert json.loads(template["metadata"]["annotations"][GATE])["gang"] == f"{s.namespace}/train"
        v = all_bound(s.http, s.namespace, f"{JOB_NAME_LABEL}=train", WORKERS)
        assert racks(s, v.bound.values()) == {s.node("a")}
        assert_in_rack(s, "train", s.node("a"))
        if gang:
            assert_gang(s, "train")


def no_fit(cp: SchedulingControlPlane, hook: Any, phase: str, prefix: str, gang: bool = False) -> None:
    """None bound while no rack has room (all gated, WaitingForDomain), all 4 in one rack once one has."""
    with scene(cp, hook, phase, RACK_BUSY, prefix) as s:
        assert submit(cp, job(s, "train")).admitted
        all_gated_and_said(s, "train")
        assert read_verdict(s.http, s.namespace, f"{JOB_NAME_LABEL}=train").bound == {}
        s.release("a0")  # the other tenant's Pod ends: rack a has 4 free nodes
        v = all_bound(s.http, s.namespace, f"{JOB_NAME_LABEL}=train", WORKERS)
        assert racks(s, v.bound.values()) == {s.node("a")}
        if gang:
            assert_gang(s, "train")


def two_gangs(cp: SchedulingControlPlane, hook: Any, phase: str, prefix: str, gang: bool = False) -> None:
    """Two gangs at once: one bound whole in rack a, the other none; the second whole in rack a once the first is
    deleted."""
    with scene(cp, hook, phase, FITS, prefix) as s:
        assert submit(cp, job(s, "first")).admitted and submit(cp, job(s, "second")).admitted

        def one_whole() -> tuple[str, str] | None:
            bound = {n: read_verdict(s.http, s.namespace, f"{JOB_NAME_LABEL}={n}").bound for n in ("first", "second")}
            whole = [n for n, b in bound.items() if len(b) == WORKERS]
            return (whole[0], "second" if whole[0] == "first" else "first") if whole else None

        started, other = wait_until(one_whole, timeout=60, what="one gang bound whole")
        all_gated_and_said(s, other)
        assert read_verdict(s.http, s.namespace, f"{JOB_NAME_LABEL}={other}").bound == {}
        v = read_verdict(s.http, s.namespace, f"{JOB_NAME_LABEL}={started}")
        assert racks(s, v.bound.values()) == {s.node("a")}
        s.http.delete({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": started, "namespace": s.namespace}},
                      propagation="Background")
        cp.force_delete_pods(s.namespace, f"{JOB_NAME_LABEL}={started}")
        v = all_bound(s.http, s.namespace, f"{JOB_NAME_LABEL}={other}", WORKERS)
        assert racks(s, v.bound.values()) == {s.node("a")}
        if gang:
            assert_gang(s, other)


def fail_pod(s: Scene, name: str) -> None:
    """The worker's container exits 1 (written as the kubelet would: there is none)."""
    s.http.patch({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": s.namespace}},
                 {"status": {"phase": "Failed", "containerStatuses": [
                     {"name": "worker", "image": "x", "imageID": "", "ready": False, "restartCount": 0,
                      "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}},
                 kind="strategic", subresource="status")


def replacement(cp: SchedulingControlPlane, hook: Any, phase: str, prefix: str, gang: bool = False) -> None:
    """A failed worker's replacement (the Job's backoff, about 10 s) is bound in its gang's rack."""
    with scene(cp, hook, phase, FITS, prefix) as s:
        assert submit(cp, job(s, "train")).admitted
        v = all_bound(s.http, s.namespace, f"{JOB_NAME_LABEL}=train", WORKERS)
        fail_pod(s, sorted(v.bound)[0])

        def replaced() -> dict | None:
            new = [p for p in pods_of(s, "train") if p["metadata"]["name"] not in v.bound and p["spec"].get("nodeName")]
            return new[0] if new else None

        pod = wait_until(replaced, timeout=60, what="the replacement Pod bound")
        assert racks(s, [pod["spec"]["nodeName"]]) == {s.node("a")}
        assert pod["spec"]["nodeSelector"][RACK_LABEL] == s.node("a")
        if gang:
            assert pod["spec"].get("schedulingGroup") == {"podGroupName": "train-gang"}


def generate_name(cp: SchedulingControlPlane, hook: Any, phase: str, prefix: str, gang: bool = False) -> None:
    """A Job with only ``generateName`` (as pipelines create them) gets its name, its gang and its rack."""
    with scene(cp, hook, phase, FITS, prefix) as s:
        manifest = job(s, "unused")
        del manifest["metadata"]["name"]
        manifest["metadata"]["generateName"] = "train-"
        done = kubectl(cp, "create", "-o", "name", "-f", "-", stdin=yaml.safe_dump(manifest))
        assert done.returncode == 0, done.stderr
        name = done.stdout.strip().rpartition("/")[2]
        assert name.startswith("train-") and len(name) > len("train-"), done.stdout
        template = s.http.get("batch/v1", "Job", name, s.namespace)["spec"]["template"]
        assert json.loads(template["metadata"]["annotations"][GATE])["gang"] == f"{s.namespace}/{name}"
        v = all_bound(s.http, s.namespace, f"{JOB_NAME_LABEL}={name}", WORKERS)
        assert racks(s, v.bound.values()) == {s.node("a")}
        assert_in_rack(s, name, s.node("a"))
        if gang:
            assert_gang(s, name)


def hand_placed(s: Scene, name: str, rack: str) -> list[dict]:
    """The Job as trainadmit stores it, with the rack written by hand and no gate: what a user who knew the free
    rack would submit (created in a namespace trainadmit exempts, so no webhook changes it), with a copy of its
    PodGroup where the cluster gangs it."""
    stored = s.http.get("batch/v1", "Job", "train", s.namespace)
    template = stored["spec"]["template"]
    template["spec"].pop("schedulingGates", None)
    template["spec"]["nodeSelector"][RACK_LABEL] = rack
    template["metadata"].get("annotations", {}).pop(GATE, None)
    for key in ("controller-uid", "batch.kubernetes.io/controller-uid", "job-name", JOB_NAME_LABEL):
        template["metadata"].get("labels", {}).pop(key, None)
    template["spec"].pop("priorityClassName", None)
    docs: list[dict] = []
    group = (template["spec"].get("schedulingGroup") or {}).get("podGroupName")
    if group:
        spec = s.http.get(PODGROUPS, "PodGroup", group, s.namespace)["spec"]
        template["spec"]["schedulingGroup"] = {"podGroupName": f"{name}-gang"}
        docs.append({"apiVersion": PODGROUPS, "kind": "PodGroup",
                     "metadata": {"name": f"{name}-gang", "namespace": BLOCKER_NS}, "spec": spec})
    spec = {k: stored["spec"][k] for k in ("parallelism", "completions", "completionMode")}
    return [*docs, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": BLOCKER_NS},
                    "spec": {**spec, "template": template}}]


def time_to_bound(cp: SchedulingControlPlane, hook: Any, phase: str, prefix: str, gang: bool = False) -> None:
    """``kubectl create`` until all 4 bound, with trainadmit (webhooks, the gate, the ungater, the cluster's gang) and
    for the same Job placed by hand, in the same run; printed (``-s``) and held within 1.5x or +2 s."""
    with scene(cp, hook, phase, FITS, prefix) as s:
        t0 = time.monotonic()
        assert submit(cp, job(s, "train")).admitted
        all_bound(s.http, s.namespace, f"{JOB_NAME_LABEL}=train", WORKERS, timeout=60)
        with_gate = time.monotonic() - t0
        if gang:
            assert_gang(s, "train")
        hand = hand_placed(s, "hand", s.node("a"))
        s.http.delete({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": s.namespace}},
                      propagation="Background")
        cp.force_delete_pods(s.namespace)
        wait_until(lambda: not s.http.list("v1", "Pod", s.namespace)["items"], timeout=30, what="the Pods gone")
        try:
            t0 = time.monotonic()
            done = kubectl(cp, "create", "-f", "-", stdin=yaml.safe_dump_all(hand))
            assert done.returncode == 0, done.stderr
            all_bound(s.http, BLOCKER_NS, f"{JOB_NAME_LABEL}=hand", WORKERS, timeout=60)
            by_hand = time.monotonic() - t0
        finally:
            for doc in reversed(hand):
                s.http.delete(doc, propagation="Background")
            with contextlib.suppress(Exception):
                cp.force_delete_pods(BLOCKER_NS, f"{JOB_NAME_LABEL}=hand")
        print(f"time to all 4 bound: trainadmit (gate) {with_gate:.2f} s, by hand {by_hand:.2f} s")
        assert with_gate <= max(1.5 * by_hand, by_hand + 2.0), (with_gate, by_hand)
