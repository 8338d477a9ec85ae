"""Cost of the placement gate's view as the cluster grows: memory of the Pod/Node store and the time the ungater
takes per event (one Pod event applied, then one plan over the whole store), at 500 nodes / 4,000 GPU Pods and at
5,000 nodes / 40,000 GPU Pods, ratios to the small case in the same run.

Run: .venv/bin/python bench/placement_view.py [--rounds 5]

The store keeps only GPU Pods and gated ones, reduced to what placement reads (``cluster.pod_store.PodFacts``), so
its memory follows the GPU Pods, not the cluster's every Pod. A plan reads the whole store (free room per node,
every gated gang): its cost grows with the GPU Pods; admission never reads this store, so a decision's latency
does not depend on it (``bench/cluster_view.py`` measures the admission side). The cluster: racks of 16 nodes of
8 GPUs, every node full of 8 one-GPU Pods bound to it except one rack left free, and one 4-Pod gated gang waiting
for a rack (``trainadmit.io/placement``), so each plan chooses a domain.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import tracemalloc

from trainadmit.cluster.placement import Ledger, plan
from trainadmit.cluster.pod_store import PodStore

GATE, DOMAIN, RACK = "trainadmit.io/placement", "trainadmit.io/placement-domain", "topology.kubernetes.io/rack"


def node(i: int) -> dict:
    return {"metadata": {"name": f"n{i:05d}", "labels": {RACK: f"r{i // 16:04d}", "trainadmit.io/pool": "h100"}},
            "spec": {}, "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "96", "pods": "110"},
                                   "conditions": [{"type": "Ready", "status": "True"}]}}


def pod(name: str, node_name: str, gated: bool = False) -> dict:
    spec: dict = {"containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": "8" if gated else "1"}}}],
                  "nodeSelector": {"trainadmit.io/pool": "h100"}}
    annotations = {}
    if gated:
        spec["schedulingGates"] = [{"name": GATE}]
        annotations[GATE] = json.dumps({"gang": "team/gang", "size": 4, "key": RACK, "level": "rack",
                                        "pool": {"trainadmit.io/pool": "h100"}})
    else:
        spec["nodeName"] = node_name
    return {"metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}", "annotations": annotations,
                         "creationTimestamp": "2026-12-02T10:00:00Z"},
            "spec": spec, "status": {"phase": "Pending" if gated else "Running"}}


def build(nodes: int) -> PodStore:
    store = PodStore(GATE, DOMAIN)
    store.replace("nodes", [node(i) for i in range(nodes)])
    free = {f"n{i:05d}" for i in range(16)}  # rack r0000 has room for the gang
    bound = [pod(f"p{i:05d}-{k}", f"n{i:05d}") for i in range(nodes) if f"n{i:05d}" not in free for k in range(8)]
    store.replace("pods", bound + [pod(f"gang-{k}", "", gated=True) for k in range(4)])
    return store


def measure(nodes: int, rounds: int) -> dict:
    tracemalloc.start()
    store = build(nodes)
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    times = []
    for r in range(rounds):
        started = time.perf_counter()
        store.apply("pods", "MODIFIED", pod(f"p{nodes - 1:05d}-0", f"n{nodes - 1:05d}") | {"status": {
            "phase": "Running" if r % 2 else "Pending"}})
        pods, view = store.snapshot()
        releases, _ = plan(pods, view, Ledger())
        times.append(time.perf_counter() - started)
        assert releases and releases[0].domain == "r0000", releases
    return {"nodes": nodes, "pods": len(store.pods), "memory_mb": held / 2**20,
            "per_event_ms": statistics.median(times) * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    small, large = measure(500, args.rounds), measure(5000, args.rounds)
    print(f"{'nodes':>6} {'GPU Pods':>9} {'store MiB':>10} {'per event ms':>13}")
    for row in (small, large):
        print(f"{row['nodes']:>6} {row['pods']:>9} {row['memory_mb']:>10.1f} {row['per_event_ms']:>13.1f}")
    print(f"ratio 5,000/500 nodes: memory {large['memory_mb'] / small['memory_mb']:.1f}x, "
          f"per event {large['per_event_ms'] / small['per_event_ms']:.1f}x (10x the Pods)")


if __name__ == "__main__":
    main()
