"""Cost of the engine's cluster-view questions as the cluster grows (100, 1,000, 10,000 nodes).

Run: .venv/bin/python bench/cluster_view.py

DESIGN §8 asks that the cost per request stay flat as the cluster view grows. The live view keeps
per-pool indices updated by watch events, so a request only reads counters; the snapshot view
(`check --cluster`) computes them once per pool. Reported: µs per request-worth of questions
(pool size, largest domains, usable capacity of the largest rack for the workload's tolerations,
nodes with the pool's required labels, namespace quota, the PriorityClass, two claims, the network,
a served API) and the ratio to the 100-node case, same run. Every tenth node is unusable (NotReady,
cordoned or tainted), so the capacity index classifies as it does in a real cluster.
"""

from __future__ import annotations

import time
from pathlib import Path

from trainadmit.cluster.live import LiveCluster
from trainadmit.engine import load_policy
from trainadmit.engine.clusterview import NETWORK_ATTACHMENT, PERSISTENT_VOLUME_CLAIM, PRIORITY_CLASS

ROOT = Path(__file__).resolve().parent.parent



def build(n: int) -> LiveCluster:
    view = LiveCluster(core=None, log=lambda m: None)
    for i in range(n):
        taints = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
        if i % 10 == 3:
            taints.append({"key": "nvidia.com/gpu.health", "value": "xid-79", "effect": "NoSchedule"})
        view.put_node({"metadata": {"name": f"n{i}", "labels": {
            "trainadmit.io/pool": "h100-ib", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "topology.kubernetes.io/rack": f"r{i // 16}", "topology.kubernetes.io/zone": f"z{i // 512}",
            "nvidia.com/gpu.count": "8", "nvidia.com/cuda.driver.major": "550" if i % 10 else "535",
            "feature.node.kubernetes.io/rdma.capable": "true"}},
            "spec": {"taints": taints, "unschedulable": i % 10 == 5},
            "status": {"allocatable": {"nvidia.com/gpu": "8"},
                       "conditions": [{"type": "Ready", "status": "False" if i % 10 == 7 else "True"}]}})
    for ns in range(50):
        view.put_quota({"metadata": {"namespace": f"team-{ns}", "name": "gpu"},
                         "status": {"hard": {"requests.nvidia.com/gpu": "64"}, "used": {"requests.nvidia.com/gpu": "8"}}})
        for claim in ("dataset-c4", "checkpoints-rwx"):
            view.put_ref(PERSISTENT_VOLUME_CLAIM, {"metadata": {"namespace": f"team-{ns}", "name": claim},
                                                   "spec": {"accessModes": ["ReadWriteMany"]}})
    for name in ("training-high", "training-normal", "training-low"):
        view.put_ref(PRIORITY_CLASS, {"metadata": {"name": name}})
    view.put_ref(NETWORK_ATTACHMENT, {"metadata": {"namespace": "trainadmit-system", "name": "ib-ipoib"}})
    view.set_served({"v1", "scheduling.x-k8s.io/v1alpha1"})
    view.synced.set()
    return view


def main() -> None:
    policy = load_policy(ROOT / "policies")
    pool = policy.pools["h100-ib"]
    rack, zone = pool.topology.level("rack"), pool.topology.level("zone")
    required = pool.requiredNodeLabels
    results = {}
    for n in (100, 1_000, 10_000):
        view = build(n)
        tolerations = tuple(pool.toleration_dicts)
        view.pool_nodes(pool), view.largest_domain(pool, rack), view.largest_domain(pool, zone)
        view.pool_nodes_matching(pool, required)
        view.capacity(pool, rack, tolerations)
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(5000):
                view.pool_nodes(pool)
                view.largest_domain(pool, rack)
                view.largest_domain(pool, zone)
                view.capacity(pool, rack, tolerations)
                view.gpu_quota("team-7", "nvidia.com/gpu")
                view.pool_nodes_matching(pool, required)
                view.reference(PRIORITY_CLASS, "training-normal")
                view.reference(PERSISTENT_VOLUME_CLAIM, "dataset-c4", "team-7")
                view.reference(PERSISTENT_VOLUME_CLAIM, "checkpoints-rwx", "team-7")
                view.reference(NETWORK_ATTACHMENT, "ib-ipoib", "trainadmit-system")
                view.serves("scheduling.x-k8s.io/v1alpha1")
            best = min(best, (time.perf_counter() - start) / 5000)
        results[n] = best
        print(f"{n:>6} nodes: {best * 1e6:7.2f} µs per request ({best / results[100]:.2f}x the 100-node cost)")


if __name__ == "__main__":
    main()
