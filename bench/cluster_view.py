"""Cost of the engine's cluster-view questions as the cluster grows (100, 1,000, 10,000 nodes).

Run: .venv/bin/python bench/cluster_view.py

DESIGN §8 asks that the cost per request stay flat as the cluster view grows. The live view keeps
per-pool indices updated by watch events, so a request only reads counters; the snapshot view
(`check --cluster`) computes them once per pool. Reported: µs per request-worth of questions
(pool size + largest domain + namespace quota + nodes with the pool's required labels) and the
ratio to the 100-node case, same run.
"""

from __future__ import annotations

import time
from pathlib import Path

from trainadmit.cluster.live import LiveCluster
from trainadmit.engine import load_policy

ROOT = Path(__file__).resolve().parent.parent



def build(n: int) -> LiveCluster:
    view = LiveCluster(core=None, log=lambda m: None)
    for i in range(n):
        view.put_node({"metadata": {"name": f"n{i}", "labels": {
            "trainadmit.io/pool": "h100-ib", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "topology.kubernetes.io/rack": f"r{i // 16}", "topology.kubernetes.io/zone": f"z{i // 512}",
            "nvidia.com/gpu.count": "8", "nvidia.com/cuda.driver.major": "550" if i % 10 else "535",
            "feature.node.kubernetes.io/rdma.capable": "true"}}})
    for ns in range(50):
        view.put_quota({"metadata": {"namespace": f"team-{ns}", "name": "gpu"},
                         "status": {"hard": {"requests.nvidia.com/gpu": "64"}, "used": {"requests.nvidia.com/gpu": "8"}}})
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
        view.pool_nodes(pool), view.largest_domain(pool, rack), view.largest_domain(pool, zone)
        view.pool_nodes_matching(pool, required)
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(5000):
                view.pool_nodes(pool)
                view.largest_domain(pool, rack)
                view.largest_domain(pool, zone)
                view.gpu_quota("team-7", "nvidia.com/gpu")
                view.pool_nodes_matching(pool, required)
            best = min(best, (time.perf_counter() - start) / 5000)
        results[n] = best
        print(f"{n:>6} nodes: {best * 1e6:7.2f} µs per request ({best / results[100]:.2f}x the 100-node cost)")


if __name__ == "__main__":
    main()
