"""Time to start, as a user sees it: from ``kubectl create`` until every Pod of a gang (16 workers) is bound.

Run: KUBEBUILDER_ASSETS=/work/k8s-assets .venv/bin/python bench/time_to_start.py [--rounds 5] [--sizes 64,1000]
     [--cluster gang|stock|workload] [--workers 16] [--rack-size 16]

The outcome tier's control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler 1.36
with native gang scheduling, ``tests/support/kube_fixtures.py``), fake H100 nodes of the bundled pool in racks
of 16 (``tests/support/pool_nodes.py``), and trainadmit as deploy/ runs it (``serve --cluster-live --reconcile``,
2 workers, deploy/'s webhook configurations), with the bundled policy retargeted at this cluster
(1.36, native pod-group, the PodGroup's topology constraint). The Job: the Kubernetes documentation's
Indexed Job asking for 16 whole nodes in one rack. Two modes, alternating round by round so that
machine noise hits them alike:

- ``trainadmit``: the user's Job as written; trainadmit mutates it, its reconciler makes the PodGroup;
- ``hand``: no webhook configuration; the same Job as trainadmit would make it, written by hand, and
  its PodGroup, in one ``kubectl create``.

``--cluster stock``: a stock 1.36.2 control plane (no feature gates: no gang scheduler) with the bundled policies as
shipped, where trainadmit holds the rack with its placement gate (the ungater of ``serve --reconcile`` releases all 16
Pods into one rack); by hand, the same Job with the rack written into its node selector and no gate.
``--cluster workload``: the Workload API + GangScheduling and no TopologyAwareWorkloadScheduling
(``kube_fixtures.WORKLOAD_FEATURES``), the bundled policies with those gates declared: the reconciler's PodGroup gangs
the Pods and the placement gate holds the rack; by hand, the Job with the rack in its node selector, no gate, and
its PodGroup, in one ``kubectl create``. ``--workers``/``--rack-size`` size the Job and the racks (the issue's
8-node cluster: ``--workers 4 --rack-size 4``, two racks of 4).

Each round times ``kubectl create`` to the 16th binding (polling the Pods every 20 ms; also when the
PodGroup first exists: by hand it comes with the Job, from trainadmit on the reconciler's pass), then deletes
the Job, its PodGroup and Pods (force: no kubelet) and waits until their GPUs are free. Reported per
cluster size and mode: the median and spread of the rounds, and trainadmit : hand.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the tier's harness

from support.controlplane import (  # noqa: E402
    ClusterFeatures,
    KubeError,
    SchedulingControlPlane,
    scheduling_assets_from_env,
    wait_until,
)
from support.kube_fixtures import (  # noqa: E402
    GANG_FEATURES,
    OUTCOME_PHASES,
    PROBE_NS,
    WORKLOAD_FEATURES,
    WORKLOAD_PHASES,
    install_deploy_objects,
    intent_probe,
    register_webhooks,
    start_trainadmit,
    stop_trainadmit,
)
from support.outcome import JOB_NAME_LABEL, gpu_job, kubectl  # noqa: E402
from support.policies import write_policy  # noqa: E402
from support.pool_nodes import create_nodes, domains, wait_schedulable  # noqa: E402

from trainadmit.engine import Request, decide, load_policy  # noqa: E402

NAMESPACE = "bench"
WORKERS = 16
PHASE = "topology-constraint"
# the bench's namespace may run a 16-worker gang (the bundled team quotas stop at 16 workers / 64 GPUs)
QUOTA = {"apiVersion": "trainadmit.io/v1alpha1", "kind": "Quota", "metadata": {"name": "bench"},
         "spec": {"namespaces": [NAMESPACE], "maxGPUsPerJob": 128, "maxWorkersPerJob": 16}}
PREFIX = "trainadmit.io/"


RACK_LABEL = "topology.kubernetes.io/rack"
GATE = PREFIX + "placement"
STOCK_PHASES: dict[str, dict] = {"bundled": {}}  # policies/ as shipped


def hand_placed(policy, job: dict, rack: str, gang: bool = False) -> list[dict]:
    """Where trainadmit gates, by hand: the Job as trainadmit would make it, but with the rack a user who knew the free
    one would write into its node selector, no placement gate and no bookkeeping; its PodGroup with it where the
    cluster gangs (``gang``), else no gang (the cluster has none)."""
    docs = hand_configured(policy, job)
    [mutated] = [d for d in docs if d.get("kind") == "Job"]
    spec = mutated["spec"]["template"]["spec"]
    if not gang:
        spec.pop("schedulingGroup", None)
        docs = [mutated]
    spec["schedulingGates"] = [g for g in spec.get("schedulingGates") or [] if g.get("name") != GATE] or None
    if spec["schedulingGates"] is None:
        del spec["schedulingGates"]
    spec.setdefault("nodeSelector", {})[RACK_LABEL] = rack
    return docs


def hand_configured(policy, job: dict) -> list[dict]:
    """What a user writes without trainadmit: its PodGroup, and the Job as trainadmit would make it,
    minus trainadmit's own bookkeeping (provenance, the reconciler's label and annotation)."""
    decision = decide(policy, Request(copy.deepcopy(job)))
    assert decision.allowed, [v.text() for v in decision.violations]
    mutated = decision.mutated
    for meta in (mutated["metadata"], mutated["spec"]["template"].get("metadata") or {}):
        for key in ("labels", "annotations"):
            for k in [k for k in meta.get(key) or {} if k.startswith(PREFIX)]:
                del meta[key][k]
    podgroups = [{k: v for k, v in pg.items()} for pg in decision.companions]
    for pg in podgroups:
        pg["metadata"] = {"name": pg["metadata"]["name"], "namespace": NAMESPACE}
    return [*podgroups, mutated]


class Modes:
    """trainadmit registered, or no webhook configuration at all; each switch waits until the apiserver
    behaves as the mode says (a dry-run probe reaches both webhooks, or neither)."""

    def __init__(self, cp, hook, configs):
        self.cp, self.hook, self.configs = cp, hook, configs
        self.mode = "trainadmit"

    def use(self, mode: str) -> None:
        if mode == self.mode:
            return
        if mode == "hand":
            for cfg in self.configs:
                self.cp.http.delete(cfg)

            def unreached() -> bool:
                before = self.cp.webhook_calls()
                with contextlib.suppress(KubeError):
                    self.cp.http.create(intent_probe(), dry_run=True)
                return self.cp.webhook_calls() == before

            wait_until(unreached, timeout=60, what="the apiserver to stop calling trainadmit")
        else:
            self.configs = register_webhooks(self.cp, self.hook.server.port,
                                             (self.hook.server.cert_dir / "ca.crt").read_bytes(), PROBE_NS,
                                             intent_probe())
        self.mode = mode


def bound(cp, name: str) -> int:
    pods = cp.http.list("v1", "Pod", NAMESPACE, labelSelector=f"{JOB_NAME_LABEL}={name}")["items"]
    return sum(1 for p in pods if p["spec"].get("nodeName"))


def one_round(cp, name: str, docs: list[dict], workers: int = WORKERS, timeout: float = 120.0,
              podgroups: bool = True) -> tuple[float, float]:
    """Seconds from ``kubectl create`` to the last binding, and to the PodGroup's existence."""
    text = yaml.safe_dump_all(docs)
    t0 = time.monotonic()
    done = kubectl(cp, "create", "-f", "-", stdin=text)
    if done.returncode != 0:
        raise SystemExit(f"kubectl create failed: {done.stderr}")
    podgroup = None
    while bound(cp, name) < workers:
        if podgroups and podgroup is None and cp.http.get_or_none("scheduling.k8s.io/v1alpha2", "PodGroup", f"{name}-gang",
                                                    NAMESPACE) is not None:
            podgroup = time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise SystemExit(f"{name}: only {bound(cp, name)} of {workers} bound after {timeout:.0f}s")
        time.sleep(0.02)
    total = time.monotonic() - t0
    return total, total if podgroup is None else podgroup


def clean(cp, name: str, podgroups: bool = True) -> None:
    http = cp.http
    http.delete({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": NAMESPACE}},
                propagation="Background")
    if podgroups:
        http.delete({"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
                     "metadata": {"name": f"{name}-gang", "namespace": NAMESPACE}})
    cp.force_delete_pods(NAMESPACE, f"{JOB_NAME_LABEL}={name}")
    wait_until(lambda: not http.list("v1", "Pod", NAMESPACE, labelSelector=f"{JOB_NAME_LABEL}={name}")["items"],
               timeout=120, what=f"{name}'s Pods gone")


def add_nodes(cp, pool, total: int, have: int, rack_size: int = 16) -> int:
    """Racks of ``rack_size`` in one zone, up to ``total`` nodes (the last rack may be smaller)."""
    sizes, left = [], total - have
    while left > 0:
        sizes.append(min(rack_size, left))
        left -= sizes[-1]
    shapes = domains(f"n{have}", "rack", sizes, outer={"zone": "zone-a"})
    create_nodes(cp.http, pool, shapes)
    wait_schedulable(cp.http, [s.name for s in shapes], timeout=600)
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sizes", default="64,1000", help="cluster sizes in nodes, ascending")
    ap.add_argument("--cluster", choices=("gang", "stock", "workload"), default="gang",
                    help="gang: native gang scheduling and the PodGroup's topology constraint (default); stock: no "
                         "feature gates, the bundled policies, trainadmit's placement gate; workload: the Workload API "
                         "+ GangScheduling without the topology gate, the bundled policies with those gates declared, "
                         "the placement gate and the reconciler's PodGroup")
    ap.add_argument("--workers", type=int, default=WORKERS, help="the gang's workers (whole 8-GPU nodes)")
    ap.add_argument("--rack-size", type=int, default=16, help="nodes per rack")
    args = ap.parse_args()
    stock, gated = args.cluster == "stock", args.cluster in ("stock", "workload")
    features, phases, phase = {"stock": (ClusterFeatures("stock"), STOCK_PHASES, "bundled"),
                               "workload": (WORKLOAD_FEATURES, WORKLOAD_PHASES, "bundled"),
                               "gang": (GANG_FEATURES, OUTCOME_PHASES, PHASE)}[args.cluster]
    if scheduling_assets_from_env() is None:
        raise SystemExit("set KUBEBUILDER_ASSETS to a folder with kube-apiserver, etcd, kube-scheduler and "
                         "kube-controller-manager")
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"# {platform.node()} {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; {args.rounds} rounds per mode; "
          f"cluster {args.cluster}")
    with tempfile.TemporaryDirectory(prefix="time-to-start-") as tmp:
        cp = SchedulingControlPlane(features=features)
        cp.start()
        try:
            install_deploy_objects(cp)
            hook, configs = start_trainadmit(cp, Path(tmp), phases, phase, ("--reconcile",), [QUOTA], workers=2)
            cp.ensure_namespace(NAMESPACE)
            modes = Modes(cp, hook, configs)
            try:
                policy = hook.use(phase)
                pool = policy.pools["h100-ib"]
                if args.cluster == "workload":  # the PodGroup as trainadmit makes it on this 1.36 cluster (v1alpha2)
                    policy = load_policy(write_policy(Path(tmp) / "hand-policy",
                                                      {**phases[phase], "kubernetesVersion": "1.36"}, [QUOTA]))
                have = 0
                results: dict[tuple[int, str], list[float]] = {}
                podgroups: dict[tuple[int, str], list[float]] = {}
                loads: dict[int, list[float]] = {}
                n = 0
                for size in sizes:
                    have = add_nodes(cp, pool, size, have, args.rack_size)
                    time.sleep(1)  # the live view catches up with the new nodes (watched)
                    for r in range(args.rounds):
                        for mode in (("trainadmit", "hand") if r % 2 == 0 else ("hand", "trainadmit")):
                            modes.use(mode)
                            n += 1
                            name = f"tts{n}"
                            job = gpu_job(name, NAMESPACE, args.workers, annotations={"trainadmit.io/topology": "rack"})
                            docs = [job] if mode == "trainadmit" else (
                                hand_placed(policy, job, "n0-a", gang=not stock) if gated
                                else hand_configured(policy, job))
                            seconds, podgroup = one_round(cp, name, docs, args.workers, podgroups=not stock)
                            results.setdefault((size, mode), []).append(seconds)
                            podgroups.setdefault((size, mode), []).append(podgroup)
                            print(f"{size:>5} nodes  {mode:<10} round {r + 1}: {seconds:.2f} s (PodGroup there "
                                  f"after {podgroup:.2f} s)", flush=True)
                            clean(cp, name, podgroups=not stock)
                            loads.setdefault(size, []).append(os.getloadavg()[0])
                print(f"\n{'nodes':>5}  {'mode':<10} {'median s':>8}  {'min':>5}  {'max':>5}  {'PodGroup s':>10}"
                      "   trainadmit : hand   load average")
                for size in sizes:
                    med = {m: statistics.median(results[(size, m)]) for m in ("hand", "trainadmit")}
                    for m in ("hand", "trainadmit"):
                        v = results[(size, m)]
                        ratio = f"{med['trainadmit'] / med['hand']:.2f}" if m == "trainadmit" else ""
                        load = f"{min(loads[size]):.1f}-{max(loads[size]):.1f}" if m == "trainadmit" else ""
                        pg = statistics.median(podgroups[(size, m)])
                        print(f"{size:>5}  {m:<10} {med[m]:>8.2f}  {min(v):>5.2f}  {max(v):>5.2f}  {pg:>10.2f}   {ratio:>17}   {load}")
            finally:
                modes.use("trainadmit")
                stop_trainadmit(cp, hook, modes.configs)
        finally:
            cp.stop()


if __name__ == "__main__":
    main()
