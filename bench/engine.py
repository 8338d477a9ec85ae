"""Engine cost per decision against the cost of only parsing and serializing the same request.

Run: .venv/bin/python bench/engine.py [--seconds S] [--cases …]

All columns are measured in the same process, interleaved round by round, so that a noisy shared
machine affects them alike; the ratios are the figures that matter. The baseline is what any
webhook must do anyway: json.loads of the AdmissionReview body and json.dumps of a response
carrying the object. ``decide`` is the whole engine from scratch: match, resolve intent, mutate,
validate, serialize the patch. ``cache`` is what the server runs (``server.decisions.DecisionCache``):
the same decision remembered per policy generation, for a stream of Jobs of one shape under 64
different names (each call a hit after the first 64; custom CEL rules still run on every object
unless the fields they read repeat). Cases: 16 workers with 1 or 16 containers (the table in docs/performance.md), and the
flatness cases: 1 and 1,024 workers (the bundled pool grown to 2,048 nodes, so that all are admitted).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from trainadmit.engine import Request, decide, load_policy
from trainadmit.server.decisions import DecisionCache

ROOT = Path(__file__).resolve().parent.parent


def job(containers: int, workers: int = 16) -> dict:
    """A realistic Job as the apiserver sends it: defaulted fields, ``workers`` workers."""
    cs = []
    for i in range(containers):
        cs.append({
            "name": f"trainer-{i}", "image": "registry.local/llama:1.0",
            "command": ["torchrun", f"--nnodes={workers}", "--nproc-per-node=8", "train.py"],
            "env": [{"name": "MASTER_PORT", "value": "29500"}, {"name": "WORLD_SIZE", "value": "128"}],
            "resources": {"limits": {"nvidia.com/gpu": "8" if i == 0 else "0", "memory": "1600Gi", "cpu": "96"}},
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
            "imagePullPolicy": "IfNotPresent",
        })
    if containers > 1:  # 16 containers: spread the 8 GPUs over 8 of them, one each
        for i, c in enumerate(cs):
            c["resources"]["limits"]["nvidia.com/gpu"] = "1" if i < 8 else "0"
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "llama-pretrain", "namespace": "research",
                     "labels": {"trainadmit.io/pool": "h100-ib"},
                     "annotations": {"trainadmit.io/topology": "zone", "trainadmit.io/datasets": "c4",
                                     "trainadmit.io/checkpoint": "shared", "trainadmit.io/priority": "high"}},
        "spec": {"parallelism": workers, "completions": workers, "completionMode": "Indexed", "backoffLimit": 6,
                 "suspend": False, "manualSelector": False, "podReplacementPolicy": "TerminatingOrFailed",
                 "template": {"metadata": {}, "spec": {
                     "containers": cs, "restartPolicy": "Never", "terminationGracePeriodSeconds": 30,
                     "dnsPolicy": "ClusterFirst", "securityContext": {}, "schedulerName": "default-scheduler"}}},
    }


def body(obj: dict) -> bytes:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": "b1f0c7e2-0000-4000-8000-000000000000", "operation": "CREATE",
                                   "namespace": "research", "object": obj}}).encode()


def bodies(obj: dict, names: int = 64) -> list[bytes]:
    """The review of ``obj`` under ``names`` different job names (what a stream of submissions looks like)."""
    out = []
    for i in range(names):
        obj["metadata"]["name"] = f"llama-pretrain-{i:03d}"
        out.append(body(obj))
    return out


def baseline(raw: bytes, policy, memo) -> int:
    review = json.loads(raw)
    return len(json.dumps({"response": {"uid": review["request"]["uid"], "allowed": True},
                           "object": review["request"]["object"]}))


def decision(raw: bytes, policy, memo) -> int:
    review = json.loads(raw)
    d = decide(policy, Request(review["request"]["object"], namespace=review["request"]["namespace"]))
    return len(json.dumps({"response": {"uid": review["request"]["uid"], "allowed": d.allowed,
                                        "patch": json.dumps(d.patch)}}))


def remembered(raw: bytes, policy, memo) -> int:
    review = json.loads(raw)
    d = memo.decide(Request(review["request"]["object"], namespace=review["request"]["namespace"]))
    return len(json.dumps({"response": {"uid": review["request"]["uid"], "allowed": d.allowed,
                                        "patch": d.patch_json}}))


def per_call(fn, raws: list[bytes], policy, memo, n: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        fn(raws[i % len(raws)], policy, memo)
    return (time.perf_counter() - start) / n


def measure(raws: list[bytes], policy, seconds: float) -> tuple[float, float, float]:
    n = 128
    memo = DecisionCache(policy)
    per_call(remembered, raws, policy, memo, len(raws))  # the first call of each name fills the memo
    base, dec, mem = [], [], []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(base) < 5:
        base.append(per_call(baseline, raws, policy, memo, n))
        dec.append(per_call(decision, raws, policy, memo, n))
        mem.append(per_call(remembered, raws, policy, memo, n))
    return statistics.median(base), statistics.median(dec), statistics.median(mem)


def bench_policy(cel: bool):
    """The bundled policies (without their custom CEL rules, rules.yaml, unless ``cel``), with pool h100-ib
    grown from 64 to 2,048 nodes so that the 1,024-worker case is admitted like the others."""
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="trainadmit-bench-policy-"))
    for f in (ROOT / "policies").glob("*.yaml"):
        if f.name != "rules.yaml" or cel:
            text = f.read_text()
            if f.name == "pools.yaml":
                text = text.replace("capacityNodes: 64", "capacityNodes: 2048").replace("maxNodes: 64}",
                                                                                      "maxNodes: 2048}")
            (tmp / f.name).write_text(text)
    return load_policy(tmp)



CASES = {"16x1": ("16 workers, 1 container", 16, 1), "16x16": ("16 workers, 16 containers", 16, 16),
         "1x1": ("1 worker, 1 container", 1, 1), "1024x1": ("1024 workers, 1 container", 1024, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="time per case")
    parser.add_argument("--cases", default=",".join(CASES), help=f"any of {', '.join(CASES)}")
    args = parser.parse_args()
    policies = (("built-in rules", bench_policy(cel=False)), ("+ 2 CEL rules", bench_policy(cel=True)))
    print(f"{'case':<28}{'policy':<16}{'bytes':>7}{'baseline µs':>13}{'decide µs':>11}{'cache µs':>9}"
          f"{'decide ratio':>14}{'cache ratio':>12}")
    for case in args.cases.split(","):
        label, workers, containers = CASES[case]
        raws = bodies(job(containers, workers))
        for name, policy in policies:
            base, dec, mem = measure(raws, policy, args.seconds)
            print(f"{label:<28}{name:<16}{len(raws[0]):>7}{base * 1e6:>13.1f}{dec * 1e6:>11.1f}{mem * 1e6:>9.1f}"
                  f"{dec / base:>14.2f}{mem / base:>12.2f}", flush=True)


if __name__ == "__main__":
    main()
