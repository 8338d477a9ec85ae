"""Each rule fires on a Job that breaks it and stays quiet on one that does not."""

from __future__ import annotations

from support.builders import job, rules_of
from support.paths import FIXTURES

from trainadmit.cluster.snapshot import SnapshotCluster
from trainadmit.engine import Request, decide
from trainadmit.policy.models import Action


def run(policy, obj, cluster=None):
    return decide(policy, Request(obj), cluster)


def test_whole_node_denial_reads_like_advice(policy):
    d = run(policy, job(workers=4, gpus=6))
    [v] = [v for v in d.denials if v.rule == "topology.whole-node"]
    assert v.message == ("requests 6 GPUs per worker across 4 workers; pool h100-ib has 8 GPUs per node: "
                         "multi-node workers must take whole nodes")
    # in the Job's own fields, with values that pass: 24 GPUs on whole 8-GPU nodes are 3 workers
    assert v.hint == ('set spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"]: 8 and '
                      "spec.parallelism: 3 and spec.completions: 3")
    assert v.path == 'spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"]'
    assert "topology.whole-node" not in rules_of(run(policy, job(workers=4, gpus=8)))


def test_uneven_total_mentions_the_rounded_total(policy):
    d = run(policy, job(workers=3, gpus=5))
    [v] = [v for v in d.denials if v.rule == "topology.whole-node"]
    assert v.hint == ('set spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"]: 8 and '
                      "spec.parallelism: 2 and spec.completions: 2 (16 GPUs in all)")


def test_single_pod_must_fit_one_node(policy):
    d = run(policy, job(workers=1, gpus=16))
    assert "topology.single-node-fit" in rules_of(d)
    assert next(v.hint for v in d.denials if v.rule == "topology.single-node-fit") == (
        'set spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"]: 8 and spec.parallelism: 2 and '
        "spec.completions: 2")
    assert "topology.single-node-fit" not in rules_of(run(policy, job(workers=1, gpus=8)))


def test_domain_fit_suggests_the_next_level(policy):
    d = run(policy, job(workers=16, gpus=8, annotations={"trainadmit.io/topology": "node"}))
    v = next(v for v in d.denials if v.rule == "topology.domain-fit")
    assert "largest node of pool h100-ib has 1 nodes" in v.message
    # by hand: one node holds 1 worker; at a larger level the namespace's gpuQuota (64, Quota team-nlp) holds 8 of
    # 8 GPUs, which a rack (16 nodes) holds
    assert v.hint == ("set spec.parallelism: 1 and spec.completions: 1, or set trainadmit.io/topology: rack and "
                      "spec.parallelism: 8 and spec.completions: 8")
    assert "topology.domain-fit" not in rules_of(run(policy, job(workers=16, annotations={"trainadmit.io/topology": "rack"})))
    assert "topology.domain-fit" not in rules_of(run(policy, job(workers=16, annotations={"trainadmit.io/topology": "any"})))


def test_gang_shape(policy):
    d = run(policy, job(indexed=False, completions=8))
    assert {"gang.completion-mode", "gang.parallelism-completions"} <= rules_of(d)
    assert not {"gang.completion-mode", "gang.parallelism-completions"} & rules_of(run(policy, job()))
    # a user who opts out of the gang is not held to the gang's shape
    d = run(policy, job(indexed=False, completions=8, annotations={"trainadmit.io/gang": "false"}))
    assert not {"gang.completion-mode", "gang.parallelism-completions"} & rules_of(d)
    assert "scheduling" not in d.mutated["spec"]


def test_gpu_requests_and_limits(policy):
    bad = job(container={"resources": {"requests": {"nvidia.com/gpu": 8}}})
    assert "gpu.requests-limits" in rules_of(run(policy, bad))
    unequal = job(container={"resources": {"requests": {"nvidia.com/gpu": 4}, "limits": {"nvidia.com/gpu": 8}}})
    assert "gpu.requests-limits" in rules_of(run(policy, unequal))
    same = job(container={"resources": {"requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": 8}}})
    assert "gpu.requests-limits" not in rules_of(run(policy, same))
    fractional = job(container={"resources": {"limits": {"nvidia.com/gpu": "0.5"}}})
    assert "gpu.invalid-count" in rules_of(run(policy, fractional))


def test_one_gpu_type_per_job(policy):
    obj = job()
    obj["spec"]["template"]["spec"]["containers"].append(
        {"name": "side", "image": "x", "resources": {"limits": {"nvidia.com/mig-1g.10gb": 1}}})
    assert "gpu.single-type" in rules_of(run(policy, obj))
    assert "gpu.single-type" not in rules_of(run(policy, job()))


def test_rdma_only_on_rdma_pools(policy):
    obj = job(workers=2, gpus=4, labels={"trainadmit.io/pool": "l40s-eth"},
              container={"resources": {"limits": {"nvidia.com/gpu": 4, "rdma/rdma_shared_device_a": 1}}})
    d = run(policy, obj)
    assert "rdma.pool-without-rdma" in rules_of(d)
    assert "h100-ib" in next(v.hint for v in d.denials if v.rule == "rdma.pool-without-rdma")
    assert "rdma.pool-without-rdma" not in rules_of(run(policy, job(workers=2, gpus=4, labels={"trainadmit.io/pool": "l40s-eth"})))


def test_node_selector_contradicting_the_pool(policy):
    d = run(policy, job(extra_spec={"nodeSelector": {"trainadmit.io/pool": "l40s-eth"}}))
    v = next(v for v in d.denials if v.rule == "placement.contradiction")
    assert "set trainadmit.io/pool: l40s-eth" in v.hint
    # the pool's own value is fine
    assert "placement.contradiction" not in rules_of(run(policy, job(extra_spec={"nodeSelector": {"trainadmit.io/pool": "h100-ib"}})))
    affinity = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-A100"]}]}]}}}}
    assert "placement.contradiction" in rules_of(run(policy, job(extra_spec=affinity)))
    ok = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-A100"]}]},
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "Exists"}]}]}}}}
    assert "placement.contradiction" not in rules_of(run(policy, job(extra_spec=ok)))


def test_intent_typos_list_the_known_names(policy):
    d = run(policy, job(labels={"trainadmit.io/pool": "h100"}, annotations={
        "trainadmit.io/datasets": "c4,c5", "trainadmit.io/priority": "urgent", "trainadmit.io/checkpoint": "fast",
        "trainadmit.io/gang": "yes"}))
    assert {"intent.unknown-pool", "intent.unknown-dataset", "intent.unknown-priority",
            "intent.unknown-checkpoint", "intent.invalid"} <= rules_of(d)
    assert next(v.hint for v in d.denials if v.rule == "intent.unknown-pool") == "use one of: h100-ib, l40s-eth"
    topo = run(policy, job(annotations={"trainadmit.io/topology": "pod"}))
    assert next(v.hint for v in topo.denials if v.rule == "intent.unknown-topology") == \
        "use one of: node, rack, zone, any"


def test_nccl_values_are_checked_against_the_documented_grammar(policy):
    d = run(policy, job(env=[{"name": "NCCL_IB_HCA", "value": "mlx5_0:x"}, {"name": "NCCL_ALGO", "value": "ring,bogus"}]))
    assert sum(v.rule == "nccl.syntax" for v in d.denials) == 2
    warn = run(policy, job(env=[{"name": "NCCL_IB_HCA", "value": "mlx5_0"}, {"name": "NCCL_PROTO", "value": "Simple"}]))
    assert {"nccl.syntax-warning", "nccl.debugging-variable"} <= {v.rule for v in warn.warnings}
    assert warn.allowed


def test_quota_rules_and_namespace_resource_quota(policy):
    d = run(policy, job(namespace="team-vision", workers=8, annotations={"trainadmit.io/priority": "high"}))
    assert {"quota.gpus-per-job", "quota.priority-not-allowed"} <= rules_of(d)
    assert "quota.workers-per-job" not in rules_of(d)  # teams allow 8 workers
    assert "quota.workers-per-job" in rules_of(run(policy, job(namespace="team-vision", workers=9)))
    cluster = SnapshotCluster.from_files([str(FIXTURES / "apiserver" / "resourcequotas-list-with-usage.json")])
    # team-nlp: hard 64, used 48 -> 16 free; 4 x 8 = 32 needed
    d = run(policy, job(workers=4), cluster)
    v = next(v for v in d.denials if v.rule == "quota.namespace-remaining")
    assert "has 16 of 64 free" in v.message
    assert v.hint == "wait for running jobs to finish, or set spec.parallelism: 2 and spec.completions: 2"
    assert "quota.namespace-remaining" not in rules_of(run(policy, job(workers=2), cluster))
    assert "quota.namespace-hard" in rules_of(run(policy, job(workers=9), cluster))


def test_cluster_snapshot_drives_domain_and_capacity(policy):
    cluster = SnapshotCluster.from_files([str(FIXTURES / "apiserver" / "nodes-list.json")])
    pool = policy.pools["h100-ib"]
    assert cluster.pool_nodes(pool) == 4
    assert cluster.largest_domain(pool, pool.topology.level("rack")) == 2
    d = run(policy, job(workers=3), cluster)
    v = next(v for v in d.denials if v.rule == "topology.domain-fit")
    assert "largest rack of pool h100-ib has 2 nodes (in the cluster)" in v.message
    # the captured nodes are NotReady and carry none of the pool's required node labels: no size of the Job passes
    # every size rule, and a larger level is no fix either
    assert v.hint == ("no size of this Job passes every size rule (at its smallest, 1 × 8 GPUs): 0 nodes of pool "
                      "h100-ib have its required node labels; pool h100-ib has 0 usable nodes")
    assert "quota.pool-capacity" in rules_of(run(policy, job(workers=5, annotations={"trainadmit.io/topology": "any"}), cluster))
    assert not rules_of(run(policy, job(workers=2), cluster)) & {"topology.domain-fit", "quota.pool-capacity"}


def test_enforced_fields_deny_conflicts_and_unenforced_respect_the_user(policy):
    d = run(policy, job(extra_spec={"priorityClassName": "my-own"}))
    assert "enforced.conflict" in rules_of(d)
    env = [{"name": "NCCL_SOCKET_IFNAME", "value": "=ib0"}]
    d = run(policy, job(env=env))
    assert d.allowed
    values = [e for e in d.mutated["spec"]["template"]["spec"]["containers"][0]["env"] if e["name"] == "NCCL_SOCKET_IFNAME"]
    assert values == [{"name": "NCCL_SOCKET_IFNAME", "value": "=ib0"}]


def test_rule_actions_can_be_overridden(tmp_path):
    from support.policies import write_policy

    from trainadmit.engine import load_policy

    p = load_policy(write_policy(tmp_path, {"rules": {"topology.whole-node": "warn", "gang.completion-mode": "off"}}))
    d = decide(p, Request(job(workers=4, gpus=6, indexed=False)))
    assert d.allowed
    assert [v.action for v in d.violations if v.rule == "topology.whole-node"] == [Action.warn]
    assert "gang.completion-mode" not in rules_of(d)


def test_shm_larger_than_memory_warns_about_the_users_own_volume_only(policy):
    """trainadmit's /dev/shm is sized to fit (half of a 32Gi limit: 16Gi), so its own rule never warns about it;
    a user's memory-backed /dev/shm that may outgrow the container's memory limit is warned about."""
    d = run(policy, job(container={"resources": {"limits": {"nvidia.com/gpu": 8, "memory": "32Gi"}}}))
    assert "storage.shm-exceeds-memory" not in rules_of(d)
    [volume] = [v for v in d.mutated["spec"]["template"]["spec"]["volumes"] if v["name"] == "ta-dshm"]
    assert volume["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}
    own = job(container={"resources": {"limits": {"nvidia.com/gpu": 8, "memory": "32Gi"}},
                         "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]},
              extra_spec={"volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}]})
    [v] = [v for v in run(policy, own).warnings if v.rule == "storage.shm-exceeds-memory"]
    assert v.path == 'spec.template.spec.containers[0].resources.limits.memory'
    assert v.hint == ("set spec.template.spec.containers[0].resources.limits.memory above 64Gi, or the sizeLimit of "
                      "volume dshm below 32Gi")
    d = run(policy, job(container={"resources": {"limits": {"nvidia.com/gpu": 8, "memory": "1Ti"}}}))
    assert "storage.shm-exceeds-memory" not in rules_of(d)


def test_exempt_users_and_groups_pass_untouched(tmp_path):
    from support.policies import write_policy

    from trainadmit.engine import load_policy

    p = load_policy(write_policy(tmp_path, {"exemptGroups": ["platform:break-glass"], "exemptUsers": ["ci-bot"]}))
    bad = job(workers=4, gpus=6)
    assert not decide(p, Request(bad, user={"username": "alice", "groups": ["devs"]})).allowed
    d = decide(p, Request(bad, user={"username": "bob", "groups": ["devs", "platform:break-glass"]}))
    assert d.allowed and not d.matched and "platform:break-glass is exempt" in d.reason
    assert not decide(p, Request(bad, user={"username": "ci-bot"})).matched


def test_enforced_nccl_env_conflict_is_denied(tmp_path):
    from support.policies import write_policy

    from trainadmit.engine import load_policy

    p = load_policy(write_policy(tmp_path, {"enforce": ["ncclEnv"]}))
    d = decide(p, Request(job(env=[{"name": "NCCL_SOCKET_IFNAME", "value": "=ib0"}])))
    v = next(v for v in d.denials if v.rule == "enforced.conflict")
    assert "ncclEnv" in v.message and v.hint == ("set spec.template.spec.containers[0].env[0].value: '=eth0' (or leave "
                                                    "it out: the platform sets it)")
    assert decide(p, Request(job(env=[{"name": "NCCL_SOCKET_IFNAME", "value": "=eth0"}]))).allowed


def test_cluster_support_warning_names_the_missing_gates(tmp_path):
    from support.policies import write_policy

    from trainadmit.engine import load_policy

    p = load_policy(write_policy(tmp_path, {"featureGates": [], "kubernetesVersion": "1.37",
                                            "gang": {"backend": "native", "nativeMode": "job-scheduling"}}))
    texts = [v.message for v in decide(p, Request(job())).notes if v.rule == "gang.cluster-support"]
    assert any("need feature gate(s) GenericWorkload, WorkloadWithJob" in t for t in texts), texts
    old = load_policy(write_policy(tmp_path / "136", {"featureGates": ["GenericWorkload"], "kubernetesVersion": "1.36",
                                                      "gang": {"backend": "native", "nativeMode": "pod-group"}}))
    texts = [v.message for v in decide(old, Request(job())).notes if v.rule == "gang.cluster-support"]
    assert [t for t in texts if "GangScheduling" in t] and not [t for t in texts if "need feature gate(s)" in t]
    # auto: with WorkloadWithJob declared a 1.37 cluster gets Job.spec.scheduling, and nothing is missing
    full = load_policy(write_policy(tmp_path / "ok", {"featureGates": [
        "GenericWorkload", "WorkloadWithJob", "TopologyAwareWorkloadScheduling"]}))
    d = decide(full, Request(job()))
    assert d.summary["gang"] == "native/job-scheduling"
    assert not [v for v in d.violations if v.rule == "gang.cluster-support"]


def test_a_gang_job_names_its_scheduler_once(tmp_path):
    """A Volcano gang Job whose user set another scheduler: one warning on that path, not one per call."""
    from support.policies import BACKENDS, write_policy

    from trainadmit.engine import load_policy

    volcano = load_policy(write_policy(tmp_path / "volcano", BACKENDS["volcano"]))
    obj = job(extra_spec={"schedulerName": "my-scheduler"})
    d = decide(volcano, Request(obj, "CREATE"))
    warnings = [v for v in d.violations if v.rule == "gang.foreign-backend"]
    assert [v.path for v in warnings] == ["spec.template.spec.schedulerName"], warnings


def test_a_generate_name_job_is_named_and_gets_its_coscheduling_gang(tmp_path):
    """A generateName Job (no name during admission) under coscheduling, whose PodGroup and Pod label are named
    after the Job: the decision names it first (<generateName>xxxxx without a drawn name) and gangs it."""
    from support.policies import BACKENDS, write_policy

    from trainadmit.engine import load_policy

    cosched = load_policy(write_policy(tmp_path / "coscheduling", BACKENDS["coscheduling"]))
    obj = job()
    prefix = obj["metadata"].pop("name") + "-"
    obj["metadata"]["generateName"] = prefix
    d = decide(cosched, Request(obj, "CREATE"))
    assert "gang.name-required" not in rules_of(d)
    assert d.summary["gang"] == "coscheduling" and d.summary["name"] == f"{prefix}xxxxx"
    assert d.patch[0] == {"op": "add", "path": "/metadata/name", "value": f"{prefix}xxxxx"}
    assert d.mutated["spec"]["template"]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == f"{prefix}xxxxx"
    assert [c["metadata"]["name"] for c in d.companions] == [f"{prefix}xxxxx"]
