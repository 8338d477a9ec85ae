"""The PodGroup reconciler creates what the mutation asked for, owned by the Job, exactly once."""

from __future__ import annotations

import json
import uuid

from support.fake_apiserver import FakeAPIServer
from support.manifests import deep, load_yaml, review
from support.paths import EXAMPLES
from support.schemas import schema_errors

from trainadmit.cluster.reconciler import PodGroupReconciler
from trainadmit.engine import Request, decide


def _store_job(api, job):
    """Store ``job`` as the apiserver would: with canonical string quantities (a policy may inject 1)."""
    job = deep(job)
    pod = job["spec"]["template"]["spec"]
    for container in pod.get("containers", []) + pod.get("initContainers", []):
        for section in (container.get("resources") or {}).values():
            if isinstance(section, dict):
                section.update({k: str(v) for k, v in section.items()})
    job["metadata"]["uid"] = str(uuid.uuid4())
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    api.put_raw(f"/apis/batch/v1/namespaces/{ns}/jobs/{name}", job)
    return job


def _reconciler(api):
    from kubernetes import client

    config = client.Configuration()
    config.host = f"http://127.0.0.1:{api.port}"
    c = client.ApiClient(config)
    return PodGroupReconciler(client.CustomObjectsApi(c), log=lambda m: None, kinds=[("batch", "v1", "jobs")])


def test_podgroups_for_coscheduling_and_native_pod_group(backend_policy):
    name, policy = backend_policy
    job = review("job-03-mutate-Job-CREATE.json")["request"]["object"]  # as the apiserver stores it
    d = decide(policy, Request(deep(job)))
    api = FakeAPIServer()
    try:
        stored = _store_job(api, d.mutated)
        other = review("job-05-mutate-Job-CREATE.json")["request"]["object"]  # never mutated: no label
        _store_job(api, other)
        reconciler = _reconciler(api)
        first = reconciler.step()
        pgs = {p: o for p, o in api.objects.items() if "/podgroups/" in p}
        if name in ("coscheduling", "native-podgroup"):
            assert len(first) == 1 and first[0].endswith(": created")
            [(path, pg)] = pgs.items()
            assert pg["metadata"]["ownerReferences"] == [{"apiVersion": "batch/v1", "kind": "Job",
                                                          "name": "llama-pretrain", "uid": stored["metadata"]["uid"],
                                                          "controller": True, "blockOwnerDeletion": True}]
            assert pg["metadata"]["namespace"] == "team-nlp"
            companion = d.companions[0]
            assert pg["spec"] == companion["spec"] and pg["metadata"]["name"] == companion["metadata"]["name"]
            if name == "native-podgroup":
                assert path.startswith("/apis/scheduling.k8s.io/v1beta1/namespaces/team-nlp/podgroups/")
                assert schema_errors({k: v for k, v in pg.items()}) == []
            else:
                assert path.startswith("/apis/scheduling.x-k8s.io/v1alpha1/namespaces/team-nlp/podgroups/")
            assert reconciler.step() == []  # idempotent: already there
        else:
            assert first == [] and pgs == {}
            assert "trainadmit.io/podgroup" not in (d.mutated["metadata"].get("labels") or {})
    finally:
        api.close()


def test_annotation_is_the_companion_json(backend_policy):
    name, policy = backend_policy
    d = decide(policy, Request(load_yaml(EXAMPLES / "llama-pretrain.yaml")[0]))
    ann = d.mutated["metadata"].get("annotations", {}).get("trainadmit.io/podgroup")
    # a batch/v1 Job gets a PodGroup from these two; Volcano's Jobs carry annotations, kueue and native-job none
    assert bool(d.companions) == (name in ("coscheduling", "native-podgroup")), d.companions
    if d.companions:
        assert json.loads(ann)["spec"] == d.companions[0]["spec"]
    else:
        assert ann is None


def test_a_resized_workloads_podgroup_follows_it(backend_policy):
    """An accepted resize (4 -> 8 workers; UPDATEs are never mutated, so the annotation still says 4): the next
    pass patches the PodGroup the reconciler owns to the workload's new gang size, and its GPUs."""
    name, policy = backend_policy
    if name not in ("coscheduling", "native-podgroup"):
        return  # their PodGroups belong to Volcano's controller, the Job controller or Kueue
    job = review("job-03-mutate-Job-CREATE.json")["request"]["object"]
    d = decide(policy, Request(deep(job)))
    api = FakeAPIServer()
    try:
        stored = _store_job(api, d.mutated)
        reconciler = _reconciler(api)
        assert reconciler.step()[0].endswith(": created")
        before = stored["spec"]["parallelism"]
        stored["spec"].update(parallelism=2 * before, completions=2 * before)
        api.put_raw(f"/apis/batch/v1/namespaces/team-nlp/jobs/{stored['metadata']['name']}", stored)
        [result] = reconciler.step()
        assert result.endswith(f": resized {before} -> {2 * before}"), result
        [pg] = [o for p, o in api.objects.items() if "/podgroups/" in p]
        if name == "coscheduling":
            gpus = int(d.companions[0]["spec"]["minResources"]["nvidia.com/gpu"])
            assert pg["spec"]["minMember"] == 2 * before and pg["spec"]["minResources"] == {"nvidia.com/gpu": str(2 * gpus)}
        else:
            assert pg["spec"]["schedulingPolicy"]["gang"]["minCount"] == 2 * before
        assert reconciler.step() == []  # the same size again: nothing to do
    finally:
        api.close()
