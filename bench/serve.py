"""Latency and throughput of POST /mutate against a no-op admission endpoint on the same server.

Run: .venv/bin/python bench/serve.py [--duration S] [--connections 1,8,32]

The server is started exactly as in production (`trainadmit serve`: gunicorn gthread workers over
TLS, keep-alive on, as the kube-apiserver uses it) with ``--enable-noop``, which answers allowed
without looking at the object: the stack's own floor. Load comes from wrk (Debian package `wrk`)
over keep-alive HTTPS connections on loopback; /noop and /mutate are measured alternately at each
concurrency level so both see the same machine noise. Reported: p50/p99 latency and requests/s
per endpoint, and the /mutate : /noop ratios.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # for `from bench.engine import …`; trainadmit itself is installed

from bench import wrk  # noqa: E402
from bench.engine import body, job  # noqa: E402
from trainadmit.certs import pki  # noqa: E402


def wait_ready(port: int, ca: Path, timeout: float = 30) -> None:
    import ssl

    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.check_hostname = False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=ctx, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise SystemExit("server did not become ready")


def run_wrk(url: str, body: bytes, connections: int, duration: int) -> dict:
    r = wrk.run(url, body, connections, duration)
    return {**r, "errors": r["non_2xx"] + r["socket_errors"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=8, help="seconds per measurement")
    parser.add_argument("--connections", default="1,8,32")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per level")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk not found: apt-get install wrk")
    tmp = Path(tempfile.mkdtemp(prefix="trainadmit-bench-"))
    pki.issue(tmp / "tls", "trainadmit", "trainadmit-system")
    review = json.loads(body(job(1)))
    review["request"]["namespace"] = "research"
    data = json.dumps(review).encode()
    port = 18000 + (int(time.time()) % 1000)
    server = subprocess.Popen(
        [sys.executable, "-m", "trainadmit.cli", "serve", "-p", str(ROOT / "policies"), "--tls-cert",
         str(tmp / "tls" / "tls.crt"), "--tls-key", str(tmp / "tls" / "tls.key"), "--host", "127.0.0.1",
         "--port", str(port), "--workers", str(args.workers), "--enable-noop"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=open(tmp / "server.log", "wb"))  # noqa: SIM115
    try:
        wait_ready(port, tmp / "tls" / "ca.crt")
        base = f"https://127.0.0.1:{port}"
        run_wrk(base + "/mutate", data, 4, 2)  # warm up both paths
        run_wrk(base + "/noop", data, 4, 1)
        print(f"{'conns':>5} {'endpoint':>8} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7}")
        summary = []
        for conns in (int(c) for c in args.connections.split(",")):
            res: dict[str, list[dict]] = {"noop": [], "mutate": []}
            for _ in range(args.rounds):
                for endpoint in ("noop", "mutate"):
                    res[endpoint].append(run_wrk(f"{base}/{endpoint}", data, conns, args.duration))
            agg = {}
            for endpoint, runs in res.items():
                agg[endpoint] = {k: sorted(r[k] for r in runs)[len(runs) // 2] for k in ("rps", "p50_ms", "p99_ms")}
                agg[endpoint]["errors"] = sum(r["errors"] for r in runs)
                a = agg[endpoint]
                print(f"{conns:>5} {endpoint:>8} {a['rps']:>8.0f} {a['p50_ms']:>8.2f} {a['p99_ms']:>8.2f} {a['errors']:>7}")
            summary.append((conns, agg["mutate"]["p50_ms"] / agg["noop"]["p50_ms"],
                            agg["mutate"]["p99_ms"] / agg["noop"]["p99_ms"], agg["mutate"]["rps"] / agg["noop"]["rps"]))
        print("\nmutate : noop   (target: p99 ratio <= 1.5)")
        for conns, p50r, p99r, rpsr in summary:
            print(f"  {conns:>3} connections: p50 {p50r:.2f}x  p99 {p99r:.2f}x  throughput {rpsr:.2f}x")
    finally:
        server.terminate()
        server.wait(30)


if __name__ == "__main__":
    main()
