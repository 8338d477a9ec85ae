"""What the preflight adds: engine time per decision, and the init container's start-up.

Run: .venv/bin/python bench/preflight.py [--seconds S]

1. The engine on the same Jobs as bench/engine.py, with the bundled policies (h100-ib has required
   node labels and the preflight on) against the same policies with both removed from the pool,
   interleaved round by round in one process: the ratio is the cost of the hardware and preflight
   concerns.
2. `python -m trainadmit.cli preflight` checking a healthy fake node against `python -c pass`, both
   as fresh processes, alternated: what every training Pod pays before it starts.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from engine import body, decision, job, per_call

from trainadmit.engine import load_policy

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def policies() -> tuple[object, object]:
    """(bundled without CEL rules, the same without requiredNodeLabels and preflight)."""
    out = []
    for strip in (False, True):
        tmp = Path(tempfile.mkdtemp(prefix="trainadmit-bench-preflight-"))
        for f in (ROOT / "policies").glob("*.yaml"):
            if f.name == "rules.yaml":
                continue
            docs = list(yaml.safe_load_all(f.read_text()))
            if strip:
                for d in docs:
                    if d and d.get("kind") == "Pool":
                        d["spec"].pop("requiredNodeLabels", None)
                        d["spec"].pop("preflight", None)
            (tmp / f.name).write_text(yaml.safe_dump_all(docs, sort_keys=False))
        out.append(load_policy(tmp))
    return out[0], out[1]


def engine_cost(seconds: float) -> None:
    with_it, without = policies()
    print(f"{'case':<28}{'without µs':>12}{'with µs':>10}{'ratio':>8}")
    for label, containers in (("16 workers, 1 container", 1), ("16 workers, 16 containers", 16)):
        raw = body(job(containers))
        pairs = []
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline or len(pairs) < 5:  # alternate, so noise hits both alike
            pairs.append((per_call(decision, [raw], without, None, 50), per_call(decision, [raw], with_it, None, 50)))
        base = statistics.median(p[0] for p in pairs)
        new = statistics.median(p[1] for p in pairs)
        print(f"{label:<28}{base * 1e6:>12.1f}{new * 1e6:>10.1f}{new / base:>8.2f}")


def startup_cost(rounds: int) -> None:
    from support.fake_node import build_node

    root = build_node(Path(tempfile.mkdtemp(prefix="trainadmit-bench-node-")))
    check = [sys.executable, "-m", "trainadmit.cli", "preflight", "--root", str(root), "--node", "n", "--gpus=8",
             "--rdma-link-layer=InfiniBand", "--active-ports", "--nccl-ib-hca==mlx5_0,mlx5_1,mlx5_2,mlx5_3",
             "--nccl-socket-ifname==eth0", "--shm-size=1Mi", "--dataset=/datasets/c4", "--checkpoint=/checkpoints"]
    empty = [sys.executable, "-c", "pass"]
    times: dict[str, list[float]] = {"empty": [], "preflight": []}
    for _ in range(rounds):
        for name, cmd in (("empty", empty), ("preflight", check)):
            start = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True)
            times[name].append(time.perf_counter() - start)
    base, pre = statistics.median(times["empty"]), statistics.median(times["preflight"])
    print(f"process start: python -c pass {base * 1e3:.0f} ms, trainadmit preflight (all checks but gang) "
          f"{pre * 1e3:.0f} ms, ratio {pre / base:.2f} (medians of {rounds})")
    shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="time per engine case")
    parser.add_argument("--rounds", type=int, default=15, help="process starts of each kind")
    args = parser.parse_args()
    engine_cost(args.seconds)
    startup_cost(args.rounds)


if __name__ == "__main__":
    main()
