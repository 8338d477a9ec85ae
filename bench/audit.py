"""`trainadmit audit` over 1,000 and 10,000 stored workloads: time, and peak memory flat between the two.

Run: .venv/bin/python bench/audit.py [--rounds N] [--no-10k] [--json FILE]

The input is what `kubectl get jobs -A -o json` writes (one ``List``, items first, ``kind`` last), of
generated Jobs (``check_corpus.py``: varied shapes, about one in eight denied, a few not GPU work)
stored as the apiserver keeps them (a uid, creation times a second apart, a resourceVersion), next to
the nodes of the integration tier's cluster (``kube_fixtures.cluster_nodes``: 112 GPU nodes). Each
case runs the installed console script as a subprocess, interleaved round by round, medians reported;
peak memory is the process's maximum RSS (``wait4``). Baselines in the same run:

- ``trainadmit --version``: the interpreter and the command line, nothing decided (the memory floor);
- ``trainadmit check -o json`` over the same file: the same decisions, without a cluster view, the
  re-reading and the judging (it reads a List file whole: its memory grows with the file).

What must hold: audit's peak memory at 10,000 workloads within 1.15x of its peak at 1,000 (it reads the
file item by item and keeps per workload only a small record of what it holds), and time linear in
the number of workloads (objects per CPU second about equal at both sizes).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from check import measure  # noqa: E402  (the same runner and interleaving as bench/check.py)

BIN = Path(sys.executable).parent


def write_inputs(work: Path, sizes: list[int]) -> None:
    """The nodes and the workload files. Run in a process of its own (``--write``): Linux counts the memory
    a measured process inherits at fork in its peak, so the measuring process stays small."""
    sys.path.insert(0, str(ROOT / "tests"))
    from support.kube_fixtures import cluster_nodes

    (work / "nodes.json").write_text(json.dumps({"apiVersion": "v1", "kind": "NodeList", "items": cluster_nodes()}))
    for n in sizes:
        write_workloads(work / f"workloads-{n}.json", n)


def write_workloads(path: Path, count: int, seed: int = 11) -> None:
    """``count`` stored Jobs as `kubectl get -o json` writes them, written item by item."""
    from check_corpus import job

    rng = random.Random(seed)
    start = time.mktime((2026, 1, 10, 8, 0, 0, 0, 0, 0))
    with path.open("w") as out:
        out.write('{\n    "apiVersion": "v1",\n    "items": [\n')
        for i in range(count):
            obj = job(rng, i)
            meta = obj["metadata"]
            meta.pop("generateName", None)
            meta["name"] = meta.get("name") or f"gen-{i:05d}"
            meta.update(uid=f"00000000-0000-4000-8000-{i:012d}", resourceVersion=str(1000 + i),
                        creationTimestamp=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start + i)))
            out.write(("" if i == 0 else ",\n") + json.dumps(obj, indent=4))
        out.write('\n    ],\n    "kind": "List",\n    "metadata": {"resourceVersion": ""}\n}\n')


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default %(default)s)")
    ap.add_argument("--no-10k", action="store_true", help="only 100 and 1,000 workloads (a quick look)")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--write", metavar="DIR", help=argparse.SUPPRESS)  # the inputs, in a process of its own
    args = ap.parse_args()
    sizes = [100, 1_000] if args.no_10k else [1_000, 10_000]
    if args.write:
        write_inputs(Path(args.write), sizes)
        return 0
    subprocess.run([str(BIN / "python"), "-m", "compileall", "-q", str(ROOT / "webhook"), str(ROOT / "certs")],
                   check=True)
    work = Path(tempfile.mkdtemp(prefix="trainadmit-bench-audit-"))
    try:
        return _bench(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _bench(args: argparse.Namespace, work: Path) -> int:
    sizes = [100, 1_000] if args.no_10k else [1_000, 10_000]
    subprocess.run([str(BIN / "python"), __file__, "--write", str(work), *(["--no-10k"] if args.no_10k else [])],
                   check=True)
    nodes = work / "nodes.json"
    files = {n: work / f"workloads-{n}.json" for n in sizes}
    env = dict(os.environ, TRAINADMIT_CACHE_DIR=str(work / "cache"))
    cli = str(BIN / "trainadmit")
    policy = ["-p", str(ROOT / "policies")]
    cases = {"version": [cli, "--version"]}
    for n in sizes:
        cases[f"audit-{n}"] = [cli, "audit", *policy, "-o", "json", str(nodes), str(files[n])]
        cases[f"audit-text-{n}"] = [cli, "audit", *policy, str(nodes), str(files[n])]
        cases[f"check-{n}"] = [cli, "check", *policy, "-o", "json", str(files[n])]
    subprocess.run(cases[f"check-{sizes[0]}"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    measured = measure(cases, dict.fromkeys(cases, env), args.rounds)
    sizes_mib = {n: files[n].stat().st_size / 2**20 for n in sizes}
    print(f"{args.rounds} interleaved rounds, medians; peak memory = the process's maximum RSS "
          f"({os.cpu_count()} cores)")
    floor = measured["version"]
    print(f"  {'trainadmit --version':34s} {floor['wall']:7.2f} s wall  {floor['cpu']:7.2f} s CPU  "
          f"peak {floor['rss_kib'] / 1024:6.1f} MiB")
    for n in sizes:
        for name, label in ((f"audit-{n}", f"audit -o json, {n:,} workloads"),
                            (f"audit-text-{n}", f"audit (text), {n:,} workloads"),
                            (f"check-{n}", f"check -o json, {n:,} objects")):
            r = measured[name]
            print(f"  {label:34s} {r['wall']:7.2f} s wall  {r['cpu']:7.2f} s CPU  {n / r['cpu']:6.0f} per CPU s  "
                  f"peak {r['rss_kib'] / 1024:6.1f} MiB  exit {r['exit']}  (input {sizes_mib[n]:.1f} MiB)")
    small, large = sizes
    memory = measured[f"audit-{large}"]["rss_kib"] / measured[f"audit-{small}"]["rss_kib"]
    rate = (small / measured[f"audit-{small}"]["cpu"]) / (large / measured[f"audit-{large}"]["cpu"])
    versus = measured[f"audit-{large}"]["cpu"] / measured[f"check-{large}"]["cpu"]
    print(f"\n  audit peak memory {large:,} / {small:,}: {memory:.2f}x "
          f"({'met' if memory <= 1.15 else 'NOT met'}: <= 1.15x)")
    print(f"  audit workloads per CPU second, {small:,} / {large:,}: {rate:.2f}x (linear time: about 1)")
    print(f"  audit / check CPU at {large:,}: {versus:.2f}x (the view, reading twice, judging)")
    if args.json:
        Path(args.json).write_text(json.dumps({"sizes": sizes, "measured": measured, "memory_ratio": memory,
                                               "rate_ratio": rate, "audit_over_check": versus}, indent=2))
    return 0 if memory <= 1.15 else 1


if __name__ == "__main__":
    sys.exit(main())
