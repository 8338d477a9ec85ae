"""Operator custom resources through a real kube-apiserver with the operators' own CRDs installed.

Every operator example (tests/workloads/test_operators.py's corpus, made into GPU jobs) is submitted under the
bundled policy, and one example of each kind under each other policy phase (the gang backends): the
apiserver must store exactly what `trainadmit check` predicts (its structural
schema prunes any field a CRD does not declare, so an injection the operator's CRD cannot hold shows
up here as a difference), or refuse it with check's violations. Then, since there are no operators
here to do it, a Pod is made from each pod template of each stored resource, owned by it as its
operator would own it and as the operator's own ServiceAccount: the apiserver must accept it (a valid Pod
spec, an existing PriorityClass) and the webhooks must leave it alone (their matchConditions skip the Pods a
decided workload's controller creates).

The MPIJob CRD is the mpi-operator's (kubeflow.org/v2beta1): the training-operator v1 CRD has the
same name, and a cluster holds one of them.
"""

from __future__ import annotations

import copy

import pytest
from support.controlplane import KubeError
from support.kube_compare import Outcome, check_records, render, save_snapshot, submit
from support.kube_fixtures import APISERVER, OPERATOR_CRDS, PHASES, RENDER_NS
from support.operators import CUSTOM_RESOURCES, gpu_job

from trainadmit.engine.workloads import workload_of

pytestmark = APISERVER
NAMESPACE = "team-nlp"  # where tests/workloads/test_operators.py's gpu_job puts every example

CRD_FILES = ("kubeflow-training-operator-v1/crds/kubeflow.org_pytorchjobs.yaml",
             "kubeflow-training-operator-v1/crds/kubeflow.org_tfjobs.yaml",
             "kubeflow-training-operator-v1/crds/kubeflow.org_paddlejobs.yaml",
             "kubeflow-mpi-operator/crds/kubeflow.org_mpijobs.yaml",
             "kuberay/crds/ray.io_rayclusters.yaml", "kuberay/crds/ray.io_rayjobs.yaml",
             "jobset/crds/jobset.x-k8s.io_jobsets.yaml", "lws/crds/leaderworkerset.x-k8s.io_leaderworkersets.yaml",
             "kubeflow-trainer-v2/crds/trainer.kubeflow.org_trainjobs.yaml")  # Volcano's are in the cluster fixture


@pytest.fixture(scope="module")
def operators(cluster, tmp_path_factory) -> list[str]:
    """The operators' CRDs installed, and the ServiceAccounts the examples run as; the snapshot `check
    --cluster` reads (it now serves their APIs)."""
    cluster.cp.install_crds(*(OPERATOR_CRDS / f for f in CRD_FILES))
    accounts = {t.pod_spec.get("serviceAccountName") for obj in operator_corpus() if obj["kind"] != "TrainJob"
                for t in workload_of(obj).templates} - {None, "default"}
    cluster.cp.apply([{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": a, "namespace": NAMESPACE}}
                      for a in sorted(accounts)])
    return save_snapshot(cluster.http, tmp_path_factory.mktemp("operator-snapshot"))


def valid_as_written(http, obj: dict) -> bool:
    """Whether the apiserver accepts the example itself (a dry run where no webhook is called): an
    example written for another version of its CRD is refused for reasons of its own."""
    try:
        render(http, obj, RENDER_NS)
    except KubeError:
        return False
    return True


def operator_corpus() -> list[dict]:
    """The operator examples as GPU jobs, each with a name unique per kind (the MPIJob v1 examples left out)."""
    out, seen = [], set()
    for label, doc in CUSTOM_RESOURCES:
        if doc["apiVersion"] == "kubeflow.org/v1" and doc["kind"] == "MPIJob":
            continue
        obj = gpu_job(doc)
        meta = obj["metadata"]
        # the file's name, as an RFC 1035 label (TrainJob's CRD asks for one)
        meta["name"] = "ex-" + label.split("#")[0].removesuffix(".yaml").replace("_", "-").replace(".", "-").lower()[:45]
        while (obj["kind"], meta["name"]) in seen:
            meta["name"] += "-2"
        seen.add((obj["kind"], meta["name"]))
        out.append(obj)
    return out


def per_kind(objects: list[dict]) -> list[dict]:
    """One example per kind, the one with the most pod templates: the other phases differ from the
    bundled policy in the gang keys, which depend on the kind, not on the example."""
    best: dict[tuple[str, str], dict] = {}
    for obj in objects:
        key = (obj["apiVersion"], obj["kind"])
        if key not in best or len(workload_of(obj).templates) > len(workload_of(best[key]).templates):
            best[key] = obj
    return list(best.values())


def pods_of(stored: dict) -> list[dict]:
    """One Pod per pod template, as the resource's operator would create it (a TrainJob's templates are
    patches of a runtime, not Pods: none)."""
    if stored["kind"] == "TrainJob":
        return []
    meta = stored["metadata"]
    owner = {"apiVersion": stored["apiVersion"], "kind": stored["kind"], "name": meta["name"], "uid": meta["uid"],
             "controller": True, "blockOwnerDeletion": True}
    out = []
    for i, template in enumerate(workload_of(stored).templates):
        pod_meta = copy.deepcopy(template.pod_meta)
        out.append({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": f"{meta['name']}-{i}", "namespace": meta["namespace"],
                                 "labels": pod_meta.get("labels") or {}, "annotations": pod_meta.get("annotations") or {},
                                 "ownerReferences": [owner]},
                    "spec": copy.deepcopy(template.pod_spec)})
    return out


@pytest.mark.parametrize("phase", list(PHASES))
def test_operator_resources_are_stored_as_check_predicts_and_their_pods_are_valid(phase, webhook, cluster, operators,
                                                                                  tmp_path):
    http = cluster.http
    webhook.use(phase)
    objects = operator_corpus() if phase == "default" else per_kind(operator_corpus())
    records = check_records(objects, webhook.policy_dir, operators, tmp_path)
    outcomes: list[Outcome] = []
    created: list[dict] = []
    invalid = []
    pods = 0
    try:
        for obj, record in zip(objects, records, strict=True):
            if not valid_as_written(http, obj):
                invalid.append(obj["metadata"]["name"])
                continue
            out = submit(http, obj, record, RENDER_NS)
            outcomes.append(out)
            if out.stored is None:
                continue
            created.append(out.stored)
            calls_before = cluster.cp.webhook_calls()
            # as the operator creates them: its own ServiceAccount (authorized here as a cluster admin)
            operator = http.impersonate(workload_of(out.stored).adapter.controllers[0], ["system:masters"])
            for pod in pods_of(out.stored):
                try:
                    created.append(operator.create(pod))
                    pods += 1
                except KubeError as exc:
                    out.problems.append(f"its Pod {pod['metadata']['name']} was refused: {exc.message}")
            if cluster.cp.webhook_calls() != calls_before:
                out.problems.append("the webhooks were called for a Pod its operator created")
    finally:
        for obj in reversed(created):
            http.delete(obj, propagation="Background")
    problems = [f"{o.name}: {p}" for o in outcomes for p in o.problems]
    assert problems == [], "\n".join(problems)
    # real-world/jobset-host-maintenance-event-model.yaml: its failurePolicy rules lack the `name` that this
    # JobSet CRD (main, tests/fixtures/operators/SOURCES.md) requires
    assert set(invalid) <= {"ex-jobset-host-maintenance-event-model"} and (invalid or phase != "default")
    kinds = {o.submitted["kind"] for o in outcomes if o.stored is not None}
    assert len(kinds) >= 6 and pods >= 10, (kinds, pods)  # most kinds were stored, and their Pods made
    if phase == "default":
        assert {"TFJob", "PaddleJob"} <= kinds, kinds
