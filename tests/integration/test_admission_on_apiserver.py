"""trainadmit through a real kube-apiserver, with deploy/'s webhook configurations verbatim.

Every example and fixture Job and Pod, under every policy phase (the bundled 1.37 policy, and the
policy retargeted at this 1.36 apiserver with each gang backend it can hold), is stored exactly as
`trainadmit check` predicts, or refused with check's violations; a Pod of each stored Job, made as
the Job controller would (as the Job controller's ServiceAccount), is accepted. Then what "admit only what can start" must show: a missing
PriorityClass, a missing dataset claim and a gang bigger than the usable part of a rack are refused
with their names, and `check --old` gives the server's decision on an UPDATE.
"""

from __future__ import annotations

import contextlib
import copy
import json

import pytest
from support.builders import job
from support.cli import run_cli
from support.controlplane import KubeError, job_pod, wait_until
from support.kube_compare import Outcome, check_records, loose, normalized, predicted, render, save_snapshot, submit
from support.kube_fixtures import APISERVER, BARE_NS, PHASES, RENDER_NS
from support.manifests import load_yaml
from support.paths import EXAMPLES, FIXTURES

pytestmark = APISERVER
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"  # the Job controller's own account


def corpus() -> list[dict]:
    """The examples and the fixture Jobs and Pods, each in a namespace and with a name unique in the list."""
    docs = [d for p in sorted(EXAMPLES.glob("*.yaml")) for d in load_yaml(p)]
    docs += [d for p in sorted((FIXTURES / "real-world").glob("*.y*ml")) for d in load_yaml(p)]
    docs += load_yaml(FIXTURES / "admission-reviews" / "submitted-job.yaml")
    own_namespaces = {d["metadata"]["name"] for d in docs if d.get("kind") == "Namespace"}
    out, names = [], set()
    for doc in docs:
        if doc.get("kind") not in ("Job", "Pod") or doc.get("apiVersion") not in ("batch/v1", "v1"):
            continue
        if not _whole(doc):
            continue  # a kustomize patch (Azure's SR-IOV scenarios): the apiserver refuses it before any webhook
        doc = copy.deepcopy(doc)
        meta = doc["metadata"]
        if meta.get("namespace") in own_namespaces:  # a namespace its file creates, which this tier does not
            meta["namespace"] = "default"
        meta.setdefault("namespace", "default")
        if meta.get("name"):
            while (meta["namespace"], meta["name"]) in names:  # two fixtures share a name: keep both
                meta["name"] += "-2"
            names.add((meta["namespace"], meta["name"]))
        out.append(doc)
    return out


def _whole(doc: dict) -> bool:
    """Every container names its image (a patch of a manifest does not)."""
    spec = doc.get("spec") or {}
    pod = (spec.get("template") or {}).get("spec") or {} if doc.get("kind") == "Job" else spec
    return all(isinstance(c, dict) and c.get("image") for c in pod.get("containers") or [{}])


@pytest.fixture(scope="module")
def snapshot(cluster, tmp_path_factory) -> list[str]:
    """The cluster saved as an operator would for `check --cluster` (lists as the API returns them, `/apis`)."""
    return save_snapshot(cluster.http, tmp_path_factory.mktemp("snapshot"))


def _expect_membership_lost(phase: str, record: dict, obj: dict) -> bool:
    """On the bundled 1.37 policy a native gang lives in Job.spec.scheduling, which this 1.36 apiserver drops
    after /mutate; /validate then refuses the Job (by design: no gang, no Job)."""
    return phase == "default" and record["allowed"] and "scheduling" in (predicted(obj, record).get("spec") or {})


def _reconcile(webhook, policy) -> list[str]:
    """One pass of the PodGroup reconciler, as trainadmit's ServiceAccount."""
    from kubernetes import client, config

    from trainadmit.cluster.reconciler import PodGroupReconciler

    api = config.new_client_from_config(config_file=str(webhook.kubeconfig))
    return PodGroupReconciler(client.CustomObjectsApi(api), key=policy.keys.podgroup, log=lambda m: None,
                              kinds=[("batch", "v1", "jobs")]).step()


@pytest.mark.parametrize("phase", list(PHASES))
def test_stored_equals_predicted_and_each_stored_job_can_start_a_pod(phase, webhook, cluster, snapshot, tmp_path):
    http = cluster.http
    policy = webhook.use(phase)
    objects = corpus()
    records = check_records(objects, webhook.policy_dir, snapshot, tmp_path)
    outcomes: list[Outcome] = []
    created: list[dict] = []
    try:
        for obj, record in zip(objects, records, strict=True):
            if _expect_membership_lost(phase, record, obj):
                out = Outcome(obj, record)
                with pytest.raises(KubeError) as err:
                    created.append(http.create(obj))
                if "[gang.membership-lost]" not in err.value.message:
                    out.problems.append(f"expected gang.membership-lost from /validate, got {err.value.message}")
            else:
                out = submit(http, obj, record, RENDER_NS)
            outcomes.append(out)
            if out.stored is not None:
                created.append(out.stored)
        job_controller = http.impersonate(JOB_CONTROLLER)  # who creates a Job's Pods in a cluster
        for stored in [o.stored for o in outcomes if o.stored is not None and o.stored["kind"] == "Job"]:
            # refused at create if, e.g., its PriorityClass is missing
            created.append(job_controller.create(job_pod(stored, 0)))
        results = _reconcile(webhook, policy)
        for out in outcomes:
            for companion in out.record.get("companions") or []:
                if out.stored is None:
                    continue
                meta = companion["metadata"]
                pg = http.get(companion["apiVersion"], companion["kind"], meta["name"], meta["namespace"])
                created.append(pg)
                owner = pg["metadata"]["ownerReferences"][0]
                wrong = {k: v for k, v in companion["spec"].items() if loose(pg["spec"].get(k)) != loose(v)}
                if wrong or owner["uid"] != out.stored["metadata"]["uid"]:
                    out.problems.append(f"PodGroup {meta['name']} differs from check's companion: {pg['spec']} "
                                        f"(owner {owner['uid']}, the stored workload's {out.stored['metadata']['uid']}; "
                                        f"check predicted {companion['spec']})")
    finally:
        for obj in reversed(created):
            http.delete(obj, propagation="Background")
        # no controller-manager runs here: a deleted native PodGroup keeps its finalizer (and so exists, with its
        # old owner) and would stand in for the next phase's of the same name
        for ns in {o.stored["metadata"]["namespace"] for o in outcomes if o.stored is not None}:
            with contextlib.suppress(KubeError):
                for pg in http.list("scheduling.k8s.io/v1alpha2", "PodGroup", ns)["items"]:
                    ref = {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup", "metadata": pg["metadata"]}
                    if pg["metadata"].get("finalizers"):
                        http.patch(ref, {"metadata": {"finalizers": None}})
                    http.delete(ref)
    problems = [f"{o.name}: {p}" for o in outcomes for p in o.problems]
    assert problems == [], "\n".join(problems)
    stored, refused = sum(o.stored is not None for o in outcomes), sum(o.stored is None for o in outcomes)
    assert stored >= 3 and refused >= 3, (stored, refused)  # both paths were exercised
    if phase == "coscheduling":
        assert any(r.endswith(": created") for r in results)


def test_the_comparison_fails_when_a_field_is_dropped(webhook, cluster):
    """The stored-equals-predicted comparison is able to fail: drop one injected field from a prediction."""
    http = cluster.http
    webhook.use("coscheduling")
    obj = job(name="drop-check", namespace="team-nlp", workers=2)
    stored = http.create(obj)
    try:
        from trainadmit.engine import Request, decide, load_policy

        d = decide(load_policy(webhook.policy_dir), Request(copy.deepcopy(obj)))
        damaged = copy.deepcopy(d.mutated)
        del damaged["spec"]["template"]["spec"]["tolerations"]
        from support.kube_compare import differences

        assert differences(normalized(stored), normalized(render(http, d.mutated, RENDER_NS))) == []
        diff = differences(normalized(stored), normalized(render(http, damaged, RENDER_NS)))
        assert any("tolerations" in line for line in diff), diff
    finally:
        http.delete(stored, propagation="Background")


# ---- admit only what can start -----------------------------------------------------------------

def _refusal(http, obj) -> str:
    with pytest.raises(KubeError) as err:
        http.create(obj)
    assert err.value.status == 403
    return err.value.message


def test_a_missing_priority_class_is_refused_by_name_until_it_exists(webhook, cluster):
    http = cluster.http
    webhook.use("coscheduling")
    urgent = job(name="urgent", namespace=BARE_NS, workers=2, annotations={"trainadmit.io/priority": "urgent"})
    message = _refusal(http, urgent)
    assert "[references.priority-class-missing]" in message and "PriorityClass training-urgent" in message
    assert "kubectl create priorityclass training-urgent --value=90000" in message
    # a bare GPU Pod naming the tier: trainadmit refuses it with the same reason, before the apiserver would
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "urgent-pod", "namespace": BARE_NS,
                                                           "annotations": {"trainadmit.io/priority": "urgent"}},
           "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
    assert "PriorityClass training-urgent" in _refusal(http, pod)
    pc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "training-urgent"},
          "value": 90000}
    http.create(pc)
    try:  # the live view's watch sees the new class; the same Job is then stored, and its Pod accepted
        stored = wait_until(lambda: http.create(urgent), timeout=30, what="the Job admitted once its class exists")
        created = http.impersonate(JOB_CONTROLLER).create(job_pod(stored, 0))
        http.delete(created)
        http.delete(stored, propagation="Background")
    finally:
        http.delete(pc)


def test_a_missing_dataset_claim_is_refused_by_name(webhook, cluster):
    http = cluster.http
    webhook.use("coscheduling")
    wanting = job(name="needs-c4", namespace=BARE_NS, workers=2, annotations={"trainadmit.io/datasets": "c4"})
    message = _refusal(http, wanting)
    assert "[references.claim-missing]" in message
    assert "PersistentVolumeClaim research/dataset-c4 (dataset c4) does not exist" in message
    having = copy.deepcopy(wanting)
    having["metadata"]["namespace"] = "team-nlp"  # where the claim exists
    stored = http.create(having)
    http.delete(stored, propagation="Background")


def test_a_gang_bigger_than_the_usable_part_of_a_rack_is_refused_naming_the_nodes(webhook, cluster):
    http = cluster.http
    webhook.use("coscheduling")
    labels = {"trainadmit.io/pool": "h100-canary"}
    message = _refusal(http, job(name="canary-14", namespace=BARE_NS, workers=14, labels=labels))
    assert "[capacity.unusable-nodes]" in message
    assert "has 16 nodes, 8 usable now and 10 once cordoned nodes return" in message
    for part in ("4 NotReady (canary-n01, canary-n02, canary-n03, canary-n04)", "2 cordoned (canary-n05, canary-n06)",
                 "1 with taint nvidia.com/gpu.health=xid-79:NoSchedule not tolerated (canary-n07)",
                 "1 with 0 allocatable nvidia.com/gpu (canary-n08)"):
        assert part in message
    # 9 fit once the cordons lift: admitted, with a warning that the gang would wait; 8 start now
    waits = http.create(job(name="canary-9", namespace=BARE_NS, workers=9, labels=labels))
    starts = http.create(job(name="canary-8", namespace=BARE_NS, workers=8, labels=labels))
    logged = {x["name"]: (x["warned"], x["noted"]) for x in webhook.server.wait_log(
        lambda x: x.get("event") == "decision" and x.get("webhook") == "mutate"
        and x.get("name") in ("canary-9", "canary-8"))}
    # (the tier's cluster serves coscheduling's PodGroup (install_cluster installs scheduler-plugins' CRDs): the rack
    # is held by the placement gate, no colocation-risk note (it was pod affinity and the note until the gate reached
    # coscheduling); the tier's server runs without --reconcile, so nothing creates their PodGroups or lifts the
    # gate: a warning)
    assert logged["canary-9"] == (["capacity.cordoned-nodes", "reconciler.missing"], [])
    assert logged["canary-8"] == (["reconciler.missing"], [])
    for obj in (waits, starts):
        http.delete(obj, propagation="Background")


def test_check_gives_the_servers_decision_on_an_update(webhook, cluster, snapshot, tmp_path):
    """A parallelism scale-up to 300 (2,400 GPUs, over the tier's team-nlp budget of 2,048): the apiserver's
    /validate UPDATE refuses it on quota and on every other rule that depends on the size (the rack), and
    `trainadmit check --old` with a snapshot of the cluster (and check on the AdmissionReview) says the same."""
    http = cluster.http
    webhook.use("coscheduling")
    stored = http.create(job(name="scale-me", namespace="team-nlp", workers=4))
    try:
        scaled = copy.deepcopy(stored)
        scaled["spec"]["parallelism"] = 300
        with pytest.raises(KubeError) as err:
            http.replace(scaled)
        assert err.value.status == 403
        (tmp_path / "old.yaml").write_text(json.dumps(stored))
        (tmp_path / "new.yaml").write_text(json.dumps(scaled))
        view = [arg for path in snapshot for arg in ("--cluster", path)]
        r = run_cli("check", str(tmp_path / "new.yaml"), "--old", str(tmp_path / "old.yaml"), "-p",
                    str(webhook.policy_dir), "-o", "json", *view)
        assert r.returncode == 1, r.stdout + r.stderr
        [record] = json.loads(r.stdout)
        rules = {v["rule"] for v in record["violations"]}
        assert {"quota.workers-per-job", "quota.gpus-per-job", "quota.namespace-hard", "topology.domain-fit"} <= rules
        for v in record["violations"]:
            assert f"[{v['rule']}] {v['path']}: {v['message']}" in err.value.message
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                  "request": {"uid": "u", "operation": "UPDATE", "namespace": "team-nlp", "object": scaled,
                              "oldObject": stored}}
        (tmp_path / "review.json").write_text(json.dumps(review))
        r = run_cli("check", str(tmp_path / "review.json"), "-p", str(webhook.policy_dir), "-o", "json", *view)
        assert r.returncode == 1 and json.loads(r.stdout)[0]["violations"] == record["violations"]
    finally:
        http.delete(stored, propagation="Background")
