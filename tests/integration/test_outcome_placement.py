"""Outcome tier: the placement gate on a stock Kubernetes 1.36.2 control plane (no feature gates: no gang scheduler,
what managed clusters give), with the bundled policies as shipped and trainadmit run as deploy/ runs it
(``serve --cluster-live --reconcile`` as its ServiceAccount).

The documentation's Indexed Job asks for 4 whole 8-GPU nodes in one rack; the racks have 4 and 3 free nodes and the
3-node rack holds the workers' image, so the scheduler prefers it for a first Pod (on main every such Job bound across
both racks, and two at once left one of them 3 of 4 bound holding 24 GPUs). The mutating webhook gates the Pods
(``trainadmit.io/placement``); the ungater writes one rack with room for the whole gang into all of them and lifts
the gate together. The outcomes' bodies are shared with the cluster that has the Workload API + GangScheduling and no
topology gate (``support/placement_outcome.py``, ``test_outcome_placement_workload.py``); a crash or a lost Lease in
the middle of a release is ``test_placement_takeover.py``.
"""

from __future__ import annotations

import pytest
from support import placement_outcome as outcome
from support.controlplane import ClusterFeatures
from support.kube_fixtures import (
    DEPLOY,
    trainadmit_on,
)
from support.outcome import (
    FITS,
    JOB_NAME_LABEL,
    decided,
    scene,
    submit,
)

pytestmark = pytest.mark.xdist_group("outcome-placement")

WORKERS = outcome.WORKERS
GATE = outcome.GATE
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


def test_a_gang_starts_whole_in_the_rack_that_fits_although_the_scheduler_prefers_the_other(stock):
    outcome.fits(*stock, "bundled", "pfit")


def test_the_release_passes_the_fence_of_the_servers_pod_writes(stock):
    """With deploy/'s fence installed (the server's account may only lift its gate, add node selector keys and set
    its domain annotation), the ungater still releases a gang whole into one rack."""
    cp, hook = stock
    assert cp.http.get_or_none("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy",
                               "trainadmit-fence-pods") is not None
    with scene(cp, hook, "bundled", FITS, "pfence") as s:
        assert submit(cp, outcome.job(s, "train")).admitted
        v = outcome.all_bound(s.http, s.namespace, f"{JOB_NAME_LABEL}=train", WORKERS)
        assert outcome.racks(s, v.bound.values()) == {s.node("a")}


def test_no_pod_starts_while_no_rack_has_room_and_all_in_one_rack_once_one_has(stock):
    outcome.no_fit(*stock, "bundled", "pbusy")


def test_two_gangs_at_once_one_starts_whole_the_other_none_then_whole_once_the_first_is_deleted(stock):
    outcome.two_gangs(*stock, "bundled", "ptwo")


def test_a_failed_workers_replacement_lands_in_its_gangs_rack(stock):
    outcome.replacement(*stock, "bundled", "prepl")


def test_time_to_all_bound_is_close_to_a_hand_placed_job(stock):
    """Created with ``kubectl create`` until all 4 bound, with trainadmit (webhooks, the gate, the ungater) and for
    the same Job placed by hand, in the same run; the figure is printed (``-s``) and held within 1.5x or +2 s."""
    outcome.time_to_bound(*stock, "bundled", "ptime")


def test_the_decision_check_predicts_is_what_is_stored(stock):
    """The gate and its annotation as ``check`` predicts them for the user's Job are the stored template's."""
    cp, hook = stock
    with scene(cp, hook, "bundled", FITS, "ppred") as s:
        from trainadmit.engine import Request, decide

        job = outcome.job(s, "train")
        assert submit(cp, job).admitted
        stored = s.http.get("batch/v1", "Job", "train", s.namespace)["spec"]["template"]
        predicted = decide(s.policy, Request(job)).mutated["spec"]["template"]
        assert predicted["spec"]["schedulingGates"] == stored["spec"]["schedulingGates"]
        assert predicted["metadata"]["annotations"][GATE] == stored["metadata"]["annotations"][GATE]
        decided(s.http, s.namespace, f"{JOB_NAME_LABEL}=train", WORKERS)
