"""Outcome tier: the gangs trainadmit admits, as the real Job controller and kube-scheduler treat them.

Every test submits the Kubernetes documentation's Indexed Job (4 workers of 8 GPUs, one rack) with
``kubectl create`` to a 1.36 control plane running native gang scheduling (GenericWorkload,
GangScheduling, TopologyAwareWorkloadScheduling, WorkloadWithJob), where trainadmit runs as deploy/
runs it, and reads back what the Job controller made and the scheduler did. The nodes are the bundled
h100-ib pool's, in racks of 4 and 3 nodes; the 3-node rack holds the workers' image, so the
scheduler scores its nodes higher and a gang's first worker prefers the rack that is too small.

The outcome every admitted gang must have, whatever method trainadmit chose: all its Pods bound, on
the pool's nodes, in one rack when the method colocates; or none bound while no rack (no set of pool
nodes, when it does not colocate) has room. Never a partial gang holding GPUs, never a gang that waits
while a domain that fits it is free. Where the cluster cannot guarantee colocation, the submission
says so (a warning the user sees in kubectl's output).
"""

from __future__ import annotations

import json

import pytest
from support.controlplane import wait_until
from support.kube_fixtures import OUTCOME
from support.outcome import (
    CORDONED,
    FITS,
    JOB_NAME_LABEL,
    LEVEL,
    NOT_READY,
    POOL,
    RACK_BUSY,
    Scene,
    Verdict,
    all_bound,
    decided,
    gpu_job,
    node_labels,
    scene,
    submit,
)

pytestmark = OUTCOME

WORKERS = 4
RACK_LABEL = "topology.kubernetes.io/rack"
COLOCATION_RISK = "[topology.colocation-risk]"
PLACEMENT_GATE = "trainadmit.io/placement"


def judge(s: Scene, v: Verdict, workers: int, colocated: bool) -> str:
    """"all" or "none", or an assertion error naming what went wrong: a partial gang, a node outside
    the pool, a gang split across racks although colocated, none bound although a domain had room."""
    assert len(v.bound) in (0, workers), f"partial gang: {len(v.bound)} of {workers} bound ({v.bound}), the rest " \
                                         f"unschedulable: {sorted(set(v.unschedulable.values()))}"
    if v.bound:
        nodes = set(v.bound.values())
        labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in s.http.list("v1", "Node")["items"]
                  if n["metadata"]["name"] in nodes}
        selector = s.policy.pools[POOL].nodeSelector
        assert all(selector.items() <= lab.items() for lab in labels.values()), "a worker off the pool's nodes"
        racks = {lab[RACK_LABEL] for lab in labels.values()}
        assert not colocated or len(racks) == 1, f"a colocated gang spread over racks {sorted(racks)}"
        return "all"
    free = s.free_by_domain(colocated)
    assert max(free.values(), default=0) < workers, \
        f"none of {workers} bound although {'a rack' if colocated else 'the pool'} had room (free nodes: {free}): " \
        f"{sorted(set(v.unschedulable.values()))}"
    return "none"


@pytest.fixture
def cp(outcome_cluster):
    return outcome_cluster.cp


@pytest.fixture
def hook(outcome_cluster):
    return outcome_cluster.webhook


def _submit_and_decide(cp, s: Scene, workers: int = WORKERS, **job_kw):
    job = gpu_job("train", s.namespace, workers, annotations={"trainadmit.io/topology": LEVEL, **job_kw.pop(
        "annotations", {})}, **job_kw)
    sub = submit(cp, job)
    if not sub.admitted:
        return sub, None
    return sub, decided(s.http, s.namespace, f"{JOB_NAME_LABEL}=train", workers)


# ---- the PodGroup's topology constraint (TopologyAwareWorkloadScheduling declared) --------------------

def test_a_constrained_gang_starts_whole_in_the_rack_that_fits_and_its_pods_are_left_alone(cp, hook):
    before = cp.webhook_calls()
    with scene(cp, hook, "topology-constraint", FITS, "fit") as s:
        sub, v = _submit_and_decide(cp, s)
        assert sub.admitted, sub.error
        assert judge(s, v, WORKERS, colocated=True) == "all"
        assert set(node_labels(s.http, set(v.bound.values()), RACK_LABEL).values()) == {s.node("a")}
        pods = s.http.list("v1", "Pod", s.namespace, labelSelector=f"{JOB_NAME_LABEL}=train")["items"]
        job = s.http.get("batch/v1", "Job", "train", s.namespace)
        template = job["spec"]["template"]["spec"]
        for pod in pods:  # made by the Job controller from the decided template, and not decided again
            assert pod["spec"]["schedulingGroup"] == template["schedulingGroup"] == {"podGroupName": "train-gang"}
            env = pod["spec"]["containers"][0]["env"]  # the Job controller adds JOB_COMPLETION_INDEX
            assert [e for e in env if e["name"] != "JOB_COMPLETION_INDEX"] == template["containers"][0]["env"]
        after = cp.webhook_calls()
        assert after["mutate.trainadmit.io"] - before.get("mutate.trainadmit.io", 0) == 1  # the Job, not its Pods
        decisions = [json.loads(line) for line in hook.server.log.read_text().splitlines() if '"decision"' in line]
        assert [d["kind"] for d in decisions if d.get("namespace") == s.namespace and d["operation"] == "CREATE"] == [
            "Job", "Job"]  # mutate and validate; the apiserver never sent the Job controller's Pods


def test_a_constrained_gang_binds_none_while_no_rack_has_room_and_all_once_one_has(cp, hook):
    with scene(cp, hook, "topology-constraint", RACK_BUSY, "busy") as s:
        sub, v = _submit_and_decide(cp, s)
        assert sub.admitted, sub.error
        assert judge(s, v, WORKERS, colocated=True) == "none"
        s.release("a0")
        v = all_bound(s.http, s.namespace, f"{JOB_NAME_LABEL}=train", WORKERS)
        assert judge(s, v, WORKERS, colocated=True) == "all"
        assert set(node_labels(s.http, set(v.bound.values()), RACK_LABEL).values()) == {s.node("a")}


def test_a_constrained_gang_waits_for_a_cordoned_node_as_warned_and_starts_when_it_returns(cp, hook):
    with scene(cp, hook, "topology-constraint", CORDONED, "cord") as s:
        sub, v = _submit_and_decide(cp, s)
        assert sub.admitted, sub.error
        assert any("[capacity.cordoned-nodes]" in w and "the gang would wait" in w for w in sub.warnings), sub.warnings
        assert judge(s, v, WORKERS, colocated=True) == "none"
        s.uncordon("a1")
        v = all_bound(s.http, s.namespace, f"{JOB_NAME_LABEL}=train", WORKERS)
        assert judge(s, v, WORKERS, colocated=True) == "all"


def test_a_gang_no_ready_rack_can_hold_is_refused_naming_the_node(cp, hook):
    with scene(cp, hook, "topology-constraint", NOT_READY, "nrdy") as s:
        sub, _ = _submit_and_decide(cp, s)
        assert not sub.admitted
        assert "[capacity.unusable-nodes]" in sub.error and s.node("a1") in sub.error, sub.error
        assert s.http.list("v1", "Pod", s.namespace)["items"] == []


# ---- no topology gate declared: what trainadmit chooses instead -----------------------------------------

def _gated_then_placed(cp, s: Scene, name: str = "train", workers: int = WORKERS, **job_kw):
    """Submit; the placement gate holds the Pods until the ungater releases them into one rack: wait for all bound
    when a rack has room, else for its WaitingForDomain Event (none bound). Returns the submission and the verdict."""
    job = gpu_job(name, s.namespace, workers, annotations={"trainadmit.io/topology": LEVEL, **job_kw.pop(
        "annotations", {})}, **job_kw)
    sub = submit(cp, job)
    assert sub.admitted, sub.error
    assert s.http.get("batch/v1", "Job", name, s.namespace)["spec"]["template"]["spec"]["schedulingGates"] == [
        {"name": PLACEMENT_GATE}]
    selector = f"{JOB_NAME_LABEL}={name}"
    if max(s.free_by_domain(True).values(), default=0) >= workers:
        return sub, all_bound(s.http, s.namespace, selector, workers)

    def said() -> bool:
        pods = {p["metadata"]["name"] for p in s.http.list("v1", "Pod", s.namespace, labelSelector=selector)["items"]}
        return len(pods) >= workers and any(e.get("reason") == "WaitingForDomain" and e["involvedObject"]["name"] in pods
                                            for e in s.http.list("v1", "Event", s.namespace)["items"])

    wait_until(said, timeout=60, what="the gang's Pods and a WaitingForDomain Event")
    return sub, decided(s.http, s.namespace, selector, workers)


@pytest.mark.parametrize("shape", [FITS, RACK_BUSY, CORDONED], ids=lambda sh: sh.name.replace(" ", "-"))
def test_without_the_topology_gate_the_placement_gate_starts_the_gang_whole_in_one_rack_once_one_has_room(
        cp, hook, shape):
    """Without TopologyAwareWorkloadScheduling the PodGroup cannot carry the rack: required pod affinity with a native
    gang never starts when the first worker's best node is in the smaller rack (0 of 4 bound for good, rack a free),
    and no colocation let the workers span both racks. The placement gate chooses rack a for all of them, waits
    (none bound) while no rack has room, and is not risked (no topology.colocation-risk)."""
    with scene(cp, hook, "no-topology-gate", shape, f"ng{len(shape.held)}{len(shape.cordoned)}") as s:
        sub, v = _gated_then_placed(cp, s)
        assert not [w for w in sub.warnings if COLOCATION_RISK in w], sub.warnings
        if judge(s, v, WORKERS, colocated=True) == "none":
            if shape.held:
                s.release(shape.held[0])
            else:
                s.uncordon(shape.cordoned[0])
            v = all_bound(s.http, s.namespace, f"{JOB_NAME_LABEL}=train", WORKERS)
        assert judge(s, v, WORKERS, colocated=True) == "all"
        assert set(node_labels(s.http, set(v.bound.values()), RACK_LABEL).values()) == {s.node("a")}


def test_pod_affinity_the_platform_chose_is_warned_and_the_risk_is_real(cp, hook):
    """topologyMethod: podAffinity, set by the platform: kept, and the submission says what may happen;
    the test also pins the measured reason for the warning (the gang waits while rack a is free)."""
    with scene(cp, hook, "pod-affinity", FITS, "paff") as s:
        sub, v = _submit_and_decide(cp, s)
        assert sub.admitted, sub.error
        risk = [w for w in sub.warnings if COLOCATION_RISK in w]
        assert risk and "never start" in risk[0], sub.warnings
        assert v.bound == {} and s.free_by_domain(True)[s.node("a")] == WORKERS


def test_workers_without_a_gang_do_not_start_partially_in_a_rack_too_small(cp, hook):
    """No gang (``trainadmit.io/gang: "false"``, completions above parallelism, so the Job controller makes
    no Workload either): required pod affinity let 3 workers bind in the small rack and the 4th wait for
    good, holding 24 GPUs."""
    with scene(cp, hook, "no-topology-gate", FITS, "nogang") as s:
        _, v = _gated_then_placed(cp, s, completions=WORKERS + 1, annotations={"trainadmit.io/gang": "false"})
        assert judge(s, v, WORKERS, colocated=True) == "all"


def test_native_job_scheduling_on_136_is_left_out_and_said_why_and_the_job_controllers_gang_binds_whole(cp, hook):
    """``nativeMode: job-scheduling`` writes Job.spec.scheduling, which exists from 1.37 only: on 1.36 trainadmit
    writes none (the apiserver would drop it) and admits the Job under gang.unavailable naming the setting; its
    workers all bind here, in one rack (WorkloadWithJob is on, so the Job controller may gang them itself; with no gang
    of trainadmit's the placement gate chooses the rack)."""
    with scene(cp, hook, "job-scheduling", FITS, "jobsch") as s:
        sub, v = _gated_then_placed(cp, s)
        assert any("[gang.unavailable]" in w and "nativeMode job-scheduling writes Job.spec.scheduling" in w
                   for w in sub.warnings), sub.warnings
        job = s.http.get("batch/v1", "Job", "train", s.namespace)
        assert "schedulingGroup" not in job["spec"]["template"]["spec"]
        assert json.loads(job["metadata"]["annotations"]["trainadmit.io/applied"])["gang"] == "none"
        assert judge(s, v, WORKERS, colocated=True) == "all"


def test_the_bundled_default_unchanged_gangs_and_binds_whole_on_the_gated_cluster(cp, hook):
    """policies/ as shipped (kubernetesVersion, gang.backend and nativeMode auto, no gates declared) on this 1.36
    control plane with the Workload API: the native gang in pod-group mode (the reconciler's PodGroup), told that
    GangScheduling and the rack constraint are not declared; all workers bound."""
    with scene(cp, hook, "bundled", FITS, "bundled") as s:
        sub, v = _gated_then_placed(cp, s)
        job = s.http.get("batch/v1", "Job", "train", s.namespace)
        assert job["spec"]["template"]["spec"]["schedulingGroup"] == {"podGroupName": "train-gang"}
        assert json.loads(job["metadata"]["annotations"]["trainadmit.io/applied"])["gang"] == "native/pod-group"
        assert not [w for w in sub.warnings if "[gang.unavailable]" in w], sub.warnings
        assert any("[gang.cluster-support]" in w for w in sub.warnings), sub.warnings
        assert judge(s, v, WORKERS, colocated=True) == "all"
        group = s.http.get("scheduling.k8s.io/v1alpha2", "PodGroup", "train-gang", s.namespace)
        assert group["spec"]["schedulingPolicy"]["gang"]["minCount"] == WORKERS
