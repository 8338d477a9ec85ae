"""Outcome tier: the rest of a gang's life through the real controllers (the cluster: see
test_outcome_gangs.py): the PodGroup the reconciler makes after the Job's Pods exist, a resize of a
running gang, priority tiers preempting, the preflight status written from the Job controller's Pods,
and an operator kind's Pods created from the stored custom resource as its operator would."""

from __future__ import annotations

import json

from support.builders import with_gpus
from support.controlplane import wait_until
from support.kube_fixtures import OPERATOR_CRDS, OUTCOME
from support.manifests import load_yaml
from support.outcome import (
    FITS,
    JOB_NAME_LABEL,
    LEVEL,
    Shape,
    all_bound,
    decided,
    gpu_job,
    kubectl,
    node_labels,
    read_verdict,
    scene,
    submit,
)
from support.paths import FIXTURES
from support.preflight_runs import after, preflight_status

pytestmark = OUTCOME

PODGROUPS = ("scheduling.k8s.io/v1alpha2", "PodGroup")
RACK = {"trainadmit.io/topology": LEVEL}
ONE_RACK = Shape("one rack of 4", sizes=(4,))


def test_pods_made_before_their_podgroup_wait_and_start_once_the_reconciler_made_it(outcome_cluster):
    """The Job controller makes the Pods within a second; the reconciler makes the PodGroup on its next
    pass (every 5 s). Pods that name a PodGroup not yet created are held by the gang plugin (no
    condition, no event) and bound as soon as it exists: the gang is never bypassed, only delayed."""
    cp, hook = outcome_cluster.cp, outcome_cluster.webhook
    with scene(cp, hook, "topology-constraint", FITS, "order") as s:
        assert submit(cp, gpu_job("train", s.namespace, 4, annotations=RACK)).admitted
        def started() -> bool:
            v = read_verdict(s.http, s.namespace, f"{JOB_NAME_LABEL}=train")
            podgroup = s.http.get_or_none(*PODGROUPS, "train-gang", s.namespace)
            assert podgroup is not None or not v.bound, f"Pods bound before their PodGroup existed: {v.bound}"
            return len(v.bound) == 4

        wait_until(started, timeout=60, interval=0.1, what="the gang bound")
        v = read_verdict(s.http, s.namespace, f"{JOB_NAME_LABEL}=train")
        assert set(node_labels(s.http, set(v.bound.values()), "topology.kubernetes.io/rack").values()) == {s.node("a")}


def test_a_running_native_gang_job_cannot_be_resized_and_a_gangless_scale_up_is_checked_against_quota(
        outcome_cluster):
    """1.36 refuses any parallelism change of a Job whose Pods name a gang-scheduled PodGroup (the
    PodGroup's minCount is immutable); a Job without a gang may scale, within the namespace's Quota."""
    cp, hook = outcome_cluster.cp, outcome_cluster.webhook
    with scene(cp, hook, "topology-constraint", FITS, "resize") as s:
        assert submit(cp, gpu_job("train", s.namespace, 2, annotations=RACK)).admitted
        before = all_bound(s.http, s.namespace, f"{JOB_NAME_LABEL}=train", 2).bound
        for size in (4, 1):
            done = kubectl(cp, "-n", s.namespace, "patch", "job", "train", "--type=merge", "-p",
                           json.dumps({"spec": {"parallelism": size, "completions": size}}))
            assert done.returncode == 1 and ('cannot change parallelism for a Job referencing gang-scheduled '
                                             'PodGroup "train-gang"') in done.stderr, done.stderr
        assert read_verdict(s.http, s.namespace, f"{JOB_NAME_LABEL}=train").bound == before  # still running

        gangless = gpu_job("solo", s.namespace, 2, completions=8, annotations={"trainadmit.io/gang": "false",
                                                                               "trainadmit.io/topology": "any"})
        assert submit(cp, gangless).admitted
        all_bound(s.http, s.namespace, f"{JOB_NAME_LABEL}=solo", 2)
        over = kubectl(cp, "-n", s.namespace, "patch", "job", "solo", "--type=merge", "-p",
                       json.dumps({"spec": {"parallelism": 6}}))
        assert over.returncode == 1 and "[quota." in over.stderr, over.stderr
        assert "set spec.parallelism: 4 and spec.completions: 4" in over.stderr, over.stderr  # the kind's fields
        ok = kubectl(cp, "-n", s.namespace, "patch", "job", "solo", "--type=merge", "-p",
                     json.dumps({"spec": {"parallelism": 3}}))
        assert ok.returncode == 0, ok.stderr
        all_bound(s.http, s.namespace, f"{JOB_NAME_LABEL}=solo", 3)


def _disrupted(pod: dict) -> bool:
    return any(c["type"] == "DisruptionTarget" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def test_a_higher_tier_gang_preempts_a_whole_lower_tier_gang_and_a_constrained_one_waits(outcome_cluster):
    """Measured on kube-scheduler 1.36.2: Pod-by-Pod preemption (no WorkloadAwarePreemption, or
    disruptionMode Pod) evicted 2 of a 4-Pod gang for a 2-Pod one, leaving it half-evicted; workload-aware
    preemption found no victims at all unless the PodGroups carry their priority; with the PodGroups'
    priority and disruptionMode PodGroup it evicted the whole gang. A gang with a topology constraint
    does not preempt ("not supported for pod groups with scheduling constraints"): it waits."""
    cp, hook = outcome_cluster.cp, outcome_cluster.webhook
    with scene(cp, hook, "preemption", ONE_RACK, "preempt") as s:
        any_level = {"trainadmit.io/topology": "any"}
        low = gpu_job("low", s.namespace, 4, annotations={**any_level, "trainadmit.io/priority": "low"})
        assert submit(cp, low).admitted
        low_pods = all_bound(s.http, s.namespace, f"{JOB_NAME_LABEL}=low", 4).bound

        constrained = gpu_job("rack", s.namespace, 2, annotations={**RACK, "trainadmit.io/priority": "normal"})
        assert submit(cp, constrained).admitted
        v = decided(s.http, s.namespace, f"{JOB_NAME_LABEL}=rack", 2)
        assert v.bound == {}
        wait_until(lambda: "not supported for pod groups with scheduling constraints" in json.dumps(
            s.http.get(*PODGROUPS, "rack-gang", s.namespace).get("status")), timeout=30, what="the PodGroup's reason")
        assert read_verdict(s.http, s.namespace, f"{JOB_NAME_LABEL}=low").bound == low_pods  # nothing evicted
        kubectl(cp, "-n", s.namespace, "delete", "job", "rack", "--wait=false")

        normal = gpu_job("normal", s.namespace, 2, annotations={**any_level, "trainadmit.io/priority": "normal"})
        assert submit(cp, normal).admitted

        def low_gang() -> list[dict]:
            return s.http.list("v1", "Pod", s.namespace, labelSelector=f"{JOB_NAME_LABEL}=low")["items"]

        def whole_gang_preempted() -> list[dict] | None:  # the scheduler marks, then deletes, Pod by Pod
            pods = low_gang()
            gone = [p for p in pods if _disrupted(p) and p["metadata"].get("deletionTimestamp")]
            return pods if sorted(p["metadata"]["name"] for p in gone) == sorted(low_pods) else None

        try:
            pods = wait_until(whole_gang_preempted, timeout=90, what="the whole lower-tier gang preempted")
        except AssertionError:
            marked = sorted(p["metadata"]["name"] for p in low_gang() if _disrupted(p))
            raise AssertionError(f"the lower-tier gang was preempted in part: {marked} of {sorted(low_pods)}") from None
        for p in pods:  # as the kubelet would once the containers stopped
            s.http.request("DELETE", s.http.path_for("v1", "Pod", s.namespace, p["metadata"]["name"]),
                           {"gracePeriodSeconds": 0})
        all_bound(s.http, s.namespace, f"{JOB_NAME_LABEL}=normal", 2)
        assert read_verdict(s.http, s.namespace, f"{JOB_NAME_LABEL}=low").bound == {}  # its replacements wait whole


def test_the_preflight_status_comes_from_the_job_controllers_pods(outcome_cluster, tmp_path):
    """Each worker's preflight result reaches its Pod's status as a kubelet writes it; the status loop of
    ``serve --reconcile`` sums them up on the Job."""
    cp, hook = outcome_cluster.cp, outcome_cluster.webhook
    with scene(cp, hook, "topology-constraint", FITS, "pflt") as s:
        assert submit(cp, gpu_job("train", s.namespace, 4, annotations=RACK)).admitted
        all_bound(s.http, s.namespace, f"{JOB_NAME_LABEL}=train", 4)
        job = s.http.get("batch/v1", "Job", "train", s.namespace)
        pods = sorted(s.http.list("v1", "Pod", s.namespace, labelSelector=f"{JOB_NAME_LABEL}=train")["items"],
                      key=lambda p: p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"])
        for i, pod in enumerate(pods[:3]):  # the 4th has not run its preflight yet; the 3rd's node has a port down
            status = preflight_status(pod, tmp_path, after(job, 30 + i), port_state={"mlx5_3": "DOWN"} if i == 2 else {})
            s.http.update_status({**pod, "apiVersion": "v1", "kind": "Pod", "status": status})
        bad = pods[2]["spec"]["nodeName"]

        def annotated() -> str | None:
            got = s.http.get("batch/v1", "Job", "train", s.namespace)["metadata"]["annotations"].get("trainadmit.io/preflight")
            return got if got and got.startswith("2/4") else None

        assert wait_until(annotated, timeout=60, what="the preflight annotation") == \
            f"2/4 ready; node {bad}: mlx5_3 port 1 DOWN"


def test_an_operators_pods_made_from_the_stored_pytorchjob_start_as_one_gang(outcome_cluster):
    """The Kubeflow example PyTorchJob asking for whole nodes (1 master + 3 workers): stored as trainadmit
    mutated it, its Pods created from the stored templates as the training-operator names and owns them (and
    as its ServiceAccount: the webhooks leave them to it),
    the PodGroup made by the reconciler; all 4 bound in the rack that fits."""
    cp, hook = outcome_cluster.cp, outcome_cluster.webhook
    cp.install_crds(OPERATOR_CRDS / "kubeflow-training-operator-v1" / "crds" / "kubeflow.org_pytorchjobs.yaml")
    with scene(cp, hook, "topology-constraint", FITS, "ptj") as s:
        job = with_gpus(load_yaml(FIXTURES / "operators/kubeflow-training-operator-v1/examples/"
                                             "pytorch_job_mnist_nccl.yaml")[0], 8)
        job["metadata"].update(namespace=s.namespace, labels={"owner": "ml-research"}, annotations=RACK)
        job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 3
        sub = submit(cp, job)
        assert sub.admitted, sub.error
        stored = s.http.get("kubeflow.org/v1", "PyTorchJob", job["metadata"]["name"], s.namespace)
        name, uid = stored["metadata"]["name"], stored["metadata"]["uid"]
        # as the training operator creates them: its own ServiceAccount (authorized here as a cluster admin)
        operator = s.http.impersonate("system:serviceaccount:kubeflow:training-operator", ["system:masters"])
        for rtype, spec in stored["spec"]["pytorchReplicaSpecs"].items():
            template = spec["template"]
            for i in range(spec["replicas"]):
                labels = {**(template.get("metadata") or {}).get("labels", {}), "training.kubeflow.org/job-name": name,
                          "training.kubeflow.org/operator-name": "pytorchjob-controller",
                          "training.kubeflow.org/replica-type": rtype.lower(),
                          "training.kubeflow.org/replica-index": str(i)}
                operator.create({"apiVersion": "v1", "kind": "Pod", "metadata": {
                    "name": f"{name}-{rtype.lower()}-{i}", "namespace": s.namespace, "labels": labels,
                    "annotations": dict((template.get("metadata") or {}).get("annotations") or {}),
                    "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": name,
                                         "uid": uid, "controller": True, "blockOwnerDeletion": True}]},
                    "spec": template["spec"]})
        v = all_bound(s.http, s.namespace, f"training.kubeflow.org/job-name={name}", 4)
        assert set(node_labels(s.http, set(v.bound.values()), "topology.kubernetes.io/rack").values()) == {s.node("a")}
        podgroup = s.http.get(*PODGROUPS, f"{name}-gang", s.namespace)
        assert podgroup["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
        assert podgroup["metadata"]["ownerReferences"][0]["uid"] == uid
