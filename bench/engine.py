"""Engine cost per decision against the cost of only parsing and serializing the same request.

Run: .venv/bin/python bench/engine.py [--seconds S]

Both are measured in the same process, interleaved round by round, so that a noisy shared
machine affects them alike; the ratio is the figure that matters. The baseline is what any
webhook must do anyway: json.loads of the AdmissionReview body and json.dumps of a response
carrying the object. The decision is the whole engine: match, resolve intent, mutate, validate,
and serialize the patch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from trainadmit.engine import Request, decide, load_policy

ROOT = Path(__file__).resolve().parent.parent



def job(containers: int) -> dict:
    """A realistic Job as the apiserver sends it: defaulted fields, 16 workers."""
    cs = []
    for i in range(containers):
        cs.append({
            "name": f"trainer-{i}", "image": "registry.local/llama:1.0",
            "command": ["torchrun", "--nnodes=16", "--nproc-per-node=8", "train.py"],
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
        "spec": {"parallelism": 16, "completions": 16, "completionMode": "Indexed", "backoffLimit": 6,
                 "suspend": False, "manualSelector": False, "podReplacementPolicy": "TerminatingOrFailed",
                 "template": {"metadata": {}, "spec": {
                     "containers": cs, "restartPolicy": "Never", "terminationGracePeriodSeconds": 30,
                     "dnsPolicy": "ClusterFirst", "securityContext": {}, "schedulerName": "default-scheduler"}}},
    }


def body(obj: dict) -> bytes:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": "b1f0c7e2-0000-4000-8000-000000000000", "operation": "CREATE",
                                   "namespace": "research", "object": obj}}).encode()


def baseline(raw: bytes, policy) -> int:
    review = json.loads(raw)
    return len(json.dumps({"response": {"uid": review["request"]["uid"], "allowed": True},
                           "object": review["request"]["object"]}))


def decision(raw: bytes, policy) -> int:
    review = json.loads(raw)
    d = decide(policy, Request(review["request"]["object"], namespace=review["request"]["namespace"]))
    assert d.allowed, [v.text() for v in d.denials]
    return len(json.dumps({"response": {"uid": review["request"]["uid"], "allowed": True,
                                        "patch": json.dumps(d.patch)}}))


def per_call(fn, raw, policy, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn(raw, policy)
    return (time.perf_counter() - start) / n


def measure(raw: bytes, policy, seconds: float) -> tuple[float, float]:
    n = 200
    base, dec = [], []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(base) < 5:
        base.append(per_call(baseline, raw, policy, n))
        dec.append(per_call(decision, raw, policy, n))
    return statistics.median(base), statistics.median(dec)


def builtin_only_policy():
    """The bundled policies without their custom CEL rules (rules.yaml)."""
    import shutil
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="trainadmit-bench-policy-"))
    for f in (ROOT / "policies").glob("*.yaml"):
        if f.name != "rules.yaml":
            shutil.copy(f, tmp / f.name)
    return load_policy(tmp)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="time per case")
    args = parser.parse_args()
    policies = (("built-in rules", builtin_only_policy()), ("+ 2 CEL rules", load_policy(ROOT / "policies")))
    print(f"{'case':<28}{'policy':<16}{'bytes':>7}{'baseline µs':>13}{'decision µs':>13}{'decisions/s':>13}{'ratio':>8}")
    for label, containers in (("16 workers, 1 container", 1), ("16 workers, 16 containers", 16)):
        raw = body(job(containers))
        for name, policy in policies:
            base, dec = measure(raw, policy, args.seconds)
            print(f"{label:<28}{name:<16}{len(raw):>7}{base * 1e6:>13.1f}{dec * 1e6:>13.1f}{1 / dec:>13.0f}"
                  f"{dec / base:>8.2f}")


if __name__ == "__main__":
    main()
