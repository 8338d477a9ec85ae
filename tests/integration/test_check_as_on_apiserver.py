"""`trainadmit check --as USER [--as-group GROUP]` against a real kube-apiserver with deploy/'s webhooks: a Job's Pod
sent as the Job controller's account is left alone by the server exactly as `check --as <that account>` predicts
(not matched, no patch), and the same Pod sent by someone else is stored or refused exactly as `check --as
<them>` predicts (issue 32 item 5)."""

from __future__ import annotations

import json

import yaml
from support.builders import job
from support.cli import run_cli
from support.controlplane import job_pod
from support.kube_compare import contains, save_snapshot, submit
from support.kube_fixtures import APISERVER, RENDER_NS

pytestmark = APISERVER
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"  # docs/workloads.md: who creates a Job's Pods
NAMESPACE = "team-nlp"


def _record(pod: dict, policy_dir, snapshot: list[str], tmp_path, *who: str) -> dict:
    src = tmp_path / f"pod-{len(who)}.yaml"
    src.write_text(yaml.safe_dump(pod, sort_keys=False))
    args = ["check", str(src), "-p", str(policy_dir), "-o", "json", *who]
    for path in snapshot:
        args += ["--cluster", path]
    r = run_cli(*args)
    assert r.returncode in (0, 1), r.stderr
    [record] = json.loads(r.stdout)
    return record


def test_check_as_predicts_the_server_for_the_controller_and_for_anyone_else(webhook, cluster, tmp_path):
    http = cluster.http
    webhook.use("coscheduling")
    stored_job = http.create(job(name="as-check", namespace=NAMESPACE, workers=2))
    created = [stored_job]
    try:
        snapshot = save_snapshot(http, tmp_path / "snapshot")
        pod = job_pod(stored_job, 0)

        as_controller = _record(pod, webhook.policy_dir, snapshot, tmp_path, "--as", JOB_CONTROLLER)
        assert not as_controller["matched"] and as_controller["patch"] == []
        assert as_controller["reason"].startswith(f"created by Job as-check as {JOB_CONTROLLER}")
        stored = http.impersonate(JOB_CONTROLLER).create(pod)
        created.append(stored)
        assert contains(stored["spec"], pod["spec"]) and contains(stored["metadata"]["annotations"],
                                                                  pod["metadata"]["annotations"])

        other = dict(pod, metadata={**pod["metadata"], "name": "as-check-by-alice"})
        as_alice = _record(other, webhook.policy_dir, snapshot, tmp_path, "--as", "alice", "--as-group",
                           "system:masters")
        assert as_alice["matched"]  # a Pod of a Job, sent by someone who is not its controller: decided as a Pod
        out = submit(http.impersonate("alice", ["system:masters"]), other, as_alice, RENDER_NS)
        if out.stored is not None:
            created.append(out.stored)
        assert out.problems == [], out.problems
    finally:
        for obj in reversed(created):
            http.delete(obj, propagation="Background")
