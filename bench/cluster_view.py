"""Cost of the engine's cluster-view questions as the cluster grows (100, 1,000, 10,000 nodes).

Run: .venv/bin/python bench/cluster_view.py [--scale [--rounds 200] [--rate 500] [--seconds 6]]

DESIGN §8 asks that the cost per request stay flat as the cluster view grows. The live view keeps
per-pool indices updated by watch events, so a request only reads counters; the snapshot view
(`check --cluster`) computes them once per pool. Reported: µs per request-worth of questions
(pool size, largest domains, usable capacity of the largest rack for the workload's tolerations,
nodes with the pool's required labels, namespace quota, the PriorityClass, two claims, the network,
a served API) and the ratio to the 100-node case, same run. Every tenth node is unusable (NotReady,
cordoned or tainted), so the capacity index classifies as it does in a real cluster.

``--scale`` (issue 29: 5,000 nodes and 40,000 Pods, against 500 nodes and 4,000 Pods in the same run): what the elected
replica keeps and does once Pods are part of its view, measured on the live view (``cluster.live``) beside the
placement gate's Pod/Node store built as ``bench/placement_view.py`` builds it (every node full of one-GPU Pods but
one free rack, a gated 4-Pod gang; that bench measures the store alone and the ungater's pass per event):

- memory of the view and the Pod store together (tracemalloc, what building them keeps);
- event lag: Pod and Node watch events arriving at a steady rate, each applied as the watch threads apply them
  (``PodStore.apply``, ``LiveCluster.put_node``) while the ungater's loop (``cluster.placement.run``) plans the whole
  store on every change, as in the elected replica; lag = applied minus arrival, p50 / p99 / max;
- a decision's latency: ``engine.decide`` of examples/llama-pretrain.yaml against the live view, with the event stream
  and the ungater running beside it (the same threads in one process, as in the server's main process) and without;
  its ratio to the small cluster's, same run.
"""

from __future__ import annotations

import argparse
import os
import queue
import statistics
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import yaml

from trainadmit.cluster.live import LiveCluster
from trainadmit.cluster.placement import Ledger, plan, run
from trainadmit.engine import Request, decide, load_policy
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


def _lag(view: LiveCluster, store, nodes: int, rate: float, seconds: float) -> dict:
    """Events at ``rate`` per second for ``seconds``, applied by one thread as the watches apply them, while the
    ungater's loop plans on every change; returns the lags (s) and the number of plans."""
    sys.path.insert(0, str(ROOT / "bench"))
    from placement_view import node as node_object
    from placement_view import pod as pod_object

    events: queue.Queue = queue.Queue()
    lags: list[float] = []
    plans = [0]
    stop = threading.Event()

    def step() -> None:
        pods, view_nodes = store.snapshot()
        plan(pods, view_nodes, Ledger())
        plans[0] += 1

    def apply() -> None:
        while (item := events.get()) is not None:
            due, kind, obj = item
            if kind == "nodes":
                view.put_node(obj)
            store.apply(kind, "MODIFIED", obj)
            lags.append(time.perf_counter() - due)

    ungater = threading.Thread(target=run, args=(step, store, stop), kwargs={"renew": 5.0}, daemon=True)
    applier = threading.Thread(target=apply, daemon=True)
    ungater.start(), applier.start()
    count = int(rate * seconds)
    start = time.perf_counter()
    for i in range(count):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        if i % 10 == 9:  # a node's status update (a kubelet heartbeat): the view and the store read it
            events.put((due, "nodes", node_object(i % nodes)))
        else:  # a Pod of a full node changes phase
            n = (i * 7919) % nodes
            if n < 16:
                n += 16
            obj = pod_object(f"p{n:05d}-{i % 8}", f"n{n:05d}")
            obj["status"]["phase"] = "Running" if (i // nodes) % 2 else "Pending"
            events.put((due, "pods", obj))
    events.put(None)
    applier.join()
    stop.set()
    store.changed.set()
    ungater.join(timeout=30)
    return {"lags": lags, "plans": plans[0]}


def _decision_ms(policy, job: dict, view: LiveCluster, rounds: int) -> float:
    """Median of ``rounds`` decisions of ``job`` against ``view``, in ms (each a fresh copy of the object)."""
    times = []
    for _ in range(rounds):
        obj = yaml.safe_load(yaml.safe_dump(job))
        started = time.perf_counter()
        decision = decide(policy, Request(obj), view)
        times.append(time.perf_counter() - started)
        assert decision.matched
    return statistics.median(times) * 1000


def _scale_row(build_store, policy, job: dict, nodes: int, rounds: int, rate: float, seconds: float) -> dict:
    """One size of ``--scale``: memory, event lag, decision latency alone and beside the events."""
    tracemalloc.start()
    view = build(nodes)
    view_bytes = tracemalloc.get_traced_memory()[0]
    store = build_store(nodes)
    total = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    _decision_ms(policy, job, view, 3)  # warm: the policy's caches, the view's indices
    quiet = _decision_ms(policy, job, view, rounds)
    busy: list[float] = []
    result: dict = {}
    worker = threading.Thread(target=lambda: busy.append(_decision_ms(policy, job, view, rounds)), daemon=True)
    lagger = threading.Thread(target=lambda: result.update(_lag(view, store, nodes, rate, seconds)), daemon=True)
    lagger.start(), worker.start()
    worker.join(), lagger.join()
    lags = sorted(result["lags"])
    return {"nodes": nodes, "pods": len(store.pods), "view": view_bytes / 2**20, "total": total / 2**20,
            "p50": lags[len(lags) // 2] * 1000, "p99": lags[int(len(lags) * 0.99)] * 1000, "max": lags[-1] * 1000,
            "plans": result["plans"], "quiet": quiet, "busy": busy[0]}


def scale(rounds: int, rate: float, seconds: float) -> None:
    """The ``--scale`` section of the module docstring."""
    sys.path.insert(0, str(ROOT / "bench"))
    from placement_view import build as build_store

    policy = load_policy(ROOT / "policies")
    job = yaml.safe_load((ROOT / "examples" / "llama-pretrain.yaml").read_text())
    print(f"# load average {os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f} (1, 5 min); {rate:.0f} events/s for "
          f"{seconds:.0f} s; decisions: median of {rounds}")
    print(f"{'nodes':>6} {'Pods':>7} {'view MiB':>9} {'+ store MiB':>12} {'lag p50 ms':>11} {'p99':>7} {'max':>7} "
          f"{'plans':>6} {'decide ms':>10} {'beside events':>14}")
    rows = []
    for nodes in (500, 5000):
        row = _scale_row(build_store, policy, job, nodes, rounds, rate, seconds)
        rows.append(row)
        print(f"{nodes:>6} {row['pods']:>7} {row['view']:>9.1f} {row['total']:>12.1f} {row['p50']:>11.1f} "
              f"{row['p99']:>7.1f} {row['max']:>7.1f} {row['plans']:>6} {row['quiet']:>10.2f} {row['busy']:>14.2f}")
    small, large = rows
    print(f"5,000 / 500 nodes: memory {large['total'] / small['total']:.1f}x (10x the Pods), decision "
          f"{large['quiet'] / small['quiet']:.2f}x alone and {large['busy'] / small['busy']:.2f}x beside the events; "
          f"load average now {os.getloadavg()[0]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", action="store_true", help="the view with the Pod store at 5,000 nodes / 40,000 Pods")
    parser.add_argument("--rounds", type=int, default=200, help="decisions per measurement (--scale)")
    parser.add_argument("--rate", type=float, default=500.0, help="watch events per second (--scale)")
    parser.add_argument("--seconds", type=float, default=6.0, help="how long the events arrive (--scale)")
    args = parser.parse_args()
    if args.scale:
        scale(args.rounds, args.rate, args.seconds)
        return
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
