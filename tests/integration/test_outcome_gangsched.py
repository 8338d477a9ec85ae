"""Outcome tier: the placement gate under a gang scheduler (scheduler-plugins coscheduling, Volcano), on Kubernetes
1.36.2 with those backends' CRDs installed (PodGroup ``scheduling.x-k8s.io`` and ``scheduling.volcano.sh``:
tests/fixtures/operators/*/crds) and trainadmit run as deploy/ runs it (``serve --cluster-live --reconcile`` as its
ServiceAccount, the fence of its Pod writes installed).

Under ``topologyMethod: auto`` these backends used to get required pod affinity (the first worker chooses the rack
alone). Now the gang backend still forms the gang (coscheduling's PodGroup of minMember 4 from trainadmit's
reconciler; Volcano's from the Job's ``group-min-member``) and the placement gate chooses the rack: the Job
controller makes the Pods gated, the ungater writes ONE rack with room for the whole gang into all of them and lifts
the gate; with no room none is released. No coscheduling or Volcano scheduler binary exists here, so the Pods, which
name those schedulers, are not bound by anyone after the release: binding by the gang scheduler is not shown (its
handling of gated Pods is documented, with sources, in docs/scheduling.md). The racks: a with 4 free 8-GPU nodes,
b with 3 (``support.outcome.FITS``); busy: 3 + 3 (``RACK_BUSY``).
"""

from __future__ import annotations

import json

import pytest
from support.controlplane import ClusterFeatures, wait_until
from support.kube_fixtures import DEPLOY, OPERATOR_CRDS, trainadmit_on
from support.outcome import FITS, JOB_NAME_LABEL, LEVEL, RACK_BUSY, Scene, gpu_job, scene, submit
from support.policies import BACKENDS

pytestmark = pytest.mark.xdist_group("outcome-gangsched")

WORKERS = 4
RACK_LABEL = "topology.kubernetes.io/rack"
GATE = "trainadmit.io/placement"
STOCK = ClusterFeatures("stock")  # no feature gates: the gang scheduler is the only gang mechanism
# Volcano's queue: the Queue "test" of Volcano's examples/queue.yaml (installed with the CRDs; the references rules
# refuse a workload whose queue does not exist)
VOLCANO_QUEUE = OPERATOR_CRDS / "volcano" / "examples" / "queue.yaml"
PHASES: dict[str, dict] = {"coscheduling": BACKENDS["coscheduling"],
                           "volcano": {"gang": {**BACKENDS["volcano"]["gang"], "queue": "test"}}}
CRDS = (OPERATOR_CRDS / "scheduler-plugins" / "crds", OPERATOR_CRDS / "volcano" / "crds")
SCHEDULER = {"coscheduling": "scheduler-plugins-scheduler", "volcano": "volcano"}


@pytest.fixture(scope="module")
def gangsched(tmp_path_factory):
    with trainadmit_on(STOCK, PHASES, "coscheduling", tmp_path_factory.mktemp("trainadmit-gangsched"), crds=CRDS,
                       manifests=(DEPLOY / "fence-pods.yaml", VOLCANO_QUEUE)) as found:
        yield found


def _pods(s: Scene, name: str) -> list[dict]:
    pods = s.http.list("v1", "Pod", s.namespace, labelSelector=f"{JOB_NAME_LABEL}={name}")["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def _gated(pod: dict) -> bool:
    return any(g.get("name") == GATE for g in pod["spec"].get("schedulingGates") or [])


def _released(s: Scene, name: str) -> list[dict] | None:
    """All the gang's Pods, once every one of them has been released (gate lifted), else None."""
    pods = _pods(s, name)
    return pods if len(pods) == WORKERS and not any(_gated(p) for p in pods) else None


def _admitted_gated(s: Scene, backend: str, name: str) -> None:
    """Admitted without the pod-affinity risk; the stored Job's template has the gate and the backend's keys."""
    job = s.http.get("batch/v1", "Job", name, s.namespace)
    template = job["spec"]["template"]
    assert template["spec"]["schedulingGates"] == [{"name": GATE}]
    assert json.loads(template["metadata"]["annotations"][GATE])["size"] == WORKERS
    assert "podAffinity" not in (template["spec"].get("affinity") or {})
    assert template["spec"]["schedulerName"] == SCHEDULER[backend]
    if backend == "coscheduling":
        assert template["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == name
    else:
        assert job["metadata"]["annotations"]["scheduling.volcano.sh/group-min-member"] == str(WORKERS)


def _one_rack_in_all(s: Scene, name: str) -> str:
    """The ungater released the whole gang into one rack: each Pod's node selector and domain annotation name it."""
    pods = wait_until(lambda: _released(s, name), timeout=60, what=f"the {WORKERS} Pods of {name} released")
    racks = {p["spec"]["nodeSelector"][RACK_LABEL] for p in pods}
    assert racks == {p["metadata"]["annotations"][f"{GATE}-domain"] for p in pods}
    [rack] = racks
    assert all(not p["spec"].get("nodeName") for p in pods)  # no gang scheduler here binds them
    return rack


@pytest.mark.parametrize("backend", ["coscheduling", "volcano"])
def test_the_gangs_pods_are_made_gated_and_released_together_into_the_one_rack_with_room(gangsched, backend):
    cp, hook = gangsched
    with scene(cp, hook, backend, FITS, f"gs{backend[:4]}") as s:
        sub = submit(cp, gpu_job("train", s.namespace, WORKERS, annotations={"trainadmit.io/topology": LEVEL}))
        assert sub.admitted, sub.error
        assert not [w for w in sub.warnings if "colocation-risk" in w], sub.warnings
        _admitted_gated(s, backend, "train")
        if backend == "coscheduling":  # the gang is coscheduling's: trainadmit's reconciler made its PodGroup
            pg = wait_until(lambda: cp.http.get_or_none("scheduling.x-k8s.io/v1alpha1", "PodGroup", "train",
                                                        s.namespace), timeout=30, what="the coscheduling PodGroup")
            assert pg["spec"]["minMember"] == WORKERS
        # rack a is the only rack with room for all 4 (rack b, which the default scheduler would prefer, has 3)
        assert _one_rack_in_all(s, "train") == s.node("a")


def test_with_no_rack_with_room_none_is_released_until_one_has(gangsched):
    cp, hook = gangsched
    with scene(cp, hook, "coscheduling", RACK_BUSY, "gsbusy") as s:
        assert submit(cp, gpu_job("train", s.namespace, WORKERS,
                                  annotations={"trainadmit.io/topology": LEVEL})).admitted

        def waiting() -> bool:
            pods = _pods(s, "train")
            names = {p["metadata"]["name"] for p in pods}
            said = any(e.get("reason") == "WaitingForDomain" and e["involvedObject"]["name"] in names
                       for e in s.http.list("v1", "Event", s.namespace)["items"])
            return len(pods) == WORKERS and said

        wait_until(waiting, timeout=60, what="4 Pods and the ungater's WaitingForDomain Event")
        pods = _pods(s, "train")  # it decided (the Event) and released none: all gated, no domain written
        assert all(_gated(p) for p in pods), [p["spec"].get("schedulingGates") for p in pods]
        assert not any(RACK_LABEL in (p["spec"].get("nodeSelector") or {}) for p in pods)
        s.release("a0")  # the other tenant's Pod ends: rack a has 4 free nodes
        assert _one_rack_in_all(s, "train") == s.node("a")
