"""What a cluster throws at a `failurePolicy: Fail` webhook, measured against the real server.

Run: .venv/bin/python bench/hardening.py {slow,memory,labels,soak,tput} [options]

Each scenario starts `trainadmit serve` as in production (2 workers x 8 threads, TLS, keep-alive) and,
where a comparison means something, also the baseline in the same run: ``gthread`` is gunicorn's own
threaded worker without worker recycling (the stack without its defences: no read deadline, no body
budget, no trim); ``deadline`` is the default. All load comes from loopback on the same machine.

  slow    64 connections sending their head 1 byte every 2 s and 16 sending their body that way (plus
          --hs-stall connections that never send a ClientHello), reopened whenever the server closes them;
          meanwhile a probe sends a normal /mutate on a new connection every 0.5 s with a 3 s timeout (the
          webhook's timeoutSeconds). Reported: probes answered 200 within 1 s.
  memory  16 concurrent 2.5 MB reviews (default: long argument lists of short strings; --shape) x 3 rounds, one TLS connection each; memory of master + workers sampled every 50 ms. Reported: PSS sum
          (what the container's cgroup is charged; shared pages split between processes) and RSS sum at the
          start, the peak, and 5 s after the last round; status codes.
  shapes  one 2.7 MB review of each of a dozen JSON shapes through the app, each in a fresh process: its peak
          memory, and the estimate the server's per-worker memory budget charges for it (server/cost.py).
  labels  N requests with random paths, kinds and operations; /metrics sample lines before and after.
  soak    wrk, 8 keep-alive connections on /mutate for --minutes; worker PSS every 10 s and its slope
          (least squares, MB per minute); wrk's errors and non-2xx.
  tput    wrk on /noop and /mutate at 1 and 8 connections, both worker classes alternating (recycling off in
          both): req/s and p50/p99, deadline : gthread ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # for `from bench.engine import …`; trainadmit itself is installed

from bench import wrk as bench_wrk  # noqa: E402
from bench.engine import body as review_body  # noqa: E402
from bench.engine import job  # noqa: E402
from trainadmit.certs import pki  # noqa: E402

SNI = "trainadmit.trainadmit-system.svc"
VARIANTS = {"deadline": [], "gthread": ["--worker-class", "gthread", "--max-requests", "0"]}
LIMIT_MB = 512 * 1024 * 1024 / 1e6  # the Deployment's memory limit, 512Mi


def mb(n: float) -> str:
    return f"{n / 1e6:.0f}"


class Server:
    """`trainadmit serve` in its own process group, with its own certificates."""

    def __init__(self, variant: str, extra: list[str] | None = None, workers: int = 2, threads: int = 8):
        self.tmp = Path(tempfile.mkdtemp(prefix="trainadmit-hardening-"))
        pki.issue(self.tmp / "tls", "trainadmit", "trainadmit-system")
        with socket.socket() as s, socket.socket() as m:
            s.bind(("127.0.0.1", 0))
            m.bind(("127.0.0.1", 0))
            self.port, self.metrics_port = s.getsockname()[1], m.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trainadmit.cli", "serve", "-p", str(ROOT / "policies"),
             "--tls-cert", str(self.tmp / "tls" / "tls.crt"), "--tls-key", str(self.tmp / "tls" / "tls.key"),
             "--host", "127.0.0.1", "--port", str(self.port), "--workers", str(workers), "--threads", str(threads),
             "--enable-noop", f"--metrics-bind-address=127.0.0.1:{self.metrics_port}", *VARIANTS[variant],
             *(extra or [])],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=open(self.tmp / "server.log", "wb"),  # noqa: SIM115
            start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"server exited {self.proc.returncode}: {(self.tmp / 'server.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{self.port}/readyz", context=context(), timeout=2):
                    break
            except OSError:
                time.sleep(0.2)
        while len(self.workers()) < workers and time.monotonic() < deadline:
            time.sleep(0.2)

    def workers(self) -> list[int]:
        out = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[1]) == self.proc.pid:
                out.append(int(stat.parent.name))
        return out

    def memory(self) -> tuple[int, int, dict[int, int]]:
        """(PSS sum, RSS sum, PSS per worker) of master and workers, bytes."""
        pss = rss = 0
        per_worker: dict[int, int] = {}
        for pid in [self.proc.pid, *self.workers()]:
            try:
                text = Path(f"/proc/{pid}/smaps_rollup").read_text()
            except OSError:
                continue
            p = int(re.search(r"^Pss:\s+(\d+)", text, re.M).group(1)) * 1024
            r = int(re.search(r"^Rss:\s+(\d+)", text, re.M).group(1)) * 1024
            pss, rss = pss + p, rss + r
            if pid != self.proc.pid:
                per_worker[pid] = p
        return pss, rss, per_worker

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(40)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


def context() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def post(port: int, path: str, body: bytes, timeout: float) -> tuple[int, float]:
    """One request on a new TLS connection: (status or 0 on error, seconds)."""
    started = time.perf_counter()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw, \
                context().wrap_socket(raw, server_hostname=SNI) as sock:
            sock.sendall(f"POST {path} HTTP/1.1\r\nHost: trainadmit\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
            data = b""
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        return int(data.split(b" ", 2)[1]), time.perf_counter() - started
    except (OSError, ValueError, IndexError):
        return 0, time.perf_counter() - started


def small_review() -> bytes:
    review = json.loads(review_body(job(1)))
    review["request"]["kind"] = {"group": "batch", "version": "v1", "kind": "Job"}
    return json.dumps(review).encode()


# ---- slow clients --------------------------------------------------------------------------------------


async def slow_connection(kind: str, port: int, stop: asyncio.Event, counts: dict[str, int]) -> None:
    """One slow client, reopened whenever the server closes it, until ``stop``."""
    while not stop.is_set():
        try:
            if kind == "hs-stall":
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                payload = b""
            else:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection("127.0.0.1", port, ssl=context(), server_hostname=SNI), 20)
                if kind == "head":
                    writer.write(b"POST /mutate HTTP/1.1\r\nHost: trainadmit\r\nX-Slow: ")
                else:
                    writer.write(b"POST /mutate HTTP/1.1\r\nHost: trainadmit\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: 200000\r\n\r\n{")
                payload = b"a" if kind == "head" else b" "
            counts["opened"] += 1
            await writer.drain()
            while not stop.is_set():
                try:
                    if not await asyncio.wait_for(reader.read(4096), 2.0):
                        break  # closed by the server (after its 408)
                except TimeoutError:
                    if payload:
                        writer.write(payload)
                        await writer.drain()
            else:
                writer.transport.abort()
                return
            counts["closed by server"] += 1
            writer.transport.abort()
        except (OSError, ssl.SSLError, TimeoutError):  # the server never completed the handshake, or reset
            counts["failed to open"] += 1
            await asyncio.sleep(0.1)


async def slow_run(port: int, args: argparse.Namespace) -> dict:
    stop = asyncio.Event()
    counts = {"opened": 0, "closed by server": 0, "failed to open": 0}
    kinds = ["head"] * args.head + ["body"] * args.body + ["hs-stall"] * args.hs_stall
    tasks = []
    for kind in kinds:
        tasks.append(asyncio.create_task(slow_connection(kind, port, stop, counts)))
        await asyncio.sleep(0.02)
    await asyncio.sleep(3)  # every slow connection is open and has sent its first bytes
    body = small_review()
    results = []
    for _ in range(args.probes):
        results.append(await asyncio.to_thread(post, port, "/mutate", body, 3.0))
        await asyncio.sleep(0.5)
    stop.set()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    latencies = [t for _, t in results]
    return {"ok": sum(1 for s, t in results if s == 200 and t <= 1.0), "probes": len(results),
            "statuses": {s: [x for x, _ in results].count(s) for s in {x for x, _ in results}},
            "median_ms": statistics.median(latencies) * 1000, "max_ms": max(latencies) * 1000, **counts}


def cmd_slow(args: argparse.Namespace) -> None:
    print(f"{args.head} slow-head + {args.body} slow-body + {args.hs_stall} stalled-handshake connections "
          f"(reopened when closed), {args.probes} probes")
    for variant in args.variants.split(","):
        server = Server(variant)
        try:
            r = asyncio.run(slow_run(server.port, args))
        finally:
            server.stop()
        print(f"  {variant:>8}: {r['ok']}/{r['probes']} probes 200 within 1 s (statuses {r['statuses']}; "
              f"median {r['median_ms']:.0f} ms, max {r['max_ms']:.0f} ms); slow connections opened "
              f"{r['opened']}, closed by the server {r['closed by server']}, failed to open {r['failed to open']}")


# ---- memory under large reviews -------------------------------------------------------------------------


class Sampler(threading.Thread):
    def __init__(self, server: Server, every: float = 0.05):
        super().__init__(daemon=True)
        self.server, self.every = server, every
        self.halt = threading.Event()
        self.peak_pss = self.peak_rss = 0

    def run(self) -> None:
        while not self.halt.is_set():
            pss, rss, _ = self.server.memory()
            self.peak_pss, self.peak_rss = max(self.peak_pss, pss), max(self.peak_rss, rss)
            time.sleep(self.every)

    def stop(self) -> None:
        self.halt.set()
        self.join()


def fire(port: int, body: bytes, results: list) -> None:
    results.append(post(port, "/mutate", body, 60))


def cmd_memory(args: argparse.Namespace) -> None:
    body = shaped_review(args.shape, args.size)
    print(f"{args.concurrency} concurrent {len(body):,} B reviews ({SHAPES[args.shape]}) x {args.rounds} rounds; "
          f"MB, limit {LIMIT_MB:.0f}")
    for variant in args.variants.split(","):
        server = Server(variant)
        try:
            for _ in range(40):  # every worker's code paths warm
                post(server.port, "/mutate", small_review(), 10)
            time.sleep(1)
            start_pss, start_rss, _ = server.memory()
            sampler = Sampler(server)
            sampler.start()
            statuses: list[int] = []
            latencies: list[float] = []
            for _ in range(args.rounds):
                results: list[tuple[int, float]] = []
                threads = [threading.Thread(target=fire, args=(server.port, body, results))
                           for _ in range(args.concurrency)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                statuses += [s for s, _ in results]
                latencies += [t for _, t in results]
                time.sleep(2)
            time.sleep(5)
            sampler.stop()
            end_pss, end_rss, _ = server.memory()
        finally:
            server.stop()
        codes = {s: statuses.count(s) for s in set(statuses)}
        print(f"  {variant:>8}: PSS start {mb(start_pss)} peak {mb(sampler.peak_pss)} after {mb(end_pss)} "
              f"(+{mb(end_pss - start_pss)}); RSS start {mb(start_rss)} peak {mb(sampler.peak_rss)} after "
              f"{mb(end_rss)}; statuses {codes}; latency median {statistics.median(latencies):.2f} s, "
              f"max {max(latencies):.2f} s")


# ---- memory per review shape ----------------------------------------------------------------------------

SHAPES = {  # name: what a GPU Job is padded with
    "args": "long argument lists of short strings",
    "env": "env vars",
    "labels": "one label map",
    "keys": "an object with many members",
    "managed": "managedFields entries",
    "strs": 'a list of "a"',
    "ints": "a list of 1",
    "floats": "a list of 1.5",
    "nulls": "a list of null",
    "emptydicts": "a list of {}",
    "nested": "a list of [[[{}]]]",
}


def shaped_review(shape: str, size: int) -> bytes:
    """A review of about ``size`` bytes of this shape."""
    data = _shaped(shape, size)
    return data if abs(len(data) - size) < size // 50 else _shaped(shape, size * size // len(data))


def _shaped(shape: str, size: int) -> bytes:
    obj = job(16)
    spec, containers = obj["spec"]["template"]["spec"], obj["spec"]["template"]["spec"]["containers"]
    if shape == "args":
        for ci, c in enumerate(containers):
            c["args"] = [f"-{ci:x}{i:x}" for i in range(size // 16 // 10)]
    elif shape == "env":
        for c in containers:
            c["env"] = [{"name": f"E{i}", "value": str(i)} for i in range(size // 16 // 32)]
    elif shape == "labels":
        obj["metadata"]["labels"].update({f"k{i}": "v" for i in range(size // 12)})
    elif shape == "keys":
        spec["x"] = {f"{i:x}": 1 for i in range(size // 10)}
    elif shape == "managed":
        obj["metadata"]["managedFields"] = [{"manager": "m", "fieldsV1": {f"f:{i}": {} for i in range(size // 12)}}]
    else:
        value, width = {"strs": ("a", 4), "ints": (1, 2), "floats": (1.5, 4), "nulls": (None, 5),
                        "emptydicts": ({}, 4), "nested": ([[[{}]]], 10)}[shape]
        spec["x"] = [json.loads(json.dumps(value)) for _ in range(size // width)]
    review = json.loads(review_body(obj))
    review["request"]["kind"] = {"group": "batch", "version": "v1", "kind": "Job"}
    return json.dumps(review, separators=(",", ":")).encode()


def cmd_shape_one(args: argparse.Namespace) -> None:
    """In a fresh process: the peak memory (VmHWM, reset before) of one review through the app."""
    import gc

    from trainadmit.server import settings
    from trainadmit.server.app import create_app

    data = shaped_review(args.shape, args.size)
    measured = settings.replace(settings.ServerSettings(), app={"policy_dir": str(ROOT / "policies"), "reload_interval": 3600},
                                limits={"decide_memory_bytes": 1 << 40})  # measure, do not refuse
    app = create_app(measured).test_client()
    app.post("/mutate", data=small_review(), content_type="application/json")
    gc.collect()
    status = Path("/proc/self/status")
    base = int(status.read_text().split("VmRSS:")[1].split()[0]) * 1024
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    code = app.post("/mutate", data=data, content_type="application/json").status_code
    peak = int(status.read_text().split("VmHWM:")[1].split()[0]) * 1024
    print(json.dumps({"bytes": len(data), "status": code, "peak": peak - base}))


def cmd_shapes(args: argparse.Namespace) -> None:
    from trainadmit.server.cost import estimate
    from trainadmit.server.limits import ReadLimits

    budget = ReadLimits().decide_memory_bytes
    print(f"one review of ~{args.size / 1e6:.1f} MB through the app, per shape (MB); budget per worker "
          f"{budget / 1e6:.0f}")
    print(f"{'shape':>10} {'body':>6} {'peak':>6} {'x size':>6} {'estimate':>8} {'est/peak':>8}  what")
    for shape, what in SHAPES.items():
        out = subprocess.run([sys.executable, __file__, "shape-one", shape, str(args.size)], capture_output=True,
                             text=True, check=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        est = estimate(shaped_review(shape, args.size))
        print(f"{shape:>10} {r['bytes'] / 1e6:>6.2f} {r['peak'] / 1e6:>6.0f} {r['peak'] / r['bytes']:>6.0f} "
              f"{est / 1e6:>8.0f} {est / r['peak']:>8.2f}  {what}{'' if est <= budget else ' (refused: 413)'}")


# ---- metric labels --------------------------------------------------------------------------------------


def metric_lines(port: int) -> int:
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=context(), timeout=30) as r:
        return sum(1 for line in r.read().decode().splitlines() if line and not line.startswith("#"))


def cmd_labels(args: argparse.Namespace) -> None:
    rng = random.Random(11)
    server = Server("deadline")
    try:
        post(server.port, "/mutate", small_review(), 10)
        before = metric_lines(server.metrics_port)
        for i in range(args.requests):
            word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(12))
            if i % 3 == 0:
                post(server.port, f"/{word}", b"{}", 10)
            else:
                review = json.loads(review_body({"apiVersion": f"{word}/v1", "kind": word.title(),
                                                 "metadata": {"name": word}}))
                review["request"].update(operation=word.upper(), kind={"group": word, "version": "v1",
                                                                       "kind": word.title()})
                post(server.port, "/mutate" if i % 3 == 1 else "/validate", json.dumps(review).encode(), 10)
        started = time.perf_counter()
        after = metric_lines(server.metrics_port)
        took = time.perf_counter() - started
    finally:
        server.stop()
    print(f"{args.requests} requests with random paths, kinds and operations: /metrics sample lines {before} -> "
          f"{after} (+{after - before}); /metrics answered in {took * 1000:.0f} ms")


# ---- soak -----------------------------------------------------------------------------------------------


def wrk(url: str, connections: int, seconds: float) -> subprocess.Popen:
    return bench_wrk.start(url, small_review(), connections, seconds)


def slope(points: list[tuple[float, float]]) -> float:
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)


def cmd_soak(args: argparse.Namespace) -> None:
    server = Server("deadline", extra=None if args.max_requests is None else ["--max-requests", str(args.max_requests)])
    try:
        load = wrk(f"https://127.0.0.1:{server.port}/mutate", args.connections, args.minutes * 60)
        t0 = time.monotonic()
        points, seen = [], set(server.workers())
        while load.poll() is None:
            _, _, workers = server.memory()
            seen |= set(workers)
            if workers:
                points.append((time.monotonic() - t0, sum(workers.values()) / 1e6))
            time.sleep(10)
        result = bench_wrk.result(load)
    finally:
        server.stop()
    quarter = max(1, len(points) // 4)  # memory is sampled every 10 s: a short soak has a handful of points
    first, last = points[:quarter], points[-quarter:]
    print(f"soak {args.minutes} min, {args.connections} connections on /mutate: {result['requests']:,} requests, "
          f"{result['rps']:.0f}/s, p50 {result['p50_ms']:.1f} ms, p99 {result['p99_ms']:.1f} ms, non-2xx "
          f"{result['non_2xx']}, socket errors {result['socket_errors']} {result['errors_by_kind']}; workers started "
          f"{len(seen)} (2 at start)")
    if len(points) < 2:
        return print("  fewer than two memory samples: soak for a minute or more to see a slope")
    print(f"  worker PSS sum MB: first quarter {statistics.mean(y for _, y in first):.0f}, last quarter "
          f"{statistics.mean(y for _, y in last):.0f}, min {min(y for _, y in points):.0f}, max "
          f"{max(y for _, y in points):.0f}; slope {slope(points) * 60:+.2f} MB/min")
    print("  samples (s:MB): " + " ".join(f"{x:.0f}:{y:.0f}" for x, y in points))


# ---- throughput ---------------------------------------------------------------------------------------


def cmd_tput(args: argparse.Namespace) -> None:
    # recycling off in both: this compares the workers (at these rates the default recycles every ~10 s)
    servers = {v: Server(v, extra=["--max-requests", "0"]) for v in ("deadline", "gthread")}
    try:
        runs: dict[tuple, list[dict]] = {}
        for _ in range(args.rounds):
            for conns in (1, 8):
                for endpoint in ("noop", "mutate"):
                    for variant, server in servers.items():
                        r = bench_wrk.result(wrk(f"https://127.0.0.1:{server.port}/{endpoint}", conns, args.duration))
                        runs.setdefault((conns, endpoint, variant), []).append(r)
        print(f"median of {args.rounds} alternating rounds of {args.duration} s")
        print(f"{'conns':>5} {'endpoint':>8} {'variant':>9} {'req/s':>7} {'p50 ms':>7} {'p99 ms':>7} {'errors':>6}")
        for (conns, endpoint, variant), rs in runs.items():
            med = {k: statistics.median(r[k] for r in rs) for k in ("rps", "p50_ms", "p99_ms")}
            errors = sum(r["non_2xx"] + r["socket_errors"] for r in rs)
            print(f"{conns:>5} {endpoint:>8} {variant:>9} {med['rps']:>7.0f} {med['p50_ms']:>7.2f} "
                  f"{med['p99_ms']:>7.2f} {errors:>6}")
        print("deadline : gthread")
        for conns in (1, 8):
            for endpoint in ("noop", "mutate"):
                d, g = runs[(conns, endpoint, "deadline")], runs[(conns, endpoint, "gthread")]
                ratio = {k: statistics.median(r[k] for r in d) / statistics.median(r[k] for r in g)
                         for k in ("rps", "p50_ms", "p99_ms")}
                print(f"  {conns} conn {endpoint:>6}: throughput {ratio['rps']:.2f}x, p50 {ratio['p50_ms']:.2f}x, "
                      f"p99 {ratio['p99_ms']:.2f}x")
    finally:
        for server in servers.values():
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="scenario", required=True)
    slow = sub.add_parser("slow")
    slow.add_argument("--head", type=int, default=64)
    slow.add_argument("--body", type=int, default=16)
    slow.add_argument("--hs-stall", type=int, default=16)
    slow.add_argument("--probes", type=int, default=20)
    slow.add_argument("--variants", default="gthread,deadline")
    memory = sub.add_parser("memory")
    memory.add_argument("--size", type=int, default=2_500_000)
    memory.add_argument("--shape", choices=sorted(SHAPES), default="args")
    memory.add_argument("--concurrency", type=int, default=16)
    memory.add_argument("--rounds", type=int, default=3)
    memory.add_argument("--variants", default="gthread,deadline")
    shapes = sub.add_parser("shapes")
    shapes.add_argument("--size", type=int, default=2_700_000)
    one = sub.add_parser("shape-one")
    one.add_argument("shape", choices=sorted(SHAPES))
    one.add_argument("size", type=int)
    labels = sub.add_parser("labels")
    labels.add_argument("--requests", type=int, default=2000)
    soak = sub.add_parser("soak")
    soak.add_argument("--minutes", type=float, default=10)
    soak.add_argument("--connections", type=int, default=8)
    soak.add_argument("--max-requests", type=int, help="recycle workers this often (default: serve's; 0: never)")
    tput = sub.add_parser("tput")
    tput.add_argument("--duration", type=int, default=5)
    tput.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.scenario in ("soak", "tput") and not shutil.which("wrk"):
        raise SystemExit("wrk not found: apt-get install wrk")
    {"slow": cmd_slow, "memory": cmd_memory, "shapes": cmd_shapes, "shape-one": cmd_shape_one, "labels": cmd_labels,
     "soak": cmd_soak, "tput": cmd_tput}[args.scenario](args)


if __name__ == "__main__":
    main()
