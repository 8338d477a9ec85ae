"""Admit only what can start, in-process: referenced objects and usable nodes from cluster snapshots
(the same ClusterIndex the live view uses), what `check` says without a view, and a stale view.
The integration tier shows the same decisions through a real kube-apiserver."""

from __future__ import annotations

import json
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st
from support.builders import job, rules_of
from support.cli import run_cli
from support.paths import POLICIES
from support.policies import write_policy

from trainadmit.cluster.index import ClusterIndex
from trainadmit.cluster.snapshot import SnapshotCluster
from trainadmit.engine import Request, decide, load_policy

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
# what GPU feature discovery and NFD publish on a healthy H100 node (the bundled pool requires them)
HARDWARE = {"nvidia.com/gpu.count": "8", "nvidia.com/cuda.driver.major": "550",
            "feature.node.kubernetes.io/rdma.capable": "true"}


def node(name, rack="rack-1", *, ready=True, cordoned=False, taints=(), gpus=8, labels=None, pool="h100-ib"):
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"trainadmit.io/pool": pool, "topology.kubernetes.io/rack": rack,
                                                  "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", **HARDWARE,
                                                  **(labels or {})}},
            "spec": {"taints": [GPU_TAINT, *taints], **({"unschedulable": True} if cordoned else {})},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus)},
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def typed_list(kind, api_version, items):
    return {"kind": f"{kind}List", "apiVersion": api_version, "items": items}


def refs(namespace="team-nlp", *, classes=("training-high", "training-normal", "training-low"),
         claims=(("dataset-c4", "ReadOnlyMany"), ("checkpoints-rwx", "ReadWriteMany")), networks=("ib-ipoib",)):
    """A snapshot's reference lists, as the API returns them (typed, so an empty one still counts)."""
    return [
        typed_list("PriorityClass", "scheduling.k8s.io/v1", [{"metadata": {"name": c}} for c in classes]),
        typed_list("PersistentVolumeClaim", "v1", [{"metadata": {"name": n, "namespace": namespace},
                                                    "spec": {"accessModes": [m]}} for n, m in claims]),
        typed_list("NetworkAttachmentDefinition", "k8s.cni.cncf.io/v1",
                   [{"metadata": {"name": n, "namespace": "trainadmit-system"}} for n in networks]),
        # discovery of a 1.36 apiserver with the Workload API and scheduler-plugins' CRD (`kubectl get --raw /apis`,
        # `kubectl get --raw /version`): the bundled policy's auto chooses the native gang
        {"kind": "APIGroupList", "groups": [{"versions": [{"groupVersion": "scheduling.x-k8s.io/v1alpha1"}]},
                                            {"versions": [{"groupVersion": "scheduling.k8s.io/v1alpha2"}]}]},
        {"major": "1", "minor": "36", "gitVersion": "v1.36.2"},
    ]


def healthy_racks(racks=2, per=16):
    return [node(f"r{r}-n{i}", f"rack-{r}") for r in range(1, racks + 1) for i in range(per)]


LLAMA = dict(workers=4, labels={"trainadmit.io/pool": "h100-ib"},
             annotations={"trainadmit.io/datasets": "c4", "trainadmit.io/checkpoint": "shared",
                          "trainadmit.io/priority": "high"})


def test_every_referenced_object_present_admits_and_each_missing_one_is_named(policy):
    full = SnapshotCluster([*healthy_racks(), *refs()])
    assert decide(policy, Request(job(**LLAMA)), full).allowed
    cases = {
        "references.priority-class-missing": (refs(classes=("training-normal",)),
                                              "PriorityClass training-high (priority tier high) does not exist"),
        "references.claim-missing": (refs(claims=(("checkpoints-rwx", "ReadWriteMany"),)),
                                     "PersistentVolumeClaim team-nlp/dataset-c4 (dataset c4) does not exist"),
        "references.network-missing": (refs(networks=()),
                                       "NetworkAttachmentDefinition trainadmit-system/ib-ipoib (RDMA network of pool "
                                       "h100-ib) does not exist"),
    }
    for rule, (lists, text) in cases.items():
        d = decide(policy, Request(job(**LLAMA)), SnapshotCluster([*healthy_racks(), *lists]))
        [v] = [v for v in d.denials if v.rule == rule]
        assert text in v.message and v.hint, (rule, v)
        assert rules_of(d) & {r for r in cases if r != rule} == set()  # only the missing one


def test_claim_access_modes_must_let_every_worker_mount_it(policy):
    rwo = SnapshotCluster([*healthy_racks(), *refs(claims=(("dataset-c4", "ReadWriteOnce"),
                                                           ("checkpoints-rwx", "ReadOnlyMany")))])
    d = decide(policy, Request(job(**LLAMA)), rwo)
    messages = [v.message for v in d.denials if v.rule == "references.claim-access-mode"]
    assert any("dataset-c4 (dataset c4) has access modes ReadWriteOnce; 4 workers on separate nodes reads it, "
               "which needs ReadOnlyMany or ReadWriteMany" in m for m in messages)
    assert any("checkpoints-rwx (checkpoint class shared) has access modes ReadOnlyMany" in m and
               "needs ReadWriteMany" in m for m in messages)
    single = dict(LLAMA, workers=1, annotations={**LLAMA["annotations"], "trainadmit.io/checkpoint": "none"})
    assert "references.claim-access-mode" not in rules_of(decide(policy, Request(job(**single)), rwo))


def test_a_kind_the_cluster_does_not_serve_and_a_missing_queue(tmp_path):
    volcano = load_policy(write_policy(tmp_path / "v", {"gang": {"backend": "volcano", "queue": "training"}}))
    queues = typed_list("Queue", "scheduling.volcano.sh/v1beta1", [{"metadata": {"name": "default"}}])
    served = {"kind": "APIGroupList", "groups": [{"versions": [{"groupVersion": "scheduling.volcano.sh/v1beta1"}]}]}
    d = decide(volcano, Request(job(**LLAMA)), SnapshotCluster([*healthy_racks(), *refs(), queues, served]))
    [v] = [v for v in d.denials if v.rule == "references.queue-missing"]
    assert "Queue training (the workload's Volcano queue) does not exist" in v.message
    assert "create Volcano Queue training" in v.hint
    # the policy's own backend, whose CRD this cluster does not serve: no gang (nothing would ever create its
    # PodGroup), and gang.unavailable says what to install
    cosched = load_policy(write_policy(tmp_path / "c", {"gang": {"backend": "coscheduling"}}))
    without_crd = [*refs()[:3], {"kind": "APIGroupList", "groups": []}]
    d = decide(cosched, Request(job(**LLAMA)), SnapshotCluster([*healthy_racks(), *without_crd]))
    [v] = [v for v in d.violations if v.rule == "gang.unavailable"]
    assert d.allowed and not d.companions and d.summary["gang"] == "none"
    assert "the gang backend coscheduling needs scheduling.x-k8s.io/v1alpha1 (scheduler-plugins (coscheduling)), " \
           "which this cluster does not serve" in v.message
    assert v.hint.startswith("platform team: install scheduler-plugins (coscheduling), or set Platform.spec.gang.backend: auto")


def test_without_a_view_check_lists_what_it_could_not_verify(tmp_path):
    src = tmp_path / "job.yaml"
    src.write_text(json.dumps(job(**LLAMA)))
    r = run_cli("check", str(src), "-p", str(POLICIES))
    assert r.returncode == 0
    assert ("? not verified without a cluster view: the gang backend native/pod-group (without the cluster's "
            "discovery (/version, /apis) auto assumed Kubernetes 1.37 with its Workload API (scheduling.k8s.io/v1beta1) "
            "served), PriorityClass training-high, PersistentVolumeClaim team-nlp/dataset-c4, PersistentVolumeClaim "
            "team-nlp/checkpoints-rwx, NetworkAttachmentDefinition trainadmit-system/ib-ipoib, API "
            "scheduling.k8s.io/v1beta1 (for the PodGroup the reconciler creates)") in r.stdout
    [record] = json.loads(run_cli("check", str(src), "-p", str(POLICIES), "-o", "json").stdout)
    assert len(record["unverified"]) == 6
    snap = tmp_path / "snap.json"
    snap.write_text(json.dumps({"kind": "List", "items": [*healthy_racks(), *refs()]}))
    r = run_cli("check", str(src), "-p", str(POLICIES), "--cluster", str(snap))
    assert r.returncode == 0 and "not verified" not in r.stdout


def test_only_usable_nodes_count_never_fits_is_denied_and_later_is_a_warning(policy):
    rack = [node(f"c{i}", "rack-9", ready=i > 4, cordoned=i in (5, 6),
                 taints=({"key": "nvidia.com/gpu.health", "value": "xid-79", "effect": "NoSchedule"},) if i == 7 else (),
                 gpus=0 if i == 8 else 8) for i in range(1, 17)]
    view = SnapshotCluster([*rack, *refs()])

    def run(workers, **kw):  # in a namespace no Quota covers
        return decide(policy, Request(job(workers=workers, namespace="research", **kw)), view)

    def capacity_rules(d):
        return [v.rule for v in d.violations if v.rule.startswith("capacity.")]

    d = run(14)
    [v] = [v for v in d.denials if v.rule == "capacity.unusable-nodes"]
    assert ("has 16 nodes, 8 usable now and 10 once cordoned nodes return: 4 NotReady (c1, c2, c3, c4); "
            "2 cordoned (c5, c6)") in v.message
    assert "1 with taint nvidia.com/gpu.health=xid-79:NoSchedule not tolerated (c7)" in v.message
    assert "1 with 0 allocatable nvidia.com/gpu (c8)" in v.message and "topology.domain-fit" not in rules_of(d)
    assert capacity_rules(run(9)) == ["capacity.cordoned-nodes"] and run(9).allowed
    assert capacity_rules(run(8)) == [] and run(8).allowed
    # a toleration the user adds makes the tainted node usable for that Job
    tolerant = run(11, extra_spec={"tolerations": [{"key": "nvidia.com/gpu.health", "operator": "Exists"}]})
    assert "capacity.unusable-nodes" not in rules_of(tolerant) and "capacity.cordoned-nodes" in rules_of(tolerant)
    assert "topology.domain-fit" in rules_of(run(17))  # more than the rack has at all: the existing rule


def test_a_pool_health_selector_keeps_unlabelled_nodes_out(tmp_path):
    pools = (POLICIES / "pools.yaml").read_text().replace(
        "  tolerations:\n  - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}\n  topology:\n    default: rack",
        "  tolerations:\n  - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}\n"
        "  healthSelector: {nvidia.com/gpu.healthy: \"true\"}\n  topology:\n    default: rack", 1)
    directory = write_policy(tmp_path / "p")
    (directory / "pools.yaml").write_text(pools)
    policy = load_policy(directory)
    assert policy.pools["h100-ib"].healthSelector == {"nvidia.com/gpu.healthy": "true"}
    rack = [node(f"n{i}", labels={"nvidia.com/gpu.healthy": "true"} if i < 3 else {}) for i in range(8)]
    d = decide(policy, Request(job(workers=4)), SnapshotCluster([*rack, *refs()]))
    [v] = [v for v in d.denials if v.rule == "capacity.unusable-nodes"]
    assert "5 without health label nvidia.com/gpu.healthy=true" in v.message


class Stale(SnapshotCluster):
    def stale(self):
        return "the cluster view is 400s old (nodes last confirmed then), over the limit of 180s"


def test_a_stale_view_is_ignored_and_its_rule_action_decides(tmp_path, policy):
    view = Stale([*healthy_racks(racks=1, per=2), *refs()])  # a view that would deny 4 workers
    d = decide(policy, Request(job(workers=4)), view)
    assert [v.rule for v in d.denials] == ["cluster.view-stale"]
    assert "decided without the cluster view" in d.denials[0].message and d.unverified
    warn = load_policy(write_policy(tmp_path / "w", {"rules": {"storage.shm-exceeds-memory": "warn",
                                                               "cluster.view-stale": "warn"}}))
    d = decide(warn, Request(job(workers=4)), view)
    assert d.allowed and "cluster.view-stale" in {v.rule for v in d.warnings}


def test_snapshot_kinds_are_known_only_when_the_snapshot_holds_them():
    from trainadmit.engine.clusterview import KUEUE_LOCAL_QUEUE, PRIORITY_CLASS, Presence

    plain_empty = SnapshotCluster([{"kind": "List", "items": []}])
    assert plain_empty.reference(PRIORITY_CLASS, "x")[0] is Presence.unknown
    typed_empty = SnapshotCluster([typed_list("PriorityClass", "scheduling.k8s.io/v1", [])])
    assert typed_empty.reference(PRIORITY_CLASS, "x")[0] is Presence.missing
    kubectl = SnapshotCluster([{"kind": "List", "items": [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                                                           "metadata": {"name": "q", "namespace": "a"}}]}])
    assert kubectl.reference(KUEUE_LOCAL_QUEUE, "q", "a")[0] is Presence.present
    assert kubectl.reference(KUEUE_LOCAL_QUEUE, "q", "b")[0] is Presence.missing
    assert kubectl.serves("v1") is None  # no APIGroupList: unknown


@settings(max_examples=50, deadline=None)
@given(events=st.lists(st.tuples(st.integers(0, 20), st.sampled_from(["rack-1", "rack-2"]), st.booleans(),
                                 st.booleans(), st.booleans(), st.booleans()), max_size=60))
def test_capacity_counters_kept_in_place_equal_a_fresh_count(events):
    """Whatever the order of node changes, the usable/cordoned counters equal a count from scratch."""
    policy = load_policy(POLICIES)
    pool = policy.pools["h100-ib"]
    rack, tolerations = pool.topology.level("rack"), tuple(pool.toleration_dicts)
    view = ClusterIndex()
    view.capacity(pool, rack, tolerations)  # the index exists before the events
    current: dict[str, tuple] = {}
    for i, rack_name, ready, cordoned, tainted, delete in events:
        name = f"n{i}"
        if delete:
            view.delete_node({"metadata": {"name": name}})
            current.pop(name, None)
        else:
            taints = ({"key": "x", "effect": "NoExecute"},) if tainted else ()
            view.put_node(node(name, rack_name, ready=ready, cordoned=cordoned, taints=taints))
            current[name] = (rack_name, ready and not tainted and not cordoned, ready and not tainted)
        usable = Counter(r for r, now, _ in current.values() if now)
        eventually = Counter(r for r, _, later in current.values() if later)
        total = Counter(r for r, _, _ in current.values())
        got = view.capacity(pool, rack, tolerations)
        assert (got.usable, got.eventually, got.total) == (max(usable.values(), default=0),
                                                            max(eventually.values(), default=0),
                                                            max(total.values(), default=0))
        whole = view.capacity(pool, None, tolerations)
        assert (whole.usable, whole.eventually, whole.total) == (sum(usable.values()), sum(eventually.values()),
                                                                 len(current))
