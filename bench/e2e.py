"""What users feel: Job creates through a real kube-apiserver with no webhook, a no-op pair, trainadmit.

Run: KUBEBUILDER_ASSETS=.venv/k8s-assets .venv/bin/python bench/e2e.py [--clients 10] [--jobs 300] [--rounds 2]

Starts the integration tier's control plane (etcd + kube-apiserver from ``$KUBEBUILDER_ASSETS``, see
docs/testing.md), installs deploy/'s namespace, RBAC and PriorityClasses and the same
cluster the tier decides against (64 H100 nodes in 4 racks, claims, the RDMA network, the gang
backends' CRDs), and runs ``trainadmit serve --cluster-live --enable-noop`` as production does
(gunicorn, TLS, 2 workers) with the bundled policies retargeted at coscheduling on this 1.36
apiserver. Three modes, alternating round by round so that machine noise hits them alike:

- ``none``: no webhook configuration at all;
- ``noop``: deploy/'s two webhook configurations verbatim (rules, matchConditions, timeouts) but
  pointed at ``/noop``, which answers allowed without reading the object: the stack's own floor;
- ``noop-patch``: the mutating webhook pointed at ``/noop-patch``, which answers with the patch
  trainadmit gave the first Job it saw there, without deciding (the validating one at ``/noop``):
  what the same mutation costs the apiserver (a bigger object to patch, validate, track in
  managedFields, send to the validating webhook and store), with no engine;
- ``trainadmit``: the same configurations pointed at ``/mutate`` and ``/validate``.

Each round creates ``--jobs`` GPU Jobs (examples/llama-pretrain.yaml, a new name each) from
``--clients`` concurrent clients, each with its own keep-alive connection, then deletes them. A mode
switch waits until a dry-run create reaches exactly the new mode's endpoints (trainadmit's own
request counters by endpoint). Reported per mode: creates/s, p50 and p99 latency, errors (medians over
rounds; errors summed), and trainadmit : noop ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the tier's harness: controlplane.py and kube_fixtures.py

from support.controlplane import ControlPlane, KubeError, load_manifests, webhook_configs_for_url  # noqa: E402
from support.kube_fixtures import DEPLOY, install_cluster  # noqa: E402
from support.policies import BACKENDS, write_policy  # noqa: E402

from trainadmit.certs import pki  # noqa: E402

NAMESPACE = "team-nlp"
WEBHOOKS = (("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"),
            ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"))
APISERVER_ARGS = ["--disable-admission-plugins=TaintNodesByCondition"]  # no node controller lifts that taint


def job_template() -> dict:
    doc = yaml.safe_load((ROOT / "examples" / "llama-pretrain.yaml").read_text())
    doc["metadata"]["namespace"] = NAMESPACE
    doc["metadata"].setdefault("labels", {})["bench"] = "e2e"
    return doc


def start_server(tmp: Path, kubeconfig: Path, workers: int) -> tuple[subprocess.Popen, int, Path]:
    pki.issue(tmp / "tls", "trainadmit", "trainadmit-system", ips=["127.0.0.1"])
    policy = write_policy(tmp / "policies", {"kubernetesVersion": "1.36", "featureGates": ["GenericWorkload"],
                                             **BACKENDS["coscheduling"]})
    port = 19000 + os.getpid() % 1000
    env = dict(os.environ, KUBECONFIG=str(kubeconfig))
    server = subprocess.Popen(
        [sys.executable, "-m", "trainadmit.cli", "serve", "-p", str(policy), "--tls-cert", str(tmp / "tls" / "tls.crt"),
         "--tls-key", str(tmp / "tls" / "tls.key"), "--host", "127.0.0.1", "--port", str(port), "--workers",
         str(workers), "--enable-noop", "--cluster-live", f"--metrics-bind-address=127.0.0.1:{port + 1}"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=open(tmp / "server.log", "wb"))  # noqa: SIM115
    import ssl

    ctx = ssl.create_default_context(cafile=str(tmp / "tls" / "ca.crt"))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=ctx, timeout=2) as r:
                if r.status == 200:
                    return server, port, tmp / "tls" / "ca.crt"
        except OSError:
            time.sleep(0.2)
    server.terminate()
    raise SystemExit(f"the server did not become ready; see {tmp / 'server.log'}")


class Modes:
    """Switch the apiserver between the three modes, and wait until it behaves as the mode says."""

    def __init__(self, cp: ControlPlane, port: int, ca: Path):
        self.cp = cp
        base = f"https://127.0.0.1:{port}"
        docs = load_manifests(DEPLOY / "webhooks.yaml")
        self.configs = {"trainadmit": webhook_configs_for_url(docs, base, ca.read_bytes())}
        for mode, mutate in (("noop", "/noop"), ("noop-patch", "/noop-patch")):
            configs = copy.deepcopy(self.configs["trainadmit"])
            for cfg in configs:
                for hook in cfg["webhooks"]:
                    hook["clientConfig"]["url"] = base + (mutate if cfg["kind"].startswith("Mutating") else "/noop")
            self.configs[mode] = configs
        self.endpoints = {"none": set(), "noop": {"noop"}, "noop-patch": {"noop-patch", "noop"},
                          "trainadmit": {"mutate", "validate"}}
        self.metrics_url, self.ca = f"https://127.0.0.1:{port + 1}/metrics", ca  # start_server's metrics listener
        self.probe = job_template()
        self.probe["metadata"]["name"] = "bench-probe"

    def _served(self) -> dict[str, float]:
        """trainadmit's answered requests by endpoint (its own /metrics)."""
        import re
        import ssl

        ctx = ssl.create_default_context(cafile=str(self.ca))
        with urllib.request.urlopen(self.metrics_url, context=ctx, timeout=5) as r:
            text = r.read().decode()
        out: dict[str, float] = {}
        for m in re.finditer(r'^trainadmit_admission_requests_total\{([^}]*)\} (\S+)$', text, re.M):
            webhook = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1))).get("webhook", "")
            out[webhook] = out.get(webhook, 0.0) + float(m.group(2))
        return out

    def _behaves(self, mode: str) -> bool:
        before = self._served()
        try:
            self.cp.http.create(self.probe, dry_run=True)
        except KubeError:
            return False
        after = self._served()
        return {w for w in after if after[w] != before.get(w, 0.0)} == self.endpoints[mode]

    def use(self, mode: str) -> None:
        if mode == "none":
            for api_version, kind in WEBHOOKS:
                self.cp.http.delete({"apiVersion": api_version, "kind": kind, "metadata": {"name": "trainadmit"}})
        else:
            self.cp.apply(self.configs[mode])
        streak, deadline = 0, time.monotonic() + 60
        while streak < 3:  # three answers in a row as the mode says: the apiserver's informer has caught up
            streak = streak + 1 if self._behaves(mode) else 0
            if time.monotonic() > deadline:
                raise SystemExit(f"the apiserver did not switch to mode {mode}")
            time.sleep(0.05)


def cpu_seconds(pid: int) -> float:
    """CPU time of a process and its children alive now (gunicorn's workers), from /proc."""
    total, tick = 0.0, os.sysconf("SC_CLK_TCK")
    pids = [pid]
    with contextlib.suppress(OSError):
        pids += [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


def run_round(cp: ControlPlane, template: dict, jobs: int, clients: int, tag: str,
              watched: dict[str, int] | None = None) -> dict:
    """``jobs`` creates from ``clients`` threads; latency per create, errors counted, then the Jobs deleted."""
    path = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs"
    bodies = []
    for i in range(jobs):
        doc = copy.deepcopy(template)
        doc["metadata"]["name"] = f"llama-{tag}-{i:04d}"
        doc["metadata"]["labels"]["bench-round"] = tag
        bodies.append(json.dumps(doc).encode())
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    next_index = iter(range(jobs))

    def client() -> None:
        http = cp.http  # one pool per client below: its own keep-alive connection
        import urllib3

        pool = urllib3.PoolManager(maxsize=1, cert_reqs="CERT_REQUIRED", ca_certs=str(cp.pki / "ca.crt"),
                                   cert_file=str(cp.pki / "admin.crt"), key_file=str(cp.pki / "admin.key"))
        url = http.base_url + path
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        while True:
            with lock:
                i = next(next_index, None)
            if i is None:
                return
            start = time.perf_counter()
            resp = pool.request("POST", url, body=bodies[i], headers=headers, retries=False, timeout=30)
            elapsed = time.perf_counter() - start
            with lock:
                if resp.status == 201:
                    latencies.append(elapsed)
                else:
                    errors.append(f"{resp.status} {resp.data[:200]!r}")

    threads = [threading.Thread(target=client) for _ in range(clients)]
    cpu_before = {name: cpu_seconds(pid) for name, pid in (watched or {}).items()}
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    cpu = {f"cpu_{name}": (cpu_seconds(pid) - cpu_before[name]) / jobs * 1000 for name, pid in (watched or {}).items()}
    cp.http.request("DELETE", path, query={"labelSelector": f"bench-round={tag}"})
    latencies.sort()
    return {"rate": len(latencies) / wall, "p50": _pct(latencies, 50), "p99": _pct(latencies, 99),
            "errors": len(errors), "first_error": errors[0] if errors else "", **cpu}


def _pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=300, help="creates per round")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds (medians are reported)")
    parser.add_argument("--workers", type=int, default=2, help="trainadmit server processes")
    parser.add_argument("--modes", default="none,noop,noop-patch,trainadmit")
    args = parser.parse_args()
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if not assets:
        raise SystemExit("set KUBEBUILDER_ASSETS to a folder with kube-apiserver and etcd "
                         "(../shared/k8s/control-plane assets .venv/k8s-assets)")
    modes_wanted = args.modes.split(",")
    tmp = Path(tempfile.mkdtemp(prefix="trainadmit-e2e-"))
    with ControlPlane(assets, extra_args=APISERVER_ARGS) as cp:
        install_cluster(cp)
        server, port, ca = start_server(tmp, cp.kubeconfig, args.workers)
        try:
            modes = Modes(cp, port, ca)
            template = job_template()
            for mode in modes_wanted:  # warm-up: connections, the server's caches, the apiserver's
                modes.use(mode)
                run_round(cp, template, min(args.jobs, 60), args.clients, f"warm-{mode}")
            results: dict[str, list[dict]] = {m: [] for m in modes_wanted}
            watched = {"apiserver": cp.pids["kube-apiserver"], "etcd": cp.pids["etcd"], "trainadmit": server.pid}
            for r in range(args.rounds):
                for mode in modes_wanted:
                    modes.use(mode)
                    res = run_round(cp, template, args.jobs, args.clients, f"{mode}-{r}", watched)
                    results[mode].append(res)
                    cpu = "  ".join(f"{k[4:]} {v:.2f}" for k, v in res.items() if k.startswith("cpu_"))
                    print(f"round {r + 1} {mode:<11} {res['rate']:7.1f} creates/s  p50 {res['p50']:7.1f} ms  "
                          f"p99 {res['p99']:7.1f} ms  errors {res['errors']}  CPU ms per create: {cpu} "
                          f"{res['first_error']}", flush=True)
        finally:
            server.terminate()
            server.wait(30)
    load = os.getloadavg()
    print(f"\n{dt.date.today()} {platform.node()}: {os.cpu_count()} cores, load average {load[0]:.1f}; "
          f"{args.clients} clients, {args.jobs} Job creates per round, {args.rounds} rounds (medians)")
    print(f"{'mode':<12}{'creates/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}   CPU ms per create: "
          "apiserver, etcd, trainadmit")
    agg = {}
    keys = ("rate", "p50", "p99", "cpu_apiserver", "cpu_etcd", "cpu_trainadmit")
    for mode, runs in results.items():
        agg[mode] = {k: statistics.median(r[k] for r in runs) for k in keys}
        errors = sum(r["errors"] for r in runs)
        a = agg[mode]
        print(f"{mode:<12}{a['rate']:>10.1f}{a['p50']:>9.1f}{a['p99']:>9.1f}{errors:>8}   {a['cpu_apiserver']:.2f}, "
              f"{a['cpu_etcd']:.2f}, {a['cpu_trainadmit']:.2f}")
    if "noop" in agg and "trainadmit" in agg:
        t, n = agg["trainadmit"], agg["noop"]
        print(f"\ntrainadmit : noop  creates/s {t['rate'] / n['rate']:.2f}x (target >= 0.9)  "
              f"p99 {t['p99'] / n['p99']:.2f}x (target <= 1.2)  p50 {t['p50'] / n['p50']:.2f}x")
    if "noop-patch" in agg and "noop" in agg:
        t, n = agg["noop-patch"], agg["noop"]
        print(f"noop-patch : noop  creates/s {t['rate'] / n['rate']:.2f}x  p99 {t['p99'] / n['p99']:.2f}x  "
              "(the mutation's own cost, no engine)")
    if "noop-patch" in agg and "trainadmit" in agg:
        t, n = agg["trainadmit"], agg["noop-patch"]
        print(f"trainadmit : noop-patch  creates/s {t['rate'] / n['rate']:.2f}x  p99 {t['p99'] / n['p99']:.2f}x  "
              "(the engine's cost)")
    if "none" in agg and "noop" in agg:
        n, z = agg["noop"], agg["none"]
        print(f"noop : none        creates/s {n['rate'] / z['rate']:.2f}x  p99 {n['p99'] / z['p99']:.2f}x")


if __name__ == "__main__":
    main()
