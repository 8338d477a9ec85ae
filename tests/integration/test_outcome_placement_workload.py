"""Outcome tier: the placement gate on a 1.36.2 control plane with the Workload API and native gang scheduling
(``GenericWorkload``, ``GangScheduling``, ``scheduling.k8s.io/v1alpha2``) and **no** ``TopologyAwareWorkloadScheduling``
(nor ``WorkloadWithJob``): a cluster whose gang scheduler holds the gang whole but cannot hold its rack. The bundled
policies as shipped, with the gates this cluster runs declared in ``Platform.spec.featureGates`` as a platform would
(``kube_fixtures.WORKLOAD_PHASES``); trainadmit as deploy/ runs it (``serve --cluster-live --reconcile`` as its
ServiceAccount, deploy/'s fence of its Pod writes installed).

On main, on such a cluster, the gang bound whole but split across racks, also while no rack had room, and a
``generateName`` Job was refused (issue 29). The outcomes are the stock cluster's (``test_outcome_placement.py``,
the same bodies: ``support/placement_outcome.py``), plus the gang the cluster forms: the reconciler's PodGroup of 4,
every Pod in it.
"""

from __future__ import annotations

import pytest
from support import placement_outcome as outcome
from support.kube_fixtures import DEPLOY, WORKLOAD_FEATURES, WORKLOAD_PHASES, trainadmit_on

# one control plane at a time (each module of this group starts its own)
pytestmark = pytest.mark.xdist_group("outcome-placement")

PHASE = "bundled"


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    with trainadmit_on(WORKLOAD_FEATURES, WORKLOAD_PHASES, PHASE, tmp_path_factory.mktemp("trainadmit-workload"),
                       manifests=(DEPLOY / "fence-pods.yaml",)) as found:
        yield found


def test_a_gang_starts_whole_and_ganged_in_the_rack_that_fits(workload):
    outcome.fits(*workload, PHASE, "wfit", gang=True)


def test_no_pod_starts_while_no_rack_has_room_and_the_whole_gang_in_one_rack_once_one_has(workload):
    outcome.no_fit(*workload, PHASE, "wbusy", gang=True)


def test_two_gangs_at_once_one_starts_whole_the_other_none_then_whole_once_the_first_is_deleted(workload):
    outcome.two_gangs(*workload, PHASE, "wtwo", gang=True)


def test_a_generate_name_job_gets_its_gang_and_its_rack(workload):
    outcome.generate_name(*workload, PHASE, "wgen", gang=True)


def test_a_failed_workers_replacement_lands_in_its_gangs_rack(workload):
    outcome.replacement(*workload, PHASE, "wrepl", gang=True)


def test_time_to_all_bound_is_close_to_a_hand_placed_job(workload):
    """The gate, the ungater and the reconciler's PodGroup against the same Job and PodGroup placed by hand, in the
    same run (printed with ``-s``): within 1.5x or +2 s."""
    outcome.time_to_bound(*workload, PHASE, "wtime", gang=True)
