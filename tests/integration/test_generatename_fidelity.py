"""Stored versus predicted for a ``generateName`` gang Job (the tier's kube-apiserver, trainadmit registered as
deploy/ registers it): the Job the apiserver stored through the webhooks carries the name the mutating webhook
drew (``<generateName>`` + 5 characters of the apiserver's alphabet), and is `trainadmit check`'s prediction
(``<generateName>xxxxx``) with that name in place of the placeholder, field for field; its PodGroup, made by the
reconciler, is check's companion under that name.

The Job is the submitted one of tests/fixtures/admission-reviews (4 x 8 GPUs, rack) with ``generateName: sweep-``
instead of its name, as job-07 was captured; each backend phase of the tier (1.36 policies).
"""

from __future__ import annotations

import contextlib
import copy
import re

import pytest
from support.kube_compare import check_records, loose, save_snapshot, submit
from support.kube_fixtures import APISERVER, PHASES, RENDER_NS
from support.manifests import load_yaml
from support.paths import FIXTURES

from trainadmit.engine.naming import ALPHABET

pytestmark = APISERVER


def sweep() -> dict:
    job = copy.deepcopy(load_yaml(FIXTURES / "admission-reviews" / "submitted-job.yaml")[0])
    del job["metadata"]["name"]
    job["metadata"]["generateName"] = "sweep-"
    return job


@pytest.fixture(scope="module")
def snapshot(cluster, tmp_path_factory) -> list[str]:
    return save_snapshot(cluster.http, tmp_path_factory.mktemp("snapshot"))


@pytest.mark.parametrize("phase", [p for p in PHASES if p != "default"])  # default: 1.37's Job.spec.scheduling
def test_a_stored_generate_name_gang_job_is_checks_prediction_under_the_drawn_name(phase, webhook, cluster,
                                                                                   snapshot, tmp_path):
    from kubernetes import client, config

    from trainadmit.cluster.reconciler import PodGroupReconciler

    http, policy = cluster.http, webhook.use(phase)
    job = sweep()
    [record] = check_records([job], webhook.policy_dir, snapshot, tmp_path)
    assert record["allowed"], record["violations"]
    assert {"op": "add", "path": "/metadata/name", "value": "sweep-xxxxx"} in record["patch"]
    out = submit(http, job, record, RENDER_NS)
    created = [out.stored] if out.stored is not None else []
    try:
        assert out.problems == [], "\n".join(out.problems)
        name = out.stored["metadata"]["name"]
        assert re.fullmatch(rf"sweep-[{ALPHABET}]{{5}}", name), name
        api = config.new_client_from_config(config_file=str(webhook.kubeconfig))
        PodGroupReconciler(client.CustomObjectsApi(api), key=policy.keys.podgroup, log=lambda m: None,
                           kinds=[("batch", "v1", "jobs")]).step()
        for companion in record.get("companions") or []:
            meta = companion["metadata"]
            assert meta["name"].startswith("sweep-xxxxx")
            pg = http.get(companion["apiVersion"], companion["kind"], meta["name"].replace("sweep-xxxxx", name),
                          meta["namespace"])
            created.append(pg)
            assert pg["metadata"]["ownerReferences"][0]["uid"] == out.stored["metadata"]["uid"]
            assert {k: loose(pg["spec"].get(k)) for k in companion["spec"]} == loose(companion["spec"])
    finally:
        for obj in reversed(created):
            http.delete(obj, propagation="Background")
        with contextlib.suppress(Exception):  # no controller-manager here: a native PodGroup keeps its finalizer
            for pg in http.list("scheduling.k8s.io/v1alpha2", "PodGroup", job["metadata"]["namespace"])["items"]:
                ref = {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup", "metadata": pg["metadata"]}
                if pg["metadata"].get("finalizers"):
                    http.patch(ref, {"metadata": {"finalizers": None}})
                http.delete(ref)
