"""A namespace GPU budget that holds, on a real kube-apiserver: namespace gpu-budget, whose Quota allows 64 GPUs.

What it must show: three 40-GPU Jobs (5 workers of 8 GPUs) submitted one after the other: the second is
refused naming the first. And the race admission cannot win alone: two such Jobs created at the same
instant through two trainadmit replicas (behind one address, as behind a Service) are both admitted,
since neither replica has seen the other Job yet; with the reconciler on, its ResourceQuota
``trainadmit-gpu-budget`` is the hard stop: of the two Jobs' ten Pods, the apiserver's quota admission
accepts eight (64 GPUs) and refuses the rest, "exceeded quota". Once both are stored, admission refuses
any further Job, naming both.

This control plane has no controller-manager: there is no Job controller to make the Pods (the test makes
them as it would: ``job_pod``) and no resource-quota controller to give the quota its first status (the
test writes it as that controller does on its first sync: ``used`` 0). From then on the apiserver charges
each Pod to the quota itself, atomically, which is what makes it exact across replicas.
"""

from __future__ import annotations

import threading

import pytest
from support.builders import job
from support.controlplane import KubeError, job_pod, wait_until
from support.kube_fixtures import (
    APISERVER,
    BUDGET_NS,
    EXTRA_POLICY,
    PHASES,
    REPLACED_POLICY,
    SYSTEM_NS,
    reconciling_server,
    register_webhooks,
    webhooks_removed,
)
from support.policies import write_policy
from support.tcp_proxy import TcpProxy

from trainadmit.cluster.budget import BUDGET_NAME

pytestmark = APISERVER


def forty(name: str) -> dict:
    """5 workers of 8 GPUs: whole nodes of pool h100-ib, one rack; 40 of the namespace's 64."""
    return job(name=name, namespace=BUDGET_NS, workers=5, gpus=8, labels={"owner": "ml"})


def _refusal(http, obj: dict) -> str:
    with pytest.raises(KubeError) as err:
        http.create(obj)
    assert err.value.status == 403, err.value
    return err.value.message


def test_the_second_40_gpu_job_is_refused_naming_the_first(webhook, cluster):
    http = cluster.http
    webhook.use("coscheduling")  # a gang this 1.36 apiserver keeps (the 1.37 native one it would drop)
    first = http.create(forty("forty-1"))
    try:
        # the webhook's view learns of forty-1 by its watch, a moment after the create returned
        wait_until(lambda: not _admitted_dry_run(http, forty("forty-2")), timeout=10, what="the view to see forty-1")
        for name in ("forty-2", "forty-3"):
            message = _refusal(http, forty(name))
            assert "[quota.namespace-remaining]" in message
            assert (f"needs 40 nvidia.com/gpu; the other unfinished workloads of namespace {BUDGET_NS} hold 40 of "
                    f"its 64 nvidia.com/gpu (Quota {BUDGET_NS}: Job forty-1: 40), 24 free") in message
            assert "set spec.parallelism: 3 and spec.completions: 3" in message  # 24 free: 3 workers of 8
    finally:
        http.delete(first, propagation="Background")


def _admitted_dry_run(http, obj: dict) -> bool:
    try:
        http.create(obj, dry_run=True)
    except KubeError:
        return False
    return True


def _at_once(http, objs: list[dict]) -> list[dict | KubeError]:
    """Create ``objs`` at the same instant, one thread each."""
    barrier = threading.Barrier(len(objs))
    out: list[dict | KubeError] = [None] * len(objs)  # type: ignore[list-item]

    def create(i: int) -> None:
        barrier.wait()
        try:
            out[i] = http.create(objs[i])
        except KubeError as exc:
            out[i] = exc

    threads = [threading.Thread(target=create, args=(i,)) for i in range(len(objs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def _decided_by(servers, name: str) -> list[int]:
    """Which replicas logged a decision on the Job ``name`` (their index)."""
    return [i for i, s in enumerate(servers) if any(line.get("event") == "decision" and line.get("name") == name
                                                    for line in s.log_lines())]


def test_two_jobs_at_the_same_instant_through_two_replicas_and_the_quota_that_stops_their_pods(
        webhook, cluster, tmp_path):
    from support.server import Server

    from trainadmit.certs import pki

    cp, http = cluster.cp, cluster.http
    policy_dir = write_policy(tmp_path / "policies", PHASES["coscheduling"], EXTRA_POLICY, REPLACED_POLICY)
    certs = tmp_path / "replicas"
    pki.issue(certs, "trainadmit", SYSTEM_NS, ips=["127.0.0.1"])
    replicas = [Server(policy_dir, certs, workers=1, log=tmp_path / f"replica-{i}.log",
                       extra=["--cluster-live", "--graceful-timeout", "1"],
                       env_extra={"KUBECONFIG": str(webhook.kubeconfig)}) for i in range(2)]
    front = None
    created: list[dict] = []
    try:
        for replica in replicas:
            replica.wait_ready(timeout=60)  # each with its own live view, synced
        front = TcpProxy(*(r.port for r in replicas))  # one address in front of both, as a Service is
        with reconciling_server(cp, policy_dir, webhook.kubeconfig, tmp_path / "reconciler", "budget-reconciler"):
            quota = wait_until(lambda: http.get("v1", "ResourceQuota", BUDGET_NAME, BUDGET_NS), timeout=60,
                               what="the budget's ResourceQuota")
            assert quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "64"
            assert quota["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "trainadmit"}
            # the resource-quota controller's first sync (there is none here): nothing used yet
            quota["status"] = {"hard": quota["spec"]["hard"], "used": {k: "0" for k in quota["spec"]["hard"]}}
            http.update_status(quota)
            with webhooks_removed(cp, webhook):
                register_webhooks(cp, front.port, (certs / "ca.crt").read_bytes(), "team-nlp")
                both: list[dict] = []
                tries: list[tuple[int, dict]] = []
                # the race: each replica decides one Job before it sees the other. Whether an attempt makes it is
                # timing (an idle machine's views often see the first Job in time): enough attempts to lose it
                for attempt in range(15):
                    names = [f"race-{attempt}-a", f"race-{attempt}-b"]
                    results = _at_once(http, [forty(n) for n in names])
                    stored = [r for r in results if isinstance(r, dict)]
                    created += stored
                    deciders = {name: _decided_by(replicas, name) for name in names}
                    tries.append((len(stored), deciders))
                    if len(stored) == 2 and set().union(*deciders.values()) == {0, 1}:
                        both = stored
                        break
                    for obj in stored:  # one replica saw the other Job, or decided both: not the race; again
                        http.delete(obj, propagation="Background")
                        created.remove(obj)
                    wait_until(lambda: all(_admitted_dry_run(http, forty("probe-empty")) for _ in replicas),
                               timeout=10, what="the views to forget the deleted Jobs")
                assert both, f"two Jobs created at the same instant through two replicas were never both admitted: {tries}"
                # both are stored: 80 of 64 GPUs. Admission alone did not hold; now it refuses any more, naming both
                wait_until(lambda: not _admitted_dry_run(http, forty("late")), timeout=10, what="both views")
                message = _refusal(http, forty("late"))
                assert "hold 80 of its 64 nvidia.com/gpu" in message and names[0] in message and names[1] in message
            # the Pods, as the Job controller makes them (and as it: the webhooks leave them to it): the quota
            # admits 64 GPUs' worth
            accepted, refused = [], []
            job_controller = http.impersonate("system:serviceaccount:kube-system:job-controller")
            for stored in both:
                for index in range(5):
                    try:
                        created.append(job_controller.create(job_pod(stored, index)))
                        accepted.append(f"{stored['metadata']['name']}-{index}")
                    except KubeError as exc:
                        assert exc.status == 403, exc
                        refused.append(exc.message)
            assert len(accepted) == 8 and len(refused) == 2, (accepted, refused)
            for message in refused:
                assert f'exceeded quota: {BUDGET_NAME}, requested: requests.nvidia.com/gpu=8, ' \
                       'used: requests.nvidia.com/gpu=64, limited: requests.nvidia.com/gpu=64' in message
            used = http.get("v1", "ResourceQuota", BUDGET_NAME, BUDGET_NS)["status"]["used"]
            assert used["requests.nvidia.com/gpu"] == "64"
    finally:
        for obj in reversed(created):
            http.delete(obj, propagation="Background")
        if front is not None:
            front.cut()
        for replica in replicas:
            replica.stop()
