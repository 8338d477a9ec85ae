"""The status reconciler turns the preflight's termination messages into the workload's annotation,
Events and metrics.

Everything goes through the Kubernetes API as it would in a cluster with no kubelet: the mutated Job
is stored, its Pods are created as the Job controller would create them, and each Pod's status is
written through the ``status`` subresource as a kubelet would, with the termination message a real
preflight run left on a fake node tree. Each test runs twice: on the in-process fake apiserver, and
in the integration tier on the real kube-apiserver (deploy/'s PriorityClasses and the PyTorchJob CRD
installed; in ``kube-public``, which the tier's webhooks skip, and emptied after each test: Pods with
a node and no kubelet go only with a zero grace period, Jobs with ``propagationPolicy: Background``
since there is no garbage collector to clear the orphan finalizer).
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from support.fake_apiserver import FakeAPIServer
from support.kube_fixtures import APISERVER, OPERATOR_CRDS, RENDER_NS, cluster_on
from support.manifests import deep, load_yaml
from support.operators import pytorchjob
from support.paths import EXAMPLES
from support.preflight_runs import after, preflight_status
from support.schemas import schema_errors

from trainadmit.cluster.preflight_status import PreflightStatus
from trainadmit.engine import Request, decide
from trainadmit.grammars.preflight import CONTAINER_NAME


def as_stored(obj: dict, namespace: str) -> dict:
    """Resource quantities as the apiserver stores them, strings (a policy may inject ``1``); in ``namespace``."""
    obj = deep(obj)
    obj["metadata"]["namespace"] = namespace

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("limits", "requests") and isinstance(value, dict):
                    node[key] = {k: str(v) for k, v in value.items()}
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(obj)
    return obj


@dataclasses.dataclass
class Cluster:
    core: object
    custom: object
    ns: str

    def create(self, group: str, version: str, plural: str, obj: dict) -> dict:
        return self.custom.create_namespaced_custom_object(group, version, self.ns, plural, as_stored(obj, self.ns))

    def get(self, group: str, version: str, plural: str, name: str) -> dict:
        return json.loads(self.custom.get_namespaced_custom_object(group, version, self.ns, plural, name,
                                                                   _preload_content=False).data)

    def create_pod(self, pod: dict) -> dict:
        return json.loads(self.core.create_namespaced_pod(self.ns, pod, _preload_content=False).data)

    def write_status(self, pod: dict, status: dict) -> None:
        """As the kubelet does: the Pod as stored, with a new status, PUT to the status subresource."""
        name = pod["metadata"]["name"]
        current = json.loads(self.core.read_namespaced_pod(name, self.ns, _preload_content=False).data)
        current["status"] = status
        self.core.replace_namespaced_pod_status(name, self.ns, current, _preload_content=False)

    def events(self) -> list[dict]:
        return json.loads(self.core.list_namespaced_event(self.ns, _preload_content=False).data)["items"]

    def empty(self) -> None:
        """Remove what a test left (the real apiserver keeps it for the rest of the session)."""
        from kubernetes.client.exceptions import ApiException

        for name in (p["metadata"]["name"] for p in json.loads(self.core.list_namespaced_pod(
                self.ns, _preload_content=False).data)["items"]):
            self.core.delete_namespaced_pod(name, self.ns, grace_period_seconds=0, _preload_content=False)
        for group, version, plural in (("batch", "v1", "jobs"), ("kubeflow.org", "v1", "pytorchjobs")):
            listed = json.loads(self.custom.list_namespaced_custom_object(group, version, self.ns, plural,
                                                                          _preload_content=False).data)
            for item in listed["items"]:
                try:
                    self.custom.delete_namespaced_custom_object(group, version, self.ns, plural, item["metadata"]["name"],
                                                                propagation_policy="Background", _preload_content=False)
                except ApiException as exc:
                    if exc.status != 404:
                        raise
        self.core.delete_collection_namespaced_event(self.ns, _preload_content=False)


@pytest.fixture(params=["fake", pytest.param("apiserver", marks=APISERVER)])
def cluster(request):
    """The fake apiserver, or (integration tier) the real one as its admin."""
    from kubernetes import client

    if request.param == "fake":
        api = FakeAPIServer()
        config = client.Configuration()
        config.host = f"http://127.0.0.1:{api.port}"
        c = client.ApiClient(config)
        yield Cluster(client.CoreV1Api(c), client.CustomObjectsApi(c), "team-nlp")
        api.close()
        return
    cp = request.getfixturevalue("control_plane")
    cluster_on(cp)  # deploy/'s PriorityClasses, the namespaces
    cp.install_crds(OPERATOR_CRDS / "kubeflow-training-operator-v1" / "crds" / "kubeflow.org_pytorchjobs.yaml")
    real = Cluster(client.CoreV1Api(cp.api_client()), client.CustomObjectsApi(cp.api_client()), RENDER_NS)
    real.empty()
    yield real
    real.empty()


def controller_pod(owner: dict, template: dict, name: str, node: str, labels: dict | None = None) -> dict:
    """The Pod an operator creates from ``template`` (there is no controller here to do it), scheduled: so without
    scheduling gates (a gated Pod cannot name its node; trainadmit's placement gate is lifted before binding)."""
    meta = template.get("metadata") or {}
    spec = {k: v for k, v in deep(template["spec"]).items() if k != "schedulingGates"}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": owner["metadata"]["namespace"],
                         "labels": {**(meta.get("labels") or {}), **(labels or {})},
                         "annotations": dict(meta.get("annotations") or {}),
                         "ownerReferences": [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                              "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": {**spec, "nodeName": node}}


def _reconciler(cluster: Cluster, seen: dict) -> PreflightStatus:
    return PreflightStatus(cluster.core, cluster.custom, log=lambda m: None,
                           on_failure=lambda pool, node, check: seen["failures"].append((pool, node, check)),
                           on_ready=lambda pool, seconds: seen["ready"].append((pool, seconds)))


def test_job_pods_results_become_the_jobs_annotation_events_and_metrics(policy, cluster, tmp_path):
    mutated = decide(policy, Request(load_yaml(EXAMPLES / "llama-pretrain.yaml")[0])).mutated
    job = cluster.create("batch", "v1", "jobs", mutated)
    template = job["spec"]["template"]
    uid_label = {"batch.kubernetes.io/controller-uid": job["metadata"]["uid"]}
    pods = [cluster.create_pod(controller_pod(job, template, f"llama-pretrain-{i}-x{i}", f"gpu-{i}", uid_label))
            for i in range(job["spec"]["parallelism"])]
    for i, pod in enumerate(pods):  # node gpu-2 has mlx5_3 port 1 down; gpu-3 has not started the preflight yet
        if i < 3:
            cluster.write_status(pod, preflight_status(pod, tmp_path, after(job, 70 + i),
                                                       port_state={"mlx5_3": "DOWN"} if i == 2 else {}))
    seen = {"failures": [], "ready": []}
    reconciler = _reconciler(cluster, seen)
    assert reconciler.step() == [f"Job {cluster.ns}/llama-pretrain: 2/4 ready; node gpu-2: mlx5_3 port 1 DOWN"]
    stored = cluster.get("batch", "v1", "jobs", "llama-pretrain")
    assert stored["metadata"]["annotations"]["trainadmit.io/preflight"] == "2/4 ready; node gpu-2: mlx5_3 port 1 DOWN"
    [event] = cluster.events()
    assert event["reason"] == "PreflightFailed" and event["type"] == "Warning"
    assert event["involvedObject"]["uid"] == job["metadata"]["uid"] and event["involvedObject"]["kind"] == "Job"
    assert event["message"] == "pod llama-pretrain-2-x2 on node gpu-2: mlx5_3 port 1 DOWN (check ports)"
    # a list's items carry no kind: the Event as it would be read on its own
    assert schema_errors({**event, "apiVersion": "v1", "kind": "Event",
                          "metadata": {"name": event["metadata"]["name"], "namespace": cluster.ns}}) == []
    assert seen == {"failures": [("h100-ib", "gpu-2", "ports")], "ready": []}

    assert reconciler.step() == [] and len(cluster.events()) == 1  # nothing new: no write, no second Event
    assert _reconciler(cluster, seen).step() == [] and len(cluster.events()) == 1  # nor from a new leader

    # the Job controller replaces the failed Pod on another node; it and the last worker pass
    replacement = cluster.create_pod(controller_pod(job, template, "llama-pretrain-2-y", "gpu-5", uid_label))
    cluster.write_status(replacement, preflight_status(replacement, tmp_path, after(job, 150)))
    cluster.write_status(pods[3], preflight_status(pods[3], tmp_path, after(job, 110)))
    assert reconciler.step() == [f"Job {cluster.ns}/llama-pretrain: 4/4 ready; failed before: node gpu-2: mlx5_3 "
                                 "port 1 DOWN"]
    # the latest pass finished 150 s after the Job was created
    assert seen == {"failures": [("h100-ib", "gpu-2", "ports")], "ready": [("h100-ib", 150.0)]}
    reconciler.step()
    assert seen["ready"] == [("h100-ib", 150.0)]  # observed once


def test_pytorchjob_pods_and_a_preflight_killed_before_it_wrote_its_result(policy, cluster, tmp_path):
    mutated = decide(policy, Request(pytorchjob(3, 8))).mutated
    owner = cluster.create("kubeflow.org", "v1", "pytorchjobs", mutated)
    name = owner["metadata"]["name"]
    specs = owner["spec"]["pytorchReplicaSpecs"]
    pods = [cluster.create_pod(controller_pod(owner, specs["Master"]["template"], f"{name}-master-0", "gpu-0"))]
    pods += [cluster.create_pod(controller_pod(owner, specs["Worker"]["template"], f"{name}-worker-{i}", f"gpu-{i + 1}"))
             for i in range(3)]
    for i, pod in enumerate(pods[:3]):
        cluster.write_status(pod, preflight_status(pod, tmp_path, after(owner, 60 + i)))
    # the last one was OOM-killed and restarted (restartPolicy OnFailure): its last run tells, from the log's tail
    killed = {"exitCode": 137, "reason": "OOMKilled", "message": "trainadmit preflight: checking datasets\n",
              "startedAt": after(owner, 64), "finishedAt": after(owner, 65)}
    cluster.write_status(pods[3], {"phase": "Pending", "initContainerStatuses": [
        {"name": CONTAINER_NAME, "image": "x", "imageID": "", "ready": False, "restartCount": 1,
         "state": {"waiting": {"reason": "CrashLoopBackOff"}}, "lastState": {"terminated": killed}}]})
    seen = {"failures": [], "ready": []}
    assert _reconciler(cluster, seen).step() == [
        f"PyTorchJob {cluster.ns}/{name}: 3/4 ready; node gpu-3: trainadmit preflight: checking datasets"]
    assert seen["failures"] == [("h100-ib", "gpu-3", "OOMKilled")]
    assert cluster.events()[0]["metadata"]["name"] == f"{name}-worker-2.preflight-0"


def test_pods_of_a_workload_that_is_gone_or_replaced_are_left_alone(policy, cluster, tmp_path):
    mutated = decide(policy, Request(load_yaml(EXAMPLES / "llama-pretrain.yaml")[0])).mutated
    job = cluster.create("batch", "v1", "jobs", mutated)
    stale = {**job, "metadata": {**job["metadata"], "uid": "an-earlier-job-of-the-same-name"}}
    pod = cluster.create_pod(controller_pod(stale, job["spec"]["template"], "llama-pretrain-0-old", "gpu-0"))
    cluster.write_status(pod, preflight_status(pod, tmp_path, after(job, 60), gpus=7))
    seen = {"failures": [], "ready": []}
    assert _reconciler(cluster, seen).step() == [] and cluster.events() == []
    assert "trainadmit.io/preflight" not in cluster.get("batch", "v1", "jobs", "llama-pretrain")["metadata"].get(
        "annotations", {})
