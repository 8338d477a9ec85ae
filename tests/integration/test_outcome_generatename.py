"""Outcome tier: a ``generateName`` gang Job, as pipelines (Argo, Kubeflow Pipelines, ``kubectl create`` scripts)
submit it, gets its name, its gang and its PodGroup on the clusters users have, and starts as fast as the same Job
placed by hand.

Two control planes of the real kube-apiserver, Job controller and kube-scheduler 1.36.2, each with trainadmit as
deploy/ runs it (``serve --cluster-live --reconcile`` as deploy/'s ServiceAccount, deploy/'s webhook
configurations), one at a time:

- the Workload API with native gang scheduling (``GenericWorkload``, ``GangScheduling``, ``scheduling.k8s.io/
  v1alpha2``; no topology gate, no ``WorkloadWithJob``) and the bundled policies as shipped (auto: the native
  PodGroup, which the reconciler creates from the Job's watch event);
- a stock cluster (no gates) with the scheduler-plugins PodGroup CRD: auto picks coscheduling; no
  scheduler-plugins scheduler runs here, so the policy names the default scheduler (``gang.schedulerName``) and
  the gang objects are checked, not their enforcement; the rack comes from the placement gate (until the gate
  reached coscheduling: from the pod affinity on the Job's name).

The Job is the Kubernetes documentation's Indexed Job (tests/fixtures/real-world) asking for 4 whole 8-GPU nodes
of the bundled h100-ib pool, with ``generateName: train-`` instead of a name. Before this change the mutating
webhook refused it (``gang.name-required``) on both.
"""

from __future__ import annotations

import contextlib
import copy
import re
import statistics
import time
from collections.abc import Iterator

import pytest
import yaml
from support.controlplane import ClusterFeatures, SchedulingControlPlane, wait_until
from support.kube_fixtures import (
    OPERATOR_CRDS,
    WORKLOAD_FEATURES,
    Webhook,
    trainadmit_on,
)
from support.outcome import JOB_NAME_LABEL, LEVEL, POOL, gpu_job, kubectl, read_verdict
from support.pool_nodes import create_nodes, delete_nodes, domains, wait_schedulable

from trainadmit.engine.naming import ALPHABET

# one control plane at a time (each module of this group starts its own): the outcome tier's group
pytestmark = pytest.mark.xdist_group("outcome-gang")

WORKERS = 4
RACK_LABEL = "topology.kubernetes.io/rack"
HAND_NS = "kube-public"  # the webhooks' namespaceSelector skips it: "by hand" means no trainadmit at all
WORKLOAD_API = WORKLOAD_FEATURES
STOCK = ClusterFeatures("stock")
PHASES = {"bundled": {}, "coscheduling-default-scheduler": {"gang": {"schedulerName": "default-scheduler"}}}
TRAINADMIT_KEYS = ("trainadmit.io/",)
JOB_SERVER_LABELS = ("controller-uid", "batch.kubernetes.io/controller-uid", "job-name", JOB_NAME_LABEL)


@contextlib.contextmanager
def racks(cp: SchedulingControlPlane, hook: Webhook, prefix: str) -> Iterator[str]:
    """Racks of 4 and 3 identical free nodes of the pool (the scheduler's ties go to rack a) and a namespace."""
    policy = load_served(hook)
    nodes = domains(prefix, LEVEL, (4, 3), outer={"zone": "zone-a"})
    namespace = f"team-{prefix}"
    try:
        create_nodes(cp.http, policy.pools[POOL], nodes)
        wait_schedulable(cp.http, [n.name for n in nodes])
        cp.ensure_namespace(namespace)
        yield namespace
    finally:
        for ns in (namespace, HAND_NS):
            for job in cp.http.list("batch/v1", "Job", ns)["items"]:
                cp.http.delete({"apiVersion": "batch/v1", "kind": "Job", "metadata": job["metadata"]},
                               propagation="Background")
            cp.force_delete_pods(ns)
        delete_nodes(cp.http, [n.name for n in nodes])
        cp.http.delete({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})


def load_served(hook: Webhook):
    from trainadmit.engine import load_policy

    return load_policy(hook.policy_dir)


def generate_name_job(namespace: str, topology: str = LEVEL) -> dict:
    job = gpu_job("unused", namespace, WORKERS, annotations={"trainadmit.io/topology": topology})
    del job["metadata"]["name"]
    job["metadata"]["generateName"] = "train-"
    return job


def create(cp: SchedulingControlPlane, docs: list[dict]) -> list[str]:
    """``kubectl create -o name`` of the documents, as a user runs it; the names the apiserver stored."""
    done = kubectl(cp, "create", "-o", "name", "-f", "-", stdin=yaml.safe_dump_all(docs))
    assert done.returncode == 0, done.stderr
    return [line.rsplit("/", 1)[-1] for line in done.stdout.split()]


def bound_whole(cp: SchedulingControlPlane, namespace: str, job: str, timeout: float = 60.0) -> dict[str, str]:
    """Pod -> node once all the Job's workers are bound (a partial gang fails at once)."""
    def whole() -> dict[str, str] | None:
        v = read_verdict(cp.http, namespace, f"{JOB_NAME_LABEL}={job}")
        assert not v.unschedulable, f"unschedulable: {v.unschedulable}; bound: {v.bound}"
        return v.bound if len(v.bound) == WORKERS else None

    return wait_until(whole, timeout=timeout, interval=0.02, what=f"all {WORKERS} workers of {job} bound")


def clean(cp: SchedulingControlPlane, namespace: str, job: str) -> None:
    cp.http.delete({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": job, "namespace": namespace}},
                   propagation="Background")
    cp.http.delete({"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
                    "metadata": {"name": f"{job}-gang", "namespace": namespace}})
    selector = f"{JOB_NAME_LABEL}={job}"
    cp.force_delete_pods(namespace, selector)
    wait_until(lambda: not cp.http.list("v1", "Pod", namespace, labelSelector=selector)["items"], timeout=120,
               what=f"{job}'s Pods gone")


def by_hand(stored: dict, podgroup: dict, rack: str, name: str) -> list[dict]:
    """The Job as trainadmit stored it and its PodGroup, written by hand in a namespace no webhook sees: the
    server's and trainadmit's bookkeeping removed, the gang renamed. A Pod scheduling gate of trainadmit's (its
    placement gate, which only its ungater lifts) is replaced by what a user placing it by hand writes: a
    nodeSelector on the rack trainadmit's gang went to."""
    job = copy.deepcopy(stored)
    template = job["spec"]["template"]
    gates = template["spec"].get("schedulingGates") or []
    ours = [g for g in gates if str(g.get("name", "")).startswith(TRAINADMIT_KEYS)]
    if ours:
        template["spec"]["schedulingGates"] = [g for g in gates if g not in ours] or None
        template["spec"].setdefault("nodeSelector", {})[RACK_LABEL] = rack
        if template["spec"]["schedulingGates"] is None:
            del template["spec"]["schedulingGates"]
    for meta in (job["metadata"], template.get("metadata") or {}):
        for key in ("labels", "annotations"):
            for k in [k for k in meta.get(key) or {} if k.startswith(TRAINADMIT_KEYS) or k in JOB_SERVER_LABELS]:
                del meta[key][k]
    job["metadata"] = {"name": name, "namespace": HAND_NS, "labels": job["metadata"].get("labels") or {}}
    job["spec"].pop("selector", None)
    job.pop("status", None)
    template["spec"]["schedulingGroup"] = {"podGroupName": f"{name}-gang"}
    group = {"apiVersion": podgroup["apiVersion"], "kind": "PodGroup",
             "metadata": {"name": f"{name}-gang", "namespace": HAND_NS}, "spec": podgroup["spec"]}
    return [group, job]


def racks_of(cp: SchedulingControlPlane, nodes: set[str]) -> set[str]:
    return {n["metadata"]["labels"].get(RACK_LABEL, "") for n in cp.http.list("v1", "Node")["items"]
            if n["metadata"]["name"] in nodes}


@pytest.fixture(scope="class")
def workload_api(tmp_path_factory):
    with trainadmit_on(WORKLOAD_API, PHASES, "bundled", tmp_path_factory.mktemp("trainadmit-workload-api")) \
            as found:
        yield found


@pytest.fixture(scope="class")
def stock(tmp_path_factory):
    with trainadmit_on(STOCK, PHASES, "coscheduling-default-scheduler", tmp_path_factory.mktemp("trainadmit-stock"),
                       (OPERATOR_CRDS / "scheduler-plugins" / "crds",)) as found:
        yield found


class TestWorkloadAPI:
    """1.36 with the Workload API and GangScheduling, the bundled policies as shipped (one control plane for the
    class, stopped after it)."""

    def test_a_generate_name_gang_job_gets_its_podgroup_and_starts_as_fast_as_one_placed_by_hand(self, workload_api):
        """Rounds alternate (trainadmit, by hand, ...) so that machine noise hits both alike; each times
        ``kubectl create`` to the 4th binding. The PodGroup comes from the Job's watch event (before, from the
        reconciler's next 5-second pass: 2.9 s against 0.3 s by hand)."""
        cp, hook = workload_api
        with racks(cp, hook, "gen") as namespace:
            times: dict[str, list[float]] = {"trainadmit": [], "hand": []}
            template: list = []  # the stored Job, its PodGroup, the rack its gang went to
            for round_ in range(6):
                mode = "trainadmit" if round_ % 2 == 0 else "hand"
                started = time.monotonic()
                if mode == "trainadmit":
                    [name] = create(cp, [generate_name_job(namespace)])
                    ns = namespace
                else:
                    [_, name] = create(cp, by_hand(*template, name=f"hand-{round_}"))
                    ns = HAND_NS
                bound = bound_whole(cp, ns, name)
                times[mode].append(time.monotonic() - started)
                if mode == "trainadmit":
                    assert re.fullmatch(rf"train-[{ALPHABET}]{{5}}", name), name
                    job = cp.http.get("batch/v1", "Job", name, ns)
                    assert job["spec"]["template"]["spec"]["schedulingGroup"] == {"podGroupName": f"{name}-gang"}
                    group = cp.http.get("scheduling.k8s.io/v1alpha2", "PodGroup", f"{name}-gang", ns)
                    assert group["spec"]["schedulingPolicy"]["gang"]["minCount"] == WORKERS
                    assert group["metadata"]["ownerReferences"][0]["name"] == name
                    assert len(set(bound.values())) == WORKERS
                    template = [job, group, sorted(racks_of(cp, set(bound.values())))[0]]
                clean(cp, ns, name)
            ours, hand = max(times["trainadmit"]), max(times["hand"])
            summary = (f"create -> all bound, slowest of 3: trainadmit {ours:.2f} s, by hand {hand:.2f} s "
                       f"(medians {statistics.median(times['trainadmit']):.2f} / {statistics.median(times['hand']):.2f})")
            print(summary)
            assert ours <= max(1.5 * hand, hand + 2.0), summary


class TestStockCoscheduling:
    """A stock 1.36 cluster with the scheduler-plugins PodGroup CRD: the bundled policy's auto picks coscheduling."""

    def test_a_generate_name_gang_job_gets_its_name_its_podgroup_and_its_rack(self, stock):
        cp, hook = stock
        with racks(cp, hook, "cos") as namespace:
            started = time.monotonic()
            [name] = create(cp, [generate_name_job(namespace)])
            assert re.fullmatch(rf"train-[{ALPHABET}]{{5}}", name), name
            group = wait_until(lambda: cp.http.get_or_none("scheduling.x-k8s.io/v1alpha1", "PodGroup", name,
                                                           namespace),
                               timeout=30, interval=0.02, what="the coscheduling PodGroup")
            made = time.monotonic() - started
            assert group["spec"]["minMember"] == WORKERS and group["metadata"]["ownerReferences"][0]["name"] == name
            assert made < 3.0, f"the PodGroup came {made:.2f} s after create (the full pass is every 30 s)"
            job = cp.http.get("batch/v1", "Job", name, namespace)
            template = job["spec"]["template"]
            assert template["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == name
            bound = bound_whole(cp, namespace, name)
            for pod in cp.http.list("v1", "Pod", namespace, labelSelector=f"{JOB_NAME_LABEL}={name}")["items"]:
                assert pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == name
            # its workers in one rack: the placement gate's, written into each Pod by the ungater
            assert len(racks_of(cp, set(bound.values()))) == 1, bound
            assert template["spec"]["schedulingGates"] == [{"name": "trainadmit.io/placement"}]
